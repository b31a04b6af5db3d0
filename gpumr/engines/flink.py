"""The Flink engine: a job's tasks as a PyFlink DataStream job in BATCH mode, on Flink's embedded cluster or a
running one.

Run::

    gpumr run faces frames.seq/ -o out/ --engine flink [--parallelism N]
    gpumr run faces /shared/frames.seq -o /shared/out --engine flink --jobmanager HOST:8081

Each phase is one Flink job: the calls' indices are a bounded source,
spread over ``--parallelism`` subtasks, and the task function is a map in
Python workers of their own (processes, also on the embedded cluster), whose
results the launcher collects. Side files reach a running cluster's workers
with the job (``add_python_file``). A failed subtask (a killed worker) ends the job in one
line, nothing published: Flink's collect sink cannot take a restarted job's
results without checkpoints (:data:`RESTARTS`). With ``--device gpu``
the map asks for Flink's ``gpu`` external resource, so that it runs only
in task slots of TaskManagers that declare GPUs (the embedded cluster
declares this machine's). Flink's own log is off unless ``--debug``.
:doc:`/how-to/flink`.
"""

import contextlib
import functools
import os
import sys

from ..boundary import interrupt_with
from ..errors import GpumrError
from .base import Engine
from .jvm import failure, quiet_interrupt
from .mapreduce import answer, map_reduce
from .processes import scratch_in, workers_here

#: Flink restarts no failed subtask: its collect sink cannot take a restarted job's results without
#: checkpoints, so a killed worker ends the job in one line, nothing published.
RESTARTS = 0


class _Call:
    """The map: run call ``i`` (its index is the element), a map task given this node's side files."""

    def __init__(self, phase, function, calls, folder):
        self.phase, self.function, self.calls, self.folder = phase, function, calls, folder

    def __call__(self, i):
        main = sys.modules.get("__main__")
        if main is not None and not hasattr(main, "print"):  # Beam's worker module, which numba's globals miss
            sys.modules["__main__"] = _plain_main()
        return answer(self.phase, self.function, self.calls[i],
                      find=functools.partial(os.path.join, self.folder) if self.folder else _shipped)


def _plain_main():
    import builtins
    import types
    module = types.ModuleType("__main__")
    module.__dict__.update(vars(builtins))
    return module


def _shipped(name):
    """A side file Flink shipped with the job (``add_python_file``: a folder on the worker's ``sys.path``)."""
    for folder in sys.path:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return name


class FlinkEngine(Engine):
    """``--engine flink``."""

    reports_tasks = True  # (map_reduce hears each task end)
    name = "flink"
    help = "Apache Flink (PyFlink): its embedded local cluster, or a running one (--jobmanager)"

    def add_options(self, group):
        group.add_argument("--jobmanager", metavar="HOST:PORT",
                           help="engine flink: a running cluster's JobManager REST address, e.g. localhost:8081 "
                                "(default: an embedded cluster of this machine)")
        group.add_argument("--parallelism", type=int, default=None, metavar="N",
                           help="engine flink: parallel subtasks of the map (default: as many as this machine's cores "
                                "hold tasks, the cluster's default on a running one)")

    def check(self, o):
        from .. import limits
        if o.parallelism is not None:
            limits.number("--parallelism", o.parallelism, 1, 100000, integer=True)
        if o.jobmanager is not None:
            host, _, port = o.jobmanager.rpartition(":")
            if "://" in o.jobmanager or "@" in o.jobmanager or not host or not port.isdigit() \
                    or not 0 < int(port) < 65536:
                raise GpumrError(f"--jobmanager {o.jobmanager.rpartition('@')[2]}: give HOST:PORT, the "
                                 "JobManager's REST address (e.g. localhost:8081)")

    def tasks_here(self, o):
        return o.jobmanager is None

    def run(self, plan, job):
        interrupt_with(quiet_interrupt)  # (before the first Py4J call: else Py4J, interrupted mid-call, logs a traceback)
        env = _environment(plan, job)
        from pyflink.common import Types
        here = self.tasks_here(plan.o)
        if not here:
            for side in plan.side:
                env.add_python_file(side.path)
        group = _gpu_group() if plan.o.device == "gpu" else None

        def execute(phase, function, calls):
            with scratch_in(job.folder):  # (PyFlink leaves the folder it writes the collection in)
                source = env.from_collection(list(range(len(calls))), type_info=Types.INT())
            mapped = source.rebalance().map(_Call(phase, function, calls, plan.folder if here else None),
                                            output_type=Types.PICKLED_BYTE_ARRAY())
            if group is not None and phase == "map":
                mapped = mapped.slot_sharing_group(group)
            seen = set()
            with mapped.execute_and_collect(f"gpumr {plan.ref.name} {phase} {plan.spec.job}") as results:
                for result in _failing_as_one_line(results):
                    if "error" in result:
                        raise GpumrError(result["error"])
                    if result["value"]["index"] not in seen:  # (a restarted subtask's results may come again)
                        seen.add(result["value"]["index"])
                        yield result["value"]
        try:
            return map_reduce(plan, job, execute)
        except KeyboardInterrupt:
            quiet_interrupt()
            raise


def _failing_as_one_line(results):
    """``results``, a Flink job that fails (not a task's own error: those are results) ending in one line."""
    from py4j.protocol import Py4JJavaError
    try:
        yield from results
    except Py4JJavaError as exc:
        raise GpumrError(failure(exc, "flink")) from None


def _environment(plan, job):
    """The job's StreamExecutionEnvironment: BATCH mode, this Python in the workers, restarts, quiet."""
    try:
        from pyflink.common import Configuration
        from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    except ImportError:
        raise GpumrError("--engine flink needs PyFlink: pip install 'gpumr[flink]'") from None
    o = plan.o
    # Python workers in processes of their own (as on any cluster), not threads of the launcher.
    os.environ["_python_worker_execution_mode"] = "process"
    os.environ["TMPDIR"] = job.folder  # (the gateway JVM and its Python workers: their scratch files go with the job)
    if not job.debug:
        os.environ.setdefault("FLINK_LOG_DIR", job.folder)  # (read when the gateway JVM starts: its log file)
    conf = Configuration()
    settings = {"python.executable": sys.executable, "python.client.executable": sys.executable,
                "restart-strategy.type": "fixed-delay" if RESTARTS else "none",
                "restart-strategy.fixed-delay.attempts": str(RESTARTS)}
    if o.jobmanager:
        host, _, port = o.jobmanager.rpartition(":")
        settings.update({"execution.target": "remote", "rest.address": host, "rest.port": port})
    else:  # the embedded cluster's scratch files in the job's folder (else /tmp/flink-web-upload stays)
        settings.update({"web.upload.dir": job.folder, "io.tmp.dirs": job.folder})
        if o.device == "gpu":
            from ..devices.nvml import discover
            settings.update({"external-resources": "gpu", "external-resource.gpu.amount": str(len(discover().gpus))})
    for key, value in settings.items():
        conf.set_string(key, value)
    with scratch_in(job.folder), contextlib.redirect_stdout(sys.stderr):  # (PyFlink's gateway leaves a folder on Ctrl-C)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    if o.parallelism or not o.jobmanager:
        env.set_parallelism(o.parallelism or workers_here(o, plan.workload))
    return env


def _gpu_group():
    """A slot sharing group whose slots hold one of Flink's ``gpu`` external resource."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder("gpumr-gpu").set_cpu_cores(1.0).set_task_heap_memory_mb(256)
            .set_external_resource("gpu", 1.0).build())


def engine(name):
    return FlinkEngine(name)
