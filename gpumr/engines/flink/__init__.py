"""The Flink engine: a job's tasks as a PyFlink DataStream job in BATCH mode, on Flink's embedded cluster or a running
one.

Flink's ports (PyFlink's gateway, REST, RPC, the Python workers' gRPC) take anyone's connections and gpumr cannot
make them ask for the job's secret, so on a node where another person has processes the job is refused unless the
user accepts that (``--allow-open-ports``, :meth:`gpumr.engines.start.Start.require_private_ports`). How to run it:
:doc:`/how-to/flink`."""

import contextlib
import os
import sys

from ...core.workload import Option
from ...errors import GpumrError
from ...signals import interrupt_with
from ..jvm import failure, quiet_interrupt
from ..mapreduce import Pool, PoolEngine, answer, answered
from ..processes import workers_here

#: Flink restarts no failed subtask: its collect sink cannot take a restarted job's results without
#: checkpoints, so a killed worker ends the job in one line, nothing published.
RESTARTS = 0
#: What of Flink takes anyone's connections (said when a shared node refuses the job).
OPEN_PORTS = "PyFlink's gateway and Flink's own ports (REST, RPC, the Python workers' gRPC)"


class _Call:
    """The map: run call ``i`` (its index is the element), a map task given this node's side files."""

    def __init__(self, phase, function, calls, folder):
        self.phase, self.function, self.calls, self.folder = phase, function, calls, folder

    def __call__(self, i):
        main = sys.modules.get("__main__")
        if main is not None and not hasattr(main, "print"):  # Beam's worker module, which numba's globals miss
            sys.modules["__main__"] = _plain_main()
        from ...tasks.runtime import SideFiles
        return answer(self.phase, self.function, self.calls[i],
                      find=SideFiles(self.folder) if self.folder else SideFiles(*sys.path))  # (add_python_file's)


def _plain_main():
    import builtins
    import types
    module = types.ModuleType("__main__")
    module.__dict__.update(vars(builtins))
    return module


def _jobmanager(value):
    """``--jobmanager``'s value, checked: HOST:PORT."""
    host, _, port = value.rpartition(":")
    if "://" in value or "@" in value or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GpumrError(f"--jobmanager {value.rpartition('@')[2]}: give HOST:PORT, the JobManager's REST address "
                         "(e.g. localhost:8081)")
    return value


class FlinkEngine(PoolEngine):
    """``--engine flink``."""

    name = "flink"
    help = "Apache Flink (PyFlink): its embedded local cluster, or a running one (--jobmanager)"
    options = (
        Option("--jobmanager", "engine flink: a running cluster's JobManager REST address, e.g. localhost:8081 "
                               "(default: an embedded cluster of this machine)", metavar="HOST:PORT"),
        Option("--parallelism", "engine flink: parallel subtasks of the map (default: as many as this machine's "
                                "cores hold tasks, the cluster's default on a running one)",
               type=int, metavar="N", least=1, most=100000),
    )

    def check(self, options):
        if options.jobmanager is not None:
            _jobmanager(options.jobmanager)

    def tasks_here(self, options):
        return options.jobmanager is None

    def would_run(self, plan):
        where = f"the running cluster {plan.options.jobmanager}" if plan.options.jobmanager else "an embedded cluster"
        return [f"Flink: PyFlink's gateway here and {where}; its ports take anyone's connections, so a node other "
                "people use refuses it without --allow-open-ports"]

    @contextlib.contextmanager
    def session(self, plan, job):
        job.start.require_private_ports(self.name, OPEN_PORTS)
        interrupt_with(quiet_interrupt)  # (before the first Py4J call: else Py4J, interrupted mid-call, logs a traceback)
        env = _environment(plan, job)
        here = self.tasks_here(plan.options)
        if not here:
            for side in plan.side:
                env.add_python_file(side.path)
        yield FlinkPool(env, plan, job, here)


