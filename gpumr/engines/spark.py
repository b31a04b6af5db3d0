"""The Spark engine: ``gpumr run KIND --engine spark`` (and ``gpumr spark KIND``), a thin shell over the shared engine core.

The options are the workload's declaration, parsed, checked and planned on
the driver by :func:`gpumr.engines.common.prepare` (shared with the Dask
engine); each partition reads its byte ranges through the one split reader
and filesystem layer, runs a :class:`gpumr.engines.common.Task`, and writes
its part into the output transaction's hidden stage under its attempt's
name; the driver publishes one attempt per partition and sums the counters
from one accumulator keyed by partition. ``spark-submit`` runs this file as
a script with the same arguments. How to run it, and why it reads splits
itself instead of through Hadoop's input format: :doc:`/how-to/spark`.
"""

import argparse
import atexit
import os
import re
import secrets
import shutil
import sys
import tempfile
import time

if __name__ == "__main__" and not __package__:  # spark-submit runs this file as a script: run the package's
    from gpumr.boundary import main as _guarded  # module, whose functions the executors can import, inside the
    from gpumr.engines.spark import main as _main, quiet_interrupt as _quiet  # error boundary
    _guarded(_main, on_interrupt=_quiet)

from ..errors import GpumrError  # noqa: E402

from .common import DEFAULT_SPLIT, Task, add_up, open_output, plan_splits, prepare, publish, splits, stage_of  # noqa: E402,F401
from .common import write_part as _write_file  # noqa: E402
from ..workloads import NAMES  # noqa: E402

#: The workloads ``gpumr spark`` runs (every declared one).
JOBS = NAMES
#: The longest the driver waits for a failed job's tasks of a caller's context to end before removing the stage.
END_TASKS_TIMEOUT = 60
#: The command an output of this engine is proved to be from (an earlier one is replaced).
MADE_BY = "gpumr spark"


# -- in the executors -------------------------------------------------------------------------------
def _task_gpus():
    """GPU indices Spark assigned to this task (``spark.task.resource.gpu.amount``), or None."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    info = ctx.resources().get("gpu") if ctx is not None else None
    if info is None:
        return None
    return [int(a) for a in info.addresses]


def run_partition(kind, task_options, counters, items):
    """Process one partition's items (splits or slab lines); yield output lines; add its counters to the accumulator."""
    from pyspark import SparkFiles, TaskContext
    task = Task(kind, task_options, SparkFiles.get, gpus=_task_gpus())
    yield from task.lines(items)
    counters.add({TaskContext.get().partitionId(): task.counts})


def write_part(stage, index, lines):
    """Write partition ``index``'s output ``lines`` into the output's hidden ``stage`` as this attempt's file.

    Returns ``[(index, name, size, sha256)]``: the driver publishes the file
    of the attempt whose result Spark kept as ``part-NNNNN``.
    """
    from pyspark import TaskContext
    name = f"part-{index:05d}.attempt-{TaskContext.get().taskAttemptId()}"
    return [(index, name, *_write_file(stage, name, lines))]


# -- in the driver ----------------------------------------------------------------------------------
def input_splits(paths, split_size):
    """The splits of the SequenceFiles ``paths`` name (:func:`gpumr.engines.common.plan_splits`)."""
    return plan_splits(paths, split_size, "the Spark engine")


def prepare_output(out, inputs=()):
    """Check the output ``out`` (a folder or URI) before the job; return its output transaction."""
    return open_output(out, MADE_BY, inputs)


def _write(result, out):
    """Run the job: every partition of ``result`` written into ``out``'s stage (:func:`write_part`).

    Returns ``(stage, parts)``, the parts to publish ``{name: (staged name, size, sha256)}``.
    """
    target = stage_of(out)
    written = result.mapPartitionsWithIndex(lambda index, lines: write_part(target, index, lines)).collect()
    return target, {f"part-{index:05d}": (name, size, sha) for index, name, size, sha in written}


