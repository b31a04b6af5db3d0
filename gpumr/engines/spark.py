"""The Spark engine: the gpumr jobs as a Spark application, a thin shell over the same core.

Run::

    gpumr spark faces frames.seq/ -o out/ --master local-cluster[2,1,1024] [face job options]
    gpumr spark backproject --projections proj.seq --slab 16 -o out/ --master ...
    spark-submit --master yarn -m gpumr.engines.spark faces ...   (see README, "Spark")

The options of each workload are the mrjob job's own: the driver builds the
job class (:mod:`gpumr.jobs.face_detect`, :mod:`gpumr.jobs.backproject`)
from the command line, runs its ``check_options``, and sends the plain
argument list to the executors, where each Python worker builds the same job
once and asks it for its workload (``make_workload``; for CT that loads and
filters the projections once per Python worker, not per task). Per partition
a :class:`gpumr.devices.chooser.DeviceChooser` and a
:class:`gpumr.core.Processor` run exactly as in an mrjob map task; when Spark
gave the task GPU addresses (``spark.task.resource.gpu.amount``), the chooser
uses only those.

Input: local paths or URIs (``s3://``, ``s3a://``, ``hdfs://``, ``file://``).
The driver lists and sizes the SequenceFiles (:func:`gpumr.io.inputs.expand_sized`;
URIs through :mod:`gpumr.io.remote`), cuts them into byte ranges
(``--split-size``, at least :data:`gpumr.limits.MIN_SPLIT_SIZE`, at most
:data:`gpumr.limits.MAX_SPLITS` ranges in all, refused before any task
otherwise) and every partition reads its ranges with
:func:`gpumr.io.records.read_split`, fetching only those bytes (Hadoop's split semantics; a corrupt stretch is an ``error`` line, as
in the mrjob jobs). Hadoop's input format (``sc.newAPIHadoopFile``) was
measured as the alternative (``bench/spark_input.py``); it fails the task on
a corrupt stretch, which the safety contract forbids. Files named by the
job's file options (cascade, projections, geometry) are shipped once per
executor with ``SparkContext.addFile``; one at a URI is first fetched to the
driver through the same layer.

A job that fails prints one line: the failing task's own Python error (a
:class:`gpumr.errors.GpumrError`'s message), not Spark's traces, and the
Spark log of a context gpumr starts is off; ``debug`` (``gpumr --debug``)
keeps both.

Output: the mrjob jobs' lines (``JSONProtocol``: ``"key"<TAB>{json}``),
sorted, as ``OUT/part-NNNNN`` (one per partition, the names
``saveAsTextFile`` gives) and ``OUT/_SUCCESS``, one output under gpumr's
ownership rule, ``OUT`` a local folder or a URI (``s3://``, ``hdfs://``,
``file://``): :class:`gpumr.io.outputs.FolderOutput` or
:class:`gpumr.io.outputs.UriOutput`, checked before any task. Each task
writes its partition through the filesystem layer into the output's hidden
stage, under its own attempt's name (:func:`write_part`); once the job has
succeeded the driver publishes, per partition, the one attempt whose result
Spark kept, so an attempt re-run after a lost executor (or a speculative
one) is never published beside it. pyspark ships no S3 connector for
Hadoop (``hadoop-aws``), so ``saveAsTextFile`` could not write ``s3a://``
here; one writer serves every destination. A failed or interrupted job
stops its tasks first (the context gpumr started, or the job's group in a
caller's context), then removes the stage. Counters: one
Spark accumulator holding each partition's gpumr counters by partition id,
so a partition that Spark re-runs (a lost executor) replaces its counts
instead of adding them twice; their totals feed the same summary line as
the mrjob engine.
"""

import argparse
import atexit
import hashlib
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

from .. import limits  # noqa: E402
from ..errors import GpumrError  # noqa: E402

#: Workload name -> (module, job class name): the mrjob jobs whose options and workload Spark runs.
JOBS = {"faces": ("gpumr.jobs.face_detect", "MRFaceDetect"),
        "backproject": ("gpumr.jobs.backproject", "MRBackproject")}
DEFAULT_SPLIT = 32 * 1024 * 1024
#: Bytes of output lines a task gathers before each write into its part file.
WRITE_CHUNK = 1 << 20
#: The longest the driver waits for a failed job's tasks of a caller's context to end before removing the stage.
END_TASKS_TIMEOUT = 60
#: Job options that only make sense for mrjob runners.
_MRJOB_ONLY = ("--hadoop-splits", "-r", "--runner", "-c", "--conf-path", "--output-dir")

# One job and its workload per Python worker (Spark reuses workers across tasks), keyed by the arguments.
_WORKERS = {}


def job_class(kind):
    """The mrjob job class of workload ``kind`` ("faces" or "backproject")."""
    import importlib
    module, name = JOBS[kind]
    return getattr(importlib.import_module(module), name)


