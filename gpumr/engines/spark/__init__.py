"""The Spark engine: a job's tasks as a Spark application, on a local, local-cluster, standalone or YARN master.

How to run it, and why tasks read splits themselves: :doc:`/how-to/spark`."""

import contextlib
import os
import sys
import tempfile
import time

from ...boundary import describe
from ...core.workload import Option
from ...errors import GpumrError
from ...log import logger
from ...signals import interrupt_with
from ..jvm import failure, last_words, quiet_interrupt, quiet_log4j
from ..mapreduce import Pool, PoolEngine, call
from ..processes import stderr_to, workers_here

log = logger(__name__)

#: The longest the driver waits for a failed job's tasks of a caller's context to end before the stage is dropped.
END_TASKS_TIMEOUT = 60


# -- in the executors -------------------------------------------------------------------------------
def _task_gpus():
    """GPU indices Spark assigned to this task (``spark.task.resource.gpu.amount``), or None."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    info = ctx.resources().get("gpu") if ctx is not None else None
    if info is None:
        return None
    return [int(a) for a in info.addresses]


def _call(phase, function, args):
    """One task: a map task given Spark's shipped files and its assigned GPUs."""
    from pyspark import SparkFiles

    from ...tasks.runtime import SideFiles
    return call(phase, function, args, find=SideFiles(SparkFiles.getRootDirectory()),
                gpus=_task_gpus() if phase == "map" else None)


# -- in the driver ----------------------------------------------------------------------------------
class SparkEngine(PoolEngine):
    """``--engine spark``."""

    name = "spark"
    help = "a Spark application (--master; local[N] by default, spark-submit's when started by it)"
    options = (
        Option("--master", "engine spark: the master (default: spark-submit's, else local[N], N as many tasks as "
                           "this machine's cores hold), e.g. local-cluster[2,1,1024], yarn", metavar="URL"),
    )

    def tasks_here(self, options):
        """Whether the executors run on this machine: a local master (the default outside spark-submit)."""
        if options.master is None:
            return "PYSPARK_GATEWAY_PORT" not in os.environ  # else spark-submit started us, with its master
        return options.master.startswith("local")

    def master(self, plan):
        """The master of a context this engine starts: ``--master``; else spark-submit's (None), or ``local[N]``
        with as many task slots as this machine's cores hold tasks (:func:`gpumr.engines.processes.workers_here`)."""
        if plan.options.master is None and self.tasks_here(plan.options):
            return f"local[{workers_here(plan.options, plan.workload)}]"
        return plan.options.master

    def would_run(self, plan):
        return [f"Spark: a context on master {self.master(plan) or 'of spark-submit'}, its ports authenticated by a "
                "secret made for the job, no web UI"]

    @contextlib.contextmanager
    def session(self, plan, job):
        _import_pyspark()
        from py4j.protocol import Py4JJavaError
        sc, own = job.session, job.session is None
        try:
            if own:
                sc = spark_context(self.master(plan), f"gpumr {plan.ref.name}", start=job.start)
            try:
                group = f"gpumr-{plan.spec.job}"
                for side in plan.side:
                    _add_file(sc, side.path)
                sc.setJobGroup(group, f"gpumr {plan.ref.name}", interruptOnCancel=True)
                yield SparkPool(sc, own, group)
            finally:
                if own:
                    _stop(sc)
        except Py4JJavaError as exc:
            raise GpumrError(failure(exc, "spark")) from exc


class SparkPool(Pool):
    """A job's tasks as Spark jobs of one context, in one job group."""

    engine = "spark"

    def __init__(self, sc, own, group):
        self.sc, self.own, self.group = sc, own, group

    def execute(self, phase, function, calls):
        rdd = self.sc.parallelize(range(len(calls)), max(1, len(calls)))
        yield from rdd.map(lambda i: _call(phase, function, calls[i])).collect()

    def end(self, exc):
        """Stop every task of the job, so that none writes into the stage once it is removed: a context gpumr started
        is stopped; in a caller's, the group's jobs are cancelled and their running tasks waited for (at most
        :data:`END_TASKS_TIMEOUT` seconds)."""
        if isinstance(exc, KeyboardInterrupt):
            quiet_interrupt()  # the boundary's "gpumr: interrupted" is the one line
        if self.own:
            _stop(self.sc)
            return
        self.sc.cancelJobGroup(self.group)
        tracker = self.sc.statusTracker()
        deadline = time.monotonic() + END_TASKS_TIMEOUT
        while time.monotonic() < deadline:
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(self.group)]
            stages = [tracker.getStageInfo(s) for job in jobs if job for s in job.stageIds]
            if not any(stage and stage.numActiveTasks for stage in stages):
                return
            time.sleep(0.05)

    def failure(self, exc):
        return failure(exc, "spark")