class FlinkPool(Pool):
    """A job's phases as Flink jobs of one execution environment."""

    engine = "flink"

    def __init__(self, env, plan, job, here):
        self.env, self.plan, self.job, self.here = env, plan, job, here
        self.group = _gpu_group() if plan.options.device == "gpu" else None

    def execute(self, phase, function, calls):
        from pyflink.common import Types
        plan = self.plan
        with scratch_in(self.job.folder):  # (PyFlink leaves the folder it writes the collection in)
            source = self.env.from_collection(list(range(len(calls))), type_info=Types.INT())
        mapped = source.rebalance().map(_Call(phase, function, calls, plan.folder if self.here else None),
                                        output_type=Types.PICKLED_BYTE_ARRAY())
        if self.group is not None and phase == "map":
            mapped = mapped.slot_sharing_group(self.group)
        seen = set()
        with mapped.execute_and_collect(f"gpumr {plan.ref.name} {phase} {plan.spec.job}") as results:
            for result in results:
                value = answered(result)
                if value["index"] not in seen:  # (a restarted subtask's results may come again)
                    seen.add(value["index"])
                    yield value

    def end(self, exc):
        if isinstance(exc, KeyboardInterrupt):
            quiet_interrupt()

    def failure(self, exc):
        return failure(exc, "flink")


def _environment(plan, job):
    """The job's StreamExecutionEnvironment: BATCH mode, this Python in the workers, restarts, quiet; its gateway
    started through the job's :class:`gpumr.engines.start.Start`."""
    try:
        from pyflink.common import Configuration
        from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    except ImportError:
        raise GpumrError("--engine flink needs PyFlink: pip install 'gpumr[flink]'") from None
    options, start = plan.options, job.start
    settings = {"python.executable": sys.executable, "python.client.executable": sys.executable,
                "restart-strategy.type": "fixed-delay" if RESTARTS else "none",
                "restart-strategy.fixed-delay.attempts": str(RESTARTS)}
    if options.jobmanager:
        host, _, port = options.jobmanager.rpartition(":")
        settings.update({"execution.target": "remote", "rest.address": host, "rest.port": port})
    else:  # the embedded cluster's scratch files in the job's folder, its ports on this machine's loopback only
        settings.update({"web.upload.dir": job.folder, "io.tmp.dirs": job.folder, "rest.bind-address": "127.0.0.1",
                         "rest.address": "127.0.0.1", "web.submit.enable": "false", "web.cancel.enable": "false"})
        if options.device == "gpu":
            from ...devices.nvml import discover
            settings.update({"external-resources": "gpu", "external-resource.gpu.amount": str(len(discover().gpus))})
    # Python workers in processes of their own (as on any cluster), not in a server of the launcher (PyFlink
    # reads this when a job runs); the gateway's log in the job's log folder.
    os.environ["_python_worker_execution_mode"] = "process"
    extra = {"FLINK_LOG_DIR": start.logs, "_python_worker_execution_mode": "process"}
    with start.inherited(secrets=False, extra=extra), scratch_in(job.folder), \
            contextlib.redirect_stdout(sys.stderr):  # (PyFlink's gateway leaves a folder on Ctrl-C)
        conf = Configuration()  # (its first Java object: the gateway JVM starts here, so inside the block)
        for key, value in settings.items():
            conf.set_string(key, value)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    if options.parallelism or not options.jobmanager:
        env.set_parallelism(options.parallelism or workers_here(options, plan.workload))
    return env


def _gpu_group():
    """A slot sharing group whose slots hold one of Flink's ``gpu`` external resource."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder("gpumr-gpu").set_cpu_cores(1.0).set_task_heap_memory_mb(256)
            .set_external_resource("gpu", 1.0).build())


@contextlib.contextmanager
def scratch_in(folder):
    """Python's default scratch folder (:func:`tempfile.gettempdir`) is ``folder`` for the block, then as it was.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder, scratch_in(folder):
    ...     tempfile.mkdtemp().startswith(folder)
    True
    """
    import tempfile
    tempfile.gettempdir()  # (so that the value put back is the one in use, not None)
    saved, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield
    finally:
        tempfile.tempdir = saved


def engine(name):
    return FlinkEngine(name)