def make_job(kind, args):
    """The mrjob job of ``kind`` built from ``args``; GpumrError for an option it refuses."""
    try:
        return job_class(kind)(list(args))
    except ValueError as exc:  # mrjob's way of refusing an option given as a list
        raise GpumrError(str(exc)) from None


def _file_options(job):
    """``(option string, path)`` of the job's file options (mrjob ``add_file_arg``) that are set."""
    out = []
    for dest in sorted(job._file_arg_dests):
        value = getattr(job.options, dest, None)
        if value:
            out.append(("--" + dest.replace("_", "-"), value))
    return out


def _fetch_file_options(job, args, folder):
    """``args`` with every file option that names a URI pointed at a local copy in ``folder``.

    The copies are fetched through :mod:`gpumr.io.remote` on the driver, then
    shipped to the executors like local files (``SparkContext.addFile``).
    """
    from ..io.remote import locate
    from .streaming import with_option
    for option, value in _file_options(job):
        loc = locate(value)
        if not loc.is_uri:
            continue
        local = loc.local  # file:///PATH: the path; any other URI: a local copy, shipped
        if local is None:
            local = os.path.join(folder, option.lstrip("-"), loc.name or "file")
            os.makedirs(os.path.dirname(local))
            loc.fetch(local)
        args = with_option(args, option, local)
    return args


# -- in the executors -------------------------------------------------------------------------------
def _worker(kind, args, shipped):
    """The (job, workload) of this Python worker for these arguments; built (and filtered) once."""
    key = (kind, tuple(args), tuple(shipped))
    got = _WORKERS.get(key)
    if got is None:
        from pyspark import SparkFiles

        from ..boundary import install
        install()  # the workload's warnings (a geometry's field of view) as gpumr's one-line warnings

        from .streaming import with_option
        args = list(args)
        for option, name in shipped:  # the executor's copy of each shipped file
            args = with_option(args, option, SparkFiles.get(name))
        job = make_job(kind, args)
        got = _WORKERS[key] = (job, job.make_workload())
    return got