def _end_tasks(sc, own, group):
    """Stop every task of the job (group ``group``), so that none writes into the stage once it is removed.

    A context gpumr started is stopped; in a caller's, the group's jobs are
    cancelled and their running tasks waited for (at most
    :data:`END_TASKS_TIMEOUT` seconds).
    """
    if own:
        sc.stop()
        return
    try:
        sc.cancelJobGroup(group)
        tracker = sc.statusTracker()
        deadline = time.monotonic() + END_TASKS_TIMEOUT
        while time.monotonic() < deadline:
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
            stages = [tracker.getStageInfo(s) for job in jobs if job for s in job.stageIds]
            if not any(stage and stage.numActiveTasks for stage in stages):
                return
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 (a context that died meanwhile runs no task; the job's own error is reported)
        pass


class _CountsParam:
    """Accumulator of ``{partition id: {counter: n}}``: a re-run partition replaces its counts."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        a.update(b)
        return a


def _master_option(parser):
    parser.add_argument("--master", default=None, metavar="URL",
                        help="Spark master (default: spark-submit's, else local[*]), e.g. local-cluster[2,1,1024], yarn")


def parse(kind, argv, folder):
    """The options of a ``gpumr spark KIND`` command line, checked and planned (:func:`gpumr.engines.common.prepare`)."""
    master = argparse.ArgumentParser(add_help=False)
    _master_option(master)
    here = _executors_here(master.parse_known_args(argv)[0].master)
    return prepare(kind, argv, "spark", MADE_BY, folder, here, _master_option)


def _executors_here(master):
    """Whether the executors run on this machine: a local master (the default outside spark-submit)."""
    if master is None:
        return "PYSPARK_GATEWAY_PORT" not in os.environ  # else spark-submit started us, with its master
    return master.startswith("local")


def spark_context(master=None, app_name="gpumr", debug=False):
    """A SparkContext (the running one if any) whose Python workers run this interpreter.

    Spark's own log is off unless ``debug`` (or ``spark.log.level`` is set):
    gpumr reports a failure itself, in one line (:func:`failure`).

    Raises
    ------
    GpumrError
        Spark did not start (a master URL it refuses, no Java): one line.
    """
    from pyspark import SparkConf, SparkContext
    conf = SparkConf().setAppName(app_name)
    if not debug and not conf.contains("spark.log.level"):
        conf.set("spark.log.level", "OFF")
    if not conf.contains("spark.ui.showConsoleProgress"):
        conf.set("spark.ui.showConsoleProgress", "false")  # (gpumr's own progress is the summary line)
    if "PYSPARK_GATEWAY_PORT" not in os.environ and not conf.contains("spark.driver.extraJavaOptions"):
        # The JVM pyspark starts here logs before spark.log.level applies: a log4j2 profile that logs nothing.
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_quiet_log4j()}")
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    if not conf.contains("spark.pyspark.python"):
        # (PySpark takes the workers' interpreter from this variable when it starts the JVM itself.)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from py4j.protocol import Py4JJavaError
    try:
        sc = SparkContext.getOrCreate(conf)
        _interrupt_quietly()
        return sc
    except Py4JJavaError as exc:  # the JVM refused the configuration, e.g. a master URL it cannot parse
        raise GpumrError(failure(exc, "Spark did not start")) from exc
    except RuntimeError as exc:  # PySpark's JVM exited before it answered (its own lines above say why)
        raise GpumrError(f"Spark did not start{f' (--master {master})' if master else ''}: its Java process "
                         "exited (the lines above say why; Spark needs Java 17 on PATH or JAVA_HOME)") from exc


def run(kind, argv, sc=None, debug=False):
    """Run workload ``kind`` on Spark with the command line ``argv``.

    Parameters
    ----------
    kind : {"faces", "backproject"}
    argv : list of str
        Engine options (``-o``, ``--master``, ``--split-size`` or ``--slab``) and the job's.
    sc : pyspark.SparkContext, optional
        Run there (tests share one cluster); by default one is made (and stopped) from ``--master``.
    debug : bool
        Keep Spark's log in a context made here (otherwise off: a failure is one line).

    Returns
    -------
    (dict, float)
        The summed gpumr counters and the wall time in seconds.

    Raises
    ------
    GpumrError
        For a bad option or input (before any task), or a failed job: the
        failing task's own error, in one line (:func:`failure`); the Spark
        error is its ``__cause__``.
    """
    # File options fetched from URIs go here. Spark serves shipped files for the context's life (an
    # executor started later fetches them again): with a context of the caller's, they stay till exit.
    folder = tempfile.mkdtemp(prefix="gpumr-spark-")
    if sc is not None:
        atexit.register(shutil.rmtree, folder, True)
        return _run(kind, argv, sc, debug, folder)
    try:
        return _run(kind, argv, sc, debug, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(kind, argv, sc, debug, folder):
    o = parse(kind, argv, folder)
    out, items = o.out, o.items
    from py4j.protocol import Py4JJavaError
    own = sc is None
    if own:
        sc = spark_context(o.master, f"gpumr {kind}", debug=debug)
    t0 = time.perf_counter()
    group = f"gpumr-{kind}-{secrets.token_hex(8)}"
    try:
        try:
            for _, path, _ in o.side:
                sc.addFile(path)
            counters = sc.accumulator({}, _CountsParam())
            task_options = o.task
            processed = sc.parallelize(items, max(1, len(items))).mapPartitions(
                lambda it: run_partition(kind, task_options, counters, it))
            if o.reducers == 0:
                result = processed
            else:
                pairs = processed.map(lambda line: (line, None))
                if o.reducers == 1:  # no sampling pass: one shuffle into one sorted partition
                    pairs = pairs.partitionBy(1)
                else:
                    from pyspark import StorageLevel
                    pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)  # sortByKey samples it first
                result = pairs.sortByKey(numPartitions=o.reducers).keys()
            sc.setJobGroup(group, f"gpumr {kind}", interruptOnCancel=True)
            stage, parts = _write(result, out)
        except BaseException:
            _end_tasks(sc, own, group)
            out.abort()
            raise
        finally:
            if own:
                sc.stop()
        publish(out, stage, parts)
        return add_up(counters.value.values()), time.perf_counter() - t0
    except Py4JJavaError as exc:
        raise GpumrError(failure(exc)) from exc


#: The last line of a Python traceback inside a Spark error's text: "module.Type: message".
_PYTHON_ERROR = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*\n|\n)*?([A-Za-z_][\w.]*(?::[^\n]*)?)\n")
#: Errors whose message is meant for the user as it is (the CLI shows them without their type): gpumr's
#: and seqfile's error classes, by name (a traceback names them with their module).
_USER_ERRORS = frozenset({"GpumrError", "Unavailable", "KeyRefused", "SequenceFileError", "RecordError",
                          "CodecError"})


def failure(exc, what="the Spark job failed"):
    """One line saying why a Spark job failed (or ``what`` else did), from its error ``exc`` (a ``Py4JJavaError``).

    The failing task's Python error where there is one (a gpumr error's
    message as it is; another error as ``Type: message``), else the first
    line of the Java error.
    """
    text = str(exc)
    found = _PYTHON_ERROR.search(text)
    if found:
        kind, _, message = found.group(1).partition(":")
        if kind.rsplit(".", 1)[-1] in _USER_ERRORS:
            return f"a Spark task failed: {message.strip()}"
        return f"a Spark task failed: {kind.rsplit('.', 1)[-1]}:{message} (gpumr --debug shows the trace)"
    java = getattr(exc, "java_exception", None)
    first = (str(java) if java is not None else text).strip().splitlines()
    return f"{what}: {first[0] if first else type(exc).__name__} (gpumr --debug shows the trace)"


def _quiet_log4j():
    """A log4j2 configuration file (in the temp folder, made once per process) that logs nothing."""
    global _QUIET_LOG4J
    if _QUIET_LOG4J is None:
        fd, path = tempfile.mkstemp(prefix="gpumr-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write("status = off\nappender.null.type = Null\nappender.null.name = null\n"
                    "rootLogger.level = off\nrootLogger.appenderRef.null.ref = null\n")
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        _QUIET_LOG4J = path
    return _QUIET_LOG4J


_QUIET_LOG4J = None


def _interrupt_quietly():
    """Replace pyspark's SIGINT handler (main thread only) by one that silences Spark's Python side first.

    pyspark's handler calls into the JVM from inside the call that Ctrl-C
    interrupted (a re-entrant Py4J call that fails, with a traceback) and
    Py4J logs the interrupt with another; gpumr's handler silences them
    (:func:`quiet_interrupt`) and raises ``KeyboardInterrupt``; the job is
    then stopped on the way out (the context gpumr started is stopped).
    """
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(signum, frame):
    quiet_interrupt()
    raise KeyboardInterrupt


def quiet_interrupt():
    """On Ctrl-C: silence pyspark's and Py4J's loggers and the context's threads, so the boundary's line is the last.

    Spark's Python side answers an interrupt with tracebacks from several
    places (the call in progress, Py4J's callback and gateway threads as the
    JVM goes, pyspark's SIGINT handler); none of them says more than
    ``gpumr: interrupted``. The loggers are turned off and the
    threads' exceptions are dropped; the JVM's own stderr is already quiet
    (``spark.log.level`` OFF unless ``--debug``).
    """
    import logging
    import threading
    # Py4J logs through the root logger too (logging.exception(...)): all but gpumr's own logger go quiet.
    for name in ("", "py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())  # (else logging.exception() would add one)
    threading.excepthook = lambda args: None


def main(argv=None):
    """``spark-submit .../gpumr/engines/spark.py KIND ...`` or ``python -m gpumr.engines.spark KIND ...``.

    Runs inside the error boundary when started as a program (one line, exit
    status 0, 1 or 130); ``--debug`` keeps Spark's log and shows tracebacks.
    """
    from ..boundary import UsageError, debug_wanted, logger
    from ..core.counters import summary
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_wanted(argv)
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] not in JOBS:
        raise UsageError(f"usage: spark.py {{{','.join(JOBS)}}} [--debug] [options]")
    counts, seconds = run(argv[0], argv[1:], debug=debug)
    logger(__name__).info(summary(counts, seconds))
    return 0


if __name__ == "__main__":
    from ..boundary import main as _guarded
    _guarded(main, on_interrupt=quiet_interrupt)