def _import_pyspark():
    """pyspark, or one line naming the extra that installs it."""
    try:
        import py4j  # noqa: F401 (only whether it imports)
        import pyspark  # noqa: F401 (only whether it imports)
    except ImportError:
        raise GpumrError("--engine spark needs PySpark: pip install 'gpumr[spark]'") from None


def _add_file(sc, path):
    """Ship ``path`` (named by its content) to the executors, once per context."""
    import shutil

    from ...trusted import private_temp_dir
    name = os.path.basename(path)
    added = _ADDED.setdefault(id(sc), set())
    if name not in added:
        if not _SERVED:
            _SERVED.append(private_temp_dir("gpumr-spark-files-"))
        served = os.path.join(_SERVED[0], name)
        if not os.path.exists(served):
            try:
                os.link(path, served)
            except OSError:
                shutil.copyfile(path, served)
        sc.addFile(served)
        added.add(name)


_ADDED = {}
_SERVED = []


def _stop(sc):
    """Stop a context gpumr started."""
    import warnings
    signalled = isinstance(sys.exc_info()[1], KeyboardInterrupt)  # (Ctrl-C, and SIGTERM: gpumr.signals.Terminated)
    with warnings.catch_warnings():
        if signalled:
            warnings.filterwarnings("ignore", "Unable to cleanly shutdown Spark JVM", RuntimeWarning)
        try:
            sc.stop()
        except Exception as exc:
            if not signalled:
                raise
            log.debug("Spark's context, stopped after the signal: %s", describe(exc))


def spark_context(master=None, app_name="gpumr", start=None):
    """A SparkContext (the running one if any) whose Python workers run this interpreter. Raises ``GpumrError``: spark
    did not start (a master URL it refuses, no Java): one line."""
    _import_pyspark()
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    debug = start is not None and start.debug
    conf = SparkConf().setAppName(app_name)
    if not debug and not conf.contains("spark.log.level"):
        conf.set("spark.log.level", "OFF")
    if not conf.contains("spark.ui.showConsoleProgress"):
        conf.set("spark.ui.showConsoleProgress", "false")  # (gpumr's own progress is the summary line)
    launched = "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None
    if launched and not conf.contains("spark.driver.extraJavaOptions"):
        # The JVM pyspark starts here logs before spark.log.level applies: a log4j2 profile that logs nothing.
        scratch = f" -Djava.io.tmpdir={start.folder}" if start is not None else ""
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={quiet_log4j()}{scratch}")
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    if not conf.contains("spark.pyspark.python"):
        # (PySpark takes the workers' interpreter from this variable when it starts the JVM itself.)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if start is not None and launched:
        conf.set("spark.ui.enabled", "false")
        conf.set("spark.executorEnv.PYTHONSAFEPATH", "1")
    said = None
    if not debug and launched:
        said = tempfile.TemporaryFile()  # the JVM this starts writes here, not on the user's terminal
    try:
        gateway = None
        with stderr_to(said):
            if start is not None and launched:
                extra = {"SPARK_WORKER_DIR": os.path.join(start.folder, "spark-work"),
                         "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
                with start.inherited(extra=extra):  # (the JVM, and what it starts, inherit these)
                    gateway = launch_gateway(conf)
                conf.set("spark.authenticate", "true").set("spark.authenticate.secret", start.secret)
            sc = SparkContext.getOrCreate(conf) if gateway is None else SparkContext(conf=conf, gateway=gateway)
        interrupt_with(quiet_interrupt)  # (pyspark's own SIGINT handler calls the JVM from the call interrupted)
        server = getattr(sc, "_accumulatorServer", None)
        if server is not None:  # (its socketserver prints a traceback when the JVM goes, e.g. on Ctrl-C)
            server.handle_error = _accumulator_error
        return sc
    except Py4JJavaError as exc:  # the JVM refused the configuration, e.g. a master URL it cannot parse
        raise GpumrError(failure(exc, "spark", "Spark did not start")) from exc
    except RuntimeError as exc:  # PySpark's JVM exited before it answered
        why = last_words(said) or "the lines above say why"
        raise GpumrError(f"Spark did not start{f' (--master {master})' if master else ''}: its Java process "
                         f"exited ({why}; Spark needs Java 17 on PATH or JAVA_HOME)") from exc


def _accumulator_error(request, client_address):
    """pyspark's accumulator server's ``handle_error``: a debug line, not a traceback (gpumr uses no accumulator;
    its connection fails when the JVM ends, as on Ctrl-C)."""
    log.debug("Spark's accumulator connection ended: %s", describe(sys.exc_info()[1]))


def engine(name):
    return SparkEngine(name)
