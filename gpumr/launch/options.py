"""The options every workload takes on every engine, declared once with their limits."""

import argparse

from .. import limits
from ..core.workload import Option
from ..devices.chooser import MODES
from ..devices.protocol import MAX_MEMORY
from ..io.records import DEFAULT_MAX_RECORD_SIZE, max_record_size_arg
from ..sizes import size_arg

#: Bytes of SequenceFile per task by default (engines that cut byte ranges).
DEFAULT_SPLIT = 32 << 20

#: Where records run.
DEVICE = (
    Option("--device", "auto: per record, a GPU if one is free now or will be before the CPU would finish the "
                       "record, else the CPU (default); cpu: never touch CUDA; gpu: wait for a GPU",
           choices=MODES, default="auto"),
    Option("--gpu-slots", f"tasks that may share one GPU at once (default 1, at most {limits.MAX_GPU_SLOTS})",
           type=int, default=1, metavar="N", least=1, most=limits.MAX_GPU_SLOTS),
    Option("--gpu-memory", "device memory a GPU batch needs, e.g. 2GiB (default: the workload's figure for each batch)",
           type=size_arg, default=None, metavar="SIZE", least=1, most=MAX_MEMORY, integer=True),
    Option("--gpu-owner", "on: where the tasks run on this machine, one process per GPU sets a heavy GPU path up "
                          "once (backproject's projections) and runs the tasks' GPU batches (default); off: each "
                          "task sets its GPU up itself", choices=("on", "off"), default="on"),
)

#: The job's shape and its inputs' caps.
JOB = (
    Option("--reducers", "reduce tasks (default 1: one output file, sorted by key); 0: no reduce, output not sorted",
           type=int, default=1, metavar="N", least=0, most=limits.MAX_REDUCERS),
    Option("--split-size", f"bytes of SequenceFile per task (default {DEFAULT_SPLIT >> 20}MiB, at least "
                           f"{limits.MIN_SPLIT_SIZE >> 10}KiB)",
           type=size_arg, default=DEFAULT_SPLIT, metavar="SIZE", least=limits.MIN_SPLIT_SIZE, integer=True),
    Option("--max-record-size", "refuse a record, or a block of a block-compressed file, larger than SIZE once "
                                f"decompressed: an error line, not the task's memory (default "
                                f"{DEFAULT_MAX_RECORD_SIZE >> 20}MiB)",
           type=max_record_size_arg, default=DEFAULT_MAX_RECORD_SIZE, metavar="SIZE"),
)

#: How the job's framework processes start (:mod:`gpumr.engines.start`); the launcher's alone, not the tasks'.
PROCESSES = (
    Option("--framework-logs", "keep the frameworks' own logs (Dask's, Spark's, Flink's, RADICAL-Pilot's, mrjob's) in "
                               "DIR, made private (0700); they may name your files and settings (default: in the "
                               "job's private folder, removed with it)", metavar="DIR"),
    Option("--allow-open-ports", "run an engine whose framework opens ports any local user can connect to (Flink's "
                                 "gateway, RADICAL-Pilot's queues) even where other people use this node",
           action="store_true", default=False),
)

COMMON = DEVICE + JOB


def task_options(workload_cls):
    """Every option a task of this workload reads: the workload's own, then :data:`COMMON`."""
    return (*workload_cls.options, *COMMON)


def check_limits(workload_cls, options):
    """Refuse any option out of its declared limit: one line naming it. Reads no file."""
    for option in task_options(workload_cls):
        value = option.check(getattr(options, option.dest, None))
        if value is not None:
            setattr(options, option.dest, value)


class Checked(argparse.Namespace):
    """The job's options once the launcher checked them (:attr:`gpumr.launch.plan.Plan.options`): read, never
    changed."""

    def __setattr__(self, name, value):
        raise AttributeError(f"the job's options are fixed once checked ({name!r} cannot be set)")

    __delattr__ = __setattr__


def checked(options):
    """``options``'s values as :class:`Checked` options.

    Examples
    --------
    >>> options = checked(argparse.Namespace(reducers=1))
    >>> options.reducers
    1
    >>> options.reducers = 2
    Traceback (most recent call last):
    AttributeError: the job's options are fixed once checked ('reducers' cannot be set)
    """
    fixed = Checked.__new__(Checked)
    fixed.__dict__.update(vars(options))
    return fixed