def _task_gpus():
    """GPU indices Spark assigned to this task (``spark.task.resource.gpu.amount``), or None."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    info = ctx.resources().get("gpu") if ctx is not None else None
    if info is None:
        return None
    return [int(a) for a in info.addresses]


def run_partition(kind, args, shipped, counters, items):
    """Process one partition's items; yield output lines; add its counters to the accumulator.

    ``items`` are ``(path, start, end, name)`` SequenceFile splits (faces)
    or slab lines (backproject). The device choice and record processing
    are the mrjob task's (:meth:`GpumrJob.task_init`, ``mapper_raw``).
    """
    from mrjob.protocol import JSONProtocol
    from pyspark import TaskContext

    from ..core import Processor
    from ..devices.chooser import DeviceChooser, describe
    from ..io.records import DEFAULT_MAX_RECORD_SIZE, process, read_split

    job, workload = _worker(kind, args, shipped)
    o = job.options
    counts = {}

    def count(name, n=1):
        counts[name] = counts.get(name, 0) + n

    def log(message):
        print(message, file=sys.stderr, flush=True)

    chooser = DeviceChooser(o.device, memory=o.gpu_memory, slots=o.gpu_slots, only=_task_gpus())
    log(f"gpumr: {describe(chooser)}")
    processor = Processor(workload, chooser, count=count, log=log)
    protocol = JSONProtocol()

    def lines(outputs):
        for k, v in outputs:
            yield protocol.write(k, v).decode("utf-8")

    try:
        for item in items:
            if job.INPUT_KIND == "lines":
                yield from lines(processor.feed(item, item))
                continue
            path, start, end, name = item
            cap = getattr(o, "max_record_size", None) or DEFAULT_MAX_RECORD_SIZE
            yield from lines(process(processor, read_split(path, start, end, name, max_record_size=cap)))
        yield from lines(processor.flush())
    finally:
        chooser.close()
    counters.add({TaskContext.get().partitionId(): counts})


def write_part(stage, index, lines):
    """Write partition ``index``'s output ``lines`` into the output's hidden ``stage`` (a URI) as this attempt's file.

    The file is named for the attempt (``part-NNNNN.attempt-ID``), so that
    two attempts of one partition never write one file. Returns
    ``[(index, name, size, sha256)]``: the driver publishes the file of the
    attempt whose result Spark kept as ``part-NNNNN``, and lists its size
    and hash in the output's proof.
    """
    from pyspark import TaskContext

    from ..io.remote import locate
    name = f"part-{index:05d}.attempt-{TaskContext.get().taskAttemptId()}"
    h, size, chunk, held = hashlib.sha256(), 0, [], 0
    with locate(stage).child(name).open_output() as f:
        def flush():
            data = b"".join(chunk)
            f.write(data)
            h.update(data)
            chunk.clear()
            return len(data)
        for line in lines:
            chunk.append(line.encode("utf-8") + b"\n")
            held += len(chunk[-1])
            if held >= WRITE_CHUNK:
                size, held = size + flush(), 0
        size += flush()
    return [(index, name, size, h.hexdigest())]


# -- in the driver ----------------------------------------------------------------------------------
def splits(files, split_size):
    """``(path, start, end, name)`` byte ranges of at most ``split_size`` covering each file.

    ``files`` are ``(path or URI, size)`` pairs. The number of ranges is
    counted before any is made and refused above :data:`gpumr.limits.MAX_SPLITS`.

    Raises
    ------
    GpumrError
        Naming the split size that keeps the job within the limit.
    """
    from ..sizes import human
    count = sum(max(1, -(-size // split_size)) for _, size in files)
    if len(files) > limits.MAX_SPLITS:
        raise GpumrError(f"{len(files)} input files: each is at least one task, over the limit of "
                         f"{limits.MAX_SPLITS}; pack them into fewer SequenceFiles (gpumr pack --shards N)")
    if count > limits.MAX_SPLITS:
        total = sum(size for _, size in files)
        need = -(-total // max(1, limits.MAX_SPLITS - len(files)) // (1 << 20)) << 20  # enough, in whole MiB
        raise GpumrError(f"--split-size {split_size}: {count} splits of {human(total)} of input, over the limit of "
                         f"{limits.MAX_SPLITS} tasks; use --split-size {need >> 20}MiB or more")
    out = []
    for path, size in files:
        for start in range(0, max(size, 1), split_size):
            out.append((path, start, min(start + split_size, size), path))
    return out


def input_splits(paths, split_size):
    """The splits of the SequenceFiles ``paths`` (files, folders, URIs) name; see :func:`splits`.

    Raises
    ------
    GpumrError
        For a URI that pyarrow cannot serve here (the tasks read byte ranges
        through it; there is no ``hadoop fs`` fallback), and see :func:`splits`.
    """
    from ..io.inputs import expand_sized
    from ..io.remote import locate
    files = [(locate(p).absolute(), size) for p, size in expand_sized(paths)]
    for path, size in files:
        if size is None:
            raise GpumrError(f"{locate(path).shown}: the Spark engine's tasks read byte ranges through pyarrow, and "
                             f"{locate(path).unavailable()}")
    return splits(files, split_size)


def prepare_output(out, inputs=()):
    """Check the output ``out`` (a folder or URI) before the job; return the helper its parts are published through.

    ``out`` must be new, empty, or an earlier ``gpumr spark`` output that its
    proof vouches for (:mod:`gpumr.io.outputs`), and neither the current
    folder nor one holding an input: a local folder is a
    :class:`gpumr.io.outputs.FolderOutput`, a URI a
    :class:`gpumr.io.outputs.UriOutput` (written through pyarrow only: the
    tasks write their parts there).
    """
    from ..io.outputs import open_output
    return open_output(out, "gpumr spark", folder=True, inputs=inputs)


def _write(result, stage):
    """Run the job: every partition of ``result`` written into ``stage`` (:func:`write_part`).

    Returns the parts to publish, ``{name: (staged name, size, sha256)}``:
    ``part-NNNNN`` per partition, and ``_SUCCESS`` (written last into the
    stage, as Hadoop's committer marks a complete output).
    """
    from ..io.remote import locate
    written = result.mapPartitionsWithIndex(lambda index, lines: write_part(stage, index, lines)).collect()
    parts = {f"part-{index:05d}": (name, size, sha) for index, name, size, sha in written}
    locate(stage).child("_SUCCESS").write_bytes(b"")
    parts["_SUCCESS"] = ("_SUCCESS", 0, hashlib.sha256(b"").hexdigest())
    return parts


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


def parser(kind):
    """The Spark engine's own options; everything else goes to the job (see its ``--help``)."""
    p = argparse.ArgumentParser(prog=f"gpumr spark {kind}", add_help=False,
                                description=f"Run the {kind} job as a Spark application. Options not listed "
                                            f"here are the mrjob job's (python -m {JOBS[kind][0]} --help).")
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-o", "--output", required=False, metavar="OUT",
                   help="output folder or URI (s3://, hdfs://, file://) of part-* files")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default: spark-submit's, else local[*]), e.g. local-cluster[2,1,1024], yarn")
    if kind == "faces":
        p.add_argument("--split-size", default=str(DEFAULT_SPLIT), metavar="SIZE",
                       help="bytes of SequenceFile per task (default 32MiB)")
    else:
        p.add_argument("--slab", type=int, default=None, metavar="N", help="slices per task (required)")
    return p


