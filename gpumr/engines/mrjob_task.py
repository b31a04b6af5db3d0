"""The mrjob job every gpumr job runs as: the task script mrjob's runners start (``python mrjob_task.py --mapper``).

Its input is the launcher's task files (one item per line, JSON: a split
of a SequenceFile or one of the workload's records); its only options are
the job's task spec (``--gpumr-spec``, a file shipped with the job), the
reducers, ``--hadoop-splits`` (Hadoop's own SequenceFile input format
reads the inputs instead) and ``--gpumr-side-dir`` (where the side files
are, for tasks on the launcher's machine). Each map task runs the one task runtime
(:class:`gpumr.tasks.runtime.Task`); the reducer is the identity. Lines
pass through as they are (``json(key)<TAB>json(value)``), so the output is
the same bytes as every other engine's.

It is started by :mod:`gpumr.engines.mrjob` only: run as a program without
mrjob's task switches it says so and exits (the job's checks are the
launcher's: ``gpumr run``).
"""

import functools
import importlib
import json
import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run as a script: this folder's modules (dask.py, spark.py) must not hide the packages

from mrjob.job import MRJob  # noqa: E402

from gpumr.boundary import logger  # noqa: E402
from mrjob.protocol import RawProtocol, RawValueProtocol  # noqa: E402
from mrjob.step import MRStep  # noqa: E402

#: Hadoop's input format that gives a SequenceFile's records as ``key<TAB>hex bytes`` lines.
TEXT_INPUT_FORMAT = "org.apache.hadoop.mapred.SequenceFileAsTextInputFormat"
#: The switches mrjob gives the script it runs as a task.
TASK_SWITCHES = frozenset(("--mapper", "--reducer", "--combiner", "--step-num", "--spark"))
log = logger("gpumr.tasks")


class MRWorkload(MRJob):
    """Any gpumr workload, through mrjob: its tasks run the task runtime over the launcher's task files."""

    INPUT_PROTOCOL = RawValueProtocol
    INTERNAL_PROTOCOL = RawProtocol
    OUTPUT_PROTOCOL = RawProtocol

    def configure_args(self):
        super().configure_args()
        self.add_file_arg("--gpumr-spec", help="the job's task spec (written by gpumr run's launcher)")
        self.add_passthru_arg("--reducers", type=int, default=1, help="reduce tasks (0: none)")
        self.add_passthru_arg("--cat-reducer", action="store_true",
                              help="reduce with cat, not Python (the launcher's choice where the runner runs commands)")
        self.add_passthru_arg("--hadoop-splits", action="store_true",
                              help="Hadoop's SequenceFile input format reads the inputs (hadoop and emr)")
        self.add_passthru_arg("--gpumr-side-dir", help="the folder that holds the job's side files, where tasks run "
                              "on the launcher's machine (inline and local): else they are shipped with the job")

    def make_runner(self):
        """mrjob's runner for this job, its module imported with pyspark hidden from it.

        mrjob's runners (``mrjob.bin``) import pyspark, where it is installed,
        only to find ``spark-submit`` for mrjob's own Spark runner, which gpumr
        never uses (gpumr's Spark engine is its own): that import was 0.1-0.2 s
        of every local, Hadoop and EMR job's start. A pyspark this process has
        already imported is left as it is; later imports of it are unaffected.
        """
        if "mrjob.bin" not in sys.modules and "pyspark" not in sys.modules:
            sys.modules["pyspark"] = None  # (importing it raises ImportError: mrjob.bin's pyspark is None)
            try:
                importlib.import_module("mrjob.bin")
            finally:
                del sys.modules["pyspark"]
        return super().make_runner()

    def steps(self):
        mapper = dict(mapper_init=self.task_init, mapper_final=self.task_final,
                      mapper=self.mapper_text if self.options.hadoop_splits else self.mapper_item)
        if self.options.reducers == 0:
            return [MRStep(**mapper)]
        if self.options.cat_reducer:
            # The identity reducer as a command: the sorted lines pass as they are, with no Python started per
            # reduce task (the same bytes as :meth:`reducer` writes through RawProtocol).
            return [MRStep(reducer_cmd="cat", **mapper)]
        return [MRStep(reducer=self.reducer, **mapper)]

    def hadoop_input_format(self):
        return TEXT_INPUT_FORMAT if self.options.hadoop_splits else None

    def jobconf(self):
        return dict(super().jobconf(), **{"mapreduce.job.reduces": str(self.options.reducers)})

    # -- tasks -----------------------------------------------------------------------------------
    def task_init(self):
        from gpumr.core.counters import GROUP
        from gpumr.tasks.runtime import Spec, Task
        with open(self.options.gpumr_spec, encoding="utf-8") as f:
            spec = Spec.from_json(f.read())
        # the side files: in the launcher's folder (inline, local), else shipped into the task's working folder
        folder = self.options.gpumr_side_dir or os.path.dirname(os.path.abspath(self.options.gpumr_spec))
        self.task = Task(spec, find=functools.partial(os.path.join, folder),
                         count=lambda name, n: self.increment_counter(GROUP, name, n))
        self.task.open()
        log.debug("task %s started", self.task.attempt)

    def _pairs(self, lines):
        for text in lines:
            key, _, value = text.partition("\t")
            yield key, value

    def mapper_item(self, _, line):
        """One line of a task file: a split or a record."""
        yield from self._pairs(self.task.feed(json.loads(line)))

    def mapper_text(self, _, line):
        """One ``key<TAB>hex bytes`` line of Hadoop's SequenceFileAsTextInputFormat: a record."""
        key, _, hexed = line.partition("\t")
        try:
            value = bytes.fromhex(hexed)
        except ValueError:
            yield from self._pairs([self.task.refuse(key, "value is not the hex text SequenceFileAsTextInputFormat "
                                                          "gives")])
            return
        yield from self._pairs(self.task.feed(["record", key, value]))

    def task_final(self):
        from gpumr.io.remote import locate
        from gpumr.tasks.output import ARRAYS, ARRAYS_DONE
        yield from self._pairs(self.task.close())
        log.debug("task %s done: %s", self.task.attempt, self.task.counts)
        written = self.task.arrays.written
        if written:  # the launcher publishes the arrays of the attempts that finished
            stage = locate(self.task.spec.stage)
            stage.child(f"{ARRAYS}/{self.task.attempt}/{ARRAYS_DONE}").write_bytes(json.dumps(written).encode())

    def reducer(self, key, values):
        for value in values:
            yield key, value


def main():
    """The script mrjob starts for each task; started otherwise, one line saying what to run instead."""
    from gpumr.errors import GpumrError
    if not TASK_SWITCHES.intersection(a.partition("=")[0] for a in sys.argv[1:]):
        raise GpumrError("this is the task script mrjob's runners start; run the job with: gpumr run WORKLOAD "
                         "INPUT... -o OUT --engine inline|local|hadoop|emr")
    MRWorkload.run()


if __name__ == "__main__":
    from gpumr.boundary import main as _guarded
    _guarded(main)