def _job(kind, args):
    """The job of ``kind`` for the engine's ``args`` (the job's own options and, for faces, its inputs)."""
    if kind == "faces":
        return make_job(kind, args)
    # The mrjob job's inputs are plan files; here the driver makes the slabs, so the
    # job's input check (existence, for a "lines" job) is given the projections file.
    from .streaming import option_value
    projections = option_value(args, "--projections")
    if not projections:
        raise GpumrError("--projections is required: the SequenceFile of projections (gpumr ct phantom makes one)")
    return make_job(kind, [projections, *args])


def parse(kind, argv, folder):
    """``(engine options, job)`` from a ``gpumr spark KIND`` command line; GpumrError when wrong.

    The output is checked first (``opts.out``, :func:`prepare_output`),
    against the inputs as given; then file options that name URIs are
    fetched into ``folder`` and the job is built on the
    local copies. For ``backproject``, ``opts.slabs`` holds the slabs' plan.
    """
    from ..sizes import parse_size
    p = parser(kind)
    opts, rest = p.parse_known_args(argv)
    if opts.help:
        p.print_help()
        raise SystemExit(0)
    if not opts.output:
        raise GpumrError("-o OUT is required: the output folder or URI")
    for a in rest:
        if a.partition("=")[0] in _MRJOB_ONLY:
            raise GpumrError(f"{a}: an mrjob runner option; the Spark engine does not take it")
    if kind == "faces":
        try:
            opts.split_size = parse_size(opts.split_size)
        except ValueError as exc:
            raise GpumrError(f"--split-size: {exc}") from None
        limits.number("--split-size", opts.split_size, limits.MIN_SPLIT_SIZE, integer=True)
    elif opts.slab is None or opts.slab < 1:
        raise GpumrError("--slab N is required: slices per task, at least 1")
    job = _job(kind, rest)
    opts.out = prepare_output(opts.output, [*job.options.args, *(path for _, path in _file_options(job))])
    fetched = _fetch_file_options(job, rest, folder)
    if fetched != rest:
        rest, job = fetched, _job(kind, fetched)
    job.check_options()
    if kind == "backproject":
        from ..ct import geometry
        from ..ct.workload import check_slab, plan
        g = geometry.load(job.options.geometry)
        check_slab(g, opts.slab)
        opts.slabs = plan(g.nVoxel[0], opts.slab)
    if job.options.device == "gpu" and _executors_here(opts.master):
        from ..devices.chooser import require_gpu
        require_gpu()
    opts.job_args = rest
    return opts, job


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
    opts, job = parse(kind, argv, folder)
    out = opts.out
    if job.INPUT_KIND == "seqfile":
        items = input_splits(job.options.args, opts.split_size)
    else:
        items = opts.slabs
    shipped, names = [], set()  # each file option's (option, path, name): SparkFiles keeps one file per name
    for option, path in _file_options(job):
        name = os.path.basename(path)
        if name in names:
            raise GpumrError(f"{option} {path}: another shipped file has the name {name}")
        names.add(name)
        shipped.append((option, path, name))
    from py4j.protocol import Py4JJavaError
    own = sc is None
    if own:
        sc = spark_context(opts.master, f"gpumr {kind}", debug=debug)
    t0 = time.perf_counter()
    group = f"gpumr-{kind}-{secrets.token_hex(8)}"
    try:
        try:
            for _, path, _ in shipped:
                sc.addFile(os.path.abspath(path))
            counters = sc.accumulator({}, _CountsParam())
            args, ship = list(opts.job_args), tuple((option, name) for option, _, name in shipped)
            processed = sc.parallelize(items, max(1, len(items))).mapPartitions(
                lambda it: run_partition(kind, args, ship, counters, it))
            reducers = job.options.reducers
            if reducers == 0:
                result = processed
            else:
                pairs = processed.map(lambda line: (line, None))
                if reducers == 1:  # no sampling pass: one shuffle into one sorted partition
                    pairs = pairs.partitionBy(1)
                else:
                    from pyspark import StorageLevel
                    pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)  # sortByKey samples it first
                result = pairs.sortByKey(numPartitions=reducers).keys()
            sc.setJobGroup(group, f"gpumr {kind}", interruptOnCancel=True)
            parts = _write(result, out.begin())
        except BaseException:
            _end_tasks(sc, own, group)
            out.abort()
            raise
        finally:
            if own:
                sc.stop()
        out.commit(parts)
        counts = {}
        for part in counters.value.values():
            for name, n in part.items():
                counts[name] = counts.get(name, 0) + n
        return counts, time.perf_counter() - t0
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


if __name__ == "__main__":
    from ..boundary import main as _guarded
    _guarded(main, on_interrupt=quiet_interrupt)
