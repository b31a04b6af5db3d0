"""One conformance suite: every engine of ``gpumr.engines.NAMES`` through the same cases (issue 64, Build 6).

The ``engine`` fixture holds what each engine needs here (Hadoop on PATH,
Flink's own Python, an embedded Dask cluster of one worker, Spark's
``local[1]``, a pilot of one core); an engine that cannot run a case here
says why in a skip. Each engine gets the same cases, in real processes:

1. the same bytes as the inline engine for the same faces job;
2. the same one-line refusal and exit status for bad input, no traceback;
3. ``-q``: nothing printed on success;
4. Ctrl-C and SIGTERM mid-job: one line, status 130 (143), no output, nothing
   in TMPDIR, no process left (:func:`conftest.interrupt_job`);
5. modules planted in the current folder (``yaml.py``, ``numpy.py``, and
   ``gpumr.py``, the package the faces workload lives in) never run in any
   process of the job;
6. secrets in the environment never reach a file the job leaves (output,
   ``--framework-logs``, the pilot's sandbox, the scratch folders) nor its
   ``--debug`` stderr;
7. a real second local user (:func:`conftest.other_user`) reaches no TCP
   listener of the job's processes (Dask's need the job's TLS certificate,
   Spark's gateway its token) and lists none of the folders the job makes
   (each 0700; the hidden stage beside the output aside, which becomes the
   output and has the user's umask, as any file they write); Flink and
   RADICAL-Pilot, whose ports take anyone's connections, are refused in one
   line on a node that user has processes on;
8. a CT job on a simulated GPU: where the tasks run on this machine, every
   slab in the job's one GPU owner, set up once.

Cases 1, 5, 6 and 7 share one run per engine (:func:`hostile`), made with
the planted modules, the secrets, ``--debug`` and ``--framework-logs`` and
watched by the second user while it runs.
"""

import contextlib
import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import NO_FLINK, as_other_user, flink_python, in_session, interrupt_job, missing, part_bytes, run_workload

from gpumr.engines import NAMES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

#: What an engine that cannot run jobs here says (EMR runs on AWS; ``--dry-run`` is its form here, test_run.py).
EMR = "engine emr: its tasks run on Amazon EMR, which this machine cannot reach (test_run.py checks its --dry-run)"
#: Split size of the interrupted jobs: several tasks each.
SPLIT = "40KiB"
#: The modules planted in the job's current folder: two a framework's process imports, and the package the
#: faces workload lives in.
PLANTED = ("yaml", "numpy", "gpumr")
PLANT = ("import os, sys\n"
         "open(os.path.join({markers!r}, __name__ + '.' + str(os.getpid())), 'w').write(' '.join(sys.argv))\n")


class Engine:
    """One ``--engine`` as the suite runs it: its name, the Python and options it needs, and why it cannot run jobs
    here (None where it can)."""

    def __init__(self, name, python=sys.executable, options=(), cannot=None, open_ports=False, own_logs=()):
        self.name, self.python, self.options, self.cannot = name, python, list(options), cannot
        self.open_ports = open_ports  # its framework's ports take anyone's connections (refused on a shared node)
        self.own_logs = list(own_logs)  # where its framework logs when left at its defaults (shared by its users)

    def argv(self, *argv, open_ports_ok=True):
        """``run ARGV --engine NAME`` with its options (``--allow-open-ports`` where its ports need it)."""
        more = ["--allow-open-ports"] if self.open_ports and open_ports_ok else []
        return ["run", *map(str, argv), "--engine", self.name, *self.options, *more]

    def script(self):
        """Its ``gpumr`` command (the installed script: the current folder is not on its import path)."""
        return os.path.join(os.path.dirname(self.python), "gpumr")

    def popen(self, argv, cwd, env=None, script=False, **kwargs):
        """``gpumr ARGV`` in ``cwd`` as a session of its own, TMPDIR ``cwd/tmp``."""
        command = [self.script()] if script else [self.python, "-m", "gpumr"]
        os.makedirs(os.path.join(cwd, "tmp"), exist_ok=True)
        return subprocess.Popen([*command, *argv], cwd=cwd, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                env={**os.environ, "TMPDIR": os.path.join(cwd, "tmp"), **(env or {})},
                                **kwargs)

    def run(self, argv, cwd, env=None, script=False):
        """``(status, stdout, stderr)`` of ``gpumr ARGV``."""
        proc = self.popen(argv, cwd, env, script)
        try:
            out, err = proc.communicate(timeout=900)
        finally:
            end(proc)
        return proc.returncode, out, err

    def need_jobs(self):
        """Skip, saying why, where this engine cannot run a job here."""
        if self.cannot:
            pytest.skip(self.cannot)


def end(proc):
    """Leave nothing of ``proc``'s session running (a failed test included)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in in_session(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module", params=NAMES)
def engine(request, tmp_path_factory):
    """Each engine of :data:`gpumr.engines.NAMES`, with what it needs here; one that is missing a part skips
    (fails in CI, :func:`conftest.missing`) saying which."""
    name = request.param
    if name in ("inline", "local"):
        return Engine(name, options=["--no-conf"])
    if name == "emr":
        return Engine(name, cannot=EMR)
    if name == "hadoop":
        from hadoop import cluster
        why = cluster.unavailable()
        if why:
            missing("the Hadoop engine", why)
        return Engine(name, options=["-c", cluster.CONF, "--hadoop-streaming-jar", cluster.streaming_jar(),
                                     "--hadoop-tmp-dir", "file://" + str(tmp_path_factory.mktemp("hadoop-tmp")),
                                     "--python-bin", sys.executable])
    if name == "spark":
        pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (the dev extra)")
        if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
            missing("the Spark engine", "Spark needs Java 17 (java on PATH or JAVA_HOME)")
        return Engine(name, options=["--master", "local[1]"])
    if name == "dask":
        pytest.importorskip("distributed", reason="the Dask engine needs dask.distributed (the dev extra)")
        return Engine(name, options=["--workers", "1"])
    if name == "radical":
        pytest.importorskip("radical.pilot", reason="the RADICAL-Pilot engine needs radical.pilot (the dev extra)")
        return Engine(name, options=["--pilot-cores", "1"], open_ports=True)
    if name == "flink":
        python = flink_python()
        if python is None:
            missing("the Flink engine", NO_FLINK)
        pyflink = subprocess.run([python, "-c", "import os, pyflink; print(os.path.dirname(pyflink.__file__))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return Engine(name, python=python, open_ports=True, own_logs=[os.path.join(pyflink, "log")])
    pytest.fail(f"engine {name} is new: say in tests/test_conformance.py's engine fixture what it needs here")


@pytest.fixture(scope="module")
def reference(seq48, tmp_path_factory):
    """The inline engine's part files (``{name: bytes}``) for the faces job over ``seq48``."""
    out = tmp_path_factory.mktemp("reference") / "out"
    run_workload("faces", [seq48, "-o", str(out), "--device", "cpu", "--no-conf"], "inline")
    return part_bytes(out)


def one_line(status, err):
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("gpumr: error: "), err[-3000:]
    return lines[0]


# ---- 2. the same refusal, status and one line --------------------------------------------------------------
REFUSALS = [
    (["faces", "missing.seq"], "gpumr: error: missing.seq: no such file or directory"),
    (["faces", "empty.seq"], "gpumr: error: no SequenceFile among the inputs: {here}/empty.seq (empty); inputs are "
                             "SequenceFiles of records: gpumr pack FOLDER -o FILE.seq makes one of a folder of files "
                             "(see: gpumr help pack-first)"),
    (["faces", "text.seq"], "gpumr: error: no SequenceFile among the inputs: {here}/text.seq ("),
    (["faces", "{packed}", "--min-neighbors", "-1"],
     "gpumr: error: --min-neighbors must be a whole number of at least 0, not -1"),
    (["backproject", "--slab", "4"], "gpumr: error: --projections is required: the SequenceFile of projections "
                                     "(gpumr ct phantom makes one)"),
]


@pytest.mark.parametrize("argv, said", REFUSALS, ids=["missing", "empty", "not-a-seqfile", "bad-option",
                                                      "required-option"])
def test_bad_input_is_the_same_one_line_and_status(engine, packed, tmp_path, argv, said):
    """The same line (and status 1) whatever the engine, before anything starts: nothing is made."""
    (tmp_path / "empty.seq").write_bytes(b"")
    (tmp_path / "text.seq").write_text("not a SequenceFile\n" * 20)
    argv = [a.format(packed=packed) for a in argv]
    status, out, err = engine.run(engine.argv(*argv, "-o", tmp_path / "out"), str(tmp_path))
    line = one_line(status, err)
    assert line.startswith(said.format(here=tmp_path)) and out == "", line
    assert sorted(os.listdir(tmp_path)) == ["empty.seq", "text.seq", "tmp"] and os.listdir(tmp_path / "tmp") == []


# ---- 3. -q ----------------------------------------------------------------------------------------------
def test_quiet_prints_nothing_on_success(engine, packed, emulated_kernels, tmp_path):
    """``gpumr -q run``: not one line, from the launcher, the tasks or the framework, on either stream. The tasks
    have something to say (simulated GPUs: ``--device auto`` gives them records)."""
    engine.need_jobs()
    status, out, err = engine.run(["-q", *engine.argv("faces", packed, "-o", tmp_path / "out")], str(tmp_path),
                                  env={"GPUMR_SIMULATE_GPUS": "1"})
    assert status == 0 and err == "" and out == "", err[-3000:]
    assert sum(len(data.splitlines()) for data in part_bytes(tmp_path / "out").values()) == 12


# ---- 4. signals -----------------------------------------------------------------------------------------
#: Engines whose interrupt costs too much here to run it in this suite, and why.
NOT_INTERRUPTED = {"hadoop": "a Hadoop job in local mode is a JVM of ~30 s a run; its interrupt is mrjob's, not "
                             "measured here (too slow for this suite's budget)"}


#: A workload whose every record says it began (a file in ``started``) and then takes two seconds: a signal sent once
#: a record began comes mid-job on every engine.
SLOW = """
import os, time
from gpumr import Workload


class Slow(Workload):
    name = "slow"
    decode = "raw"

    def cpu(self, key, value, o):
        open(os.path.join({started!r}, str(os.getpid())), "w").close()
        time.sleep(2)
        return {{"n": len(value)}}
"""


@pytest.mark.parametrize("signum, status, said", [(signal.SIGINT, 130, "gpumr: interrupted"),
                                                   (signal.SIGTERM, 143, "gpumr: terminated")], ids=["INT", "TERM"])
def test_a_signal_mid_job_leaves_nothing(engine, packed, tmp_path, signum, status, said):
    """SIGINT (a terminal's Ctrl-C) or SIGTERM (SLURM's scancel) to the job's process group once a record has begun:
    one line, status 130 (143), no stage, no output, nothing in TMPDIR, no process of the job left."""
    engine.need_jobs()
    if engine.name in NOT_INTERRUPTED:
        pytest.skip(NOT_INTERRUPTED[engine.name])
    started = tmp_path / "started"
    started.mkdir()
    (tmp_path / "slow.py").write_text(SLOW.format(started=str(started)))
    argv = engine.argv("slow.py:Slow", packed, "-o", tmp_path / "out", "--split-size", SPLIT)[1:]
    got, err, tmp, left = interrupt_job(engine.python, argv, str(tmp_path), lambda proc: os.listdir(started), signum)
    assert got == status, err[-3000:]
    assert err.strip().splitlines()[-1] == said and err.count(said) == 1 and "Traceback" not in err, err[-3000:]
    assert tmp == [] and left == [] and sorted(os.listdir(tmp_path)) == ["slow.py", "started", "tmp"]


#: The hidden stage beside the output: it becomes the output, whose mode is the user's (umask), like any file they
#: write; the folders the 0700 rule holds for are the job's own (its folder, the frameworks' logs and scratch).
STAGE = ".out."
#: Engines whose jobs here listen on TCP ports that only the job may use (Dask's TLS, Spark's gateway token).
LISTENING = ("spark", "dask")


# ---- 1, 5, 6, 7: one run, hostile ---------------------------------------------------------------------------
#: What the second user tries on every TCP listener of the job and every folder it makes (its own Python, which
#: says "ready" once it has imported what it needs, then reads one JSON request and answers one JSON object).
PROBE = r'''
import asyncio, json, os, sys
from concurrent.futures import ThreadPoolExecutor
from distributed import Security
from distributed.core import rpc
from py4j.java_gateway import GatewayParameters, JavaGateway
print("ready", flush=True)
request = json.loads(sys.stdin.readline())

async def dask(address, security):
    args = security.get_connection_args("client") if security else {}
    async with rpc(address, connection_args=args, timeout=3) as r:
        return await asyncio.wait_for(r.identity(), 5)

def attempt(what, call, *args):
    try:
        return f"{what}: answered {str(call(*args))[:200]}"
    except BaseException as exc:
        return f"{what}: refused ({type(exc).__name__})"

answers = {"folders": {}, "ports": {}}
for folder in request["folders"]:
    answers["folders"][folder] = attempt("list", os.listdir, folder)
mine = Security.temporary()  # TLS, but with a certificate of the other user's own, not the job's
tries = {"dask tcp": lambda port: asyncio.run(dask(f"tcp://127.0.0.1:{port}", None)),
         "dask tls": lambda port: asyncio.run(dask(f"tls://127.0.0.1:{port}", mine)),
         "py4j": lambda port: JavaGateway(gateway_parameters=GatewayParameters(
             port=port, read_timeout=3, auto_convert=False)).jvm.java.lang.System.getProperty("user.name")}
with ThreadPoolExecutor(32) as pool:  # (all at once: the job is held meanwhile, but not for long)
    said = {(port, what): pool.submit(attempt, what, call, port)
            for port in request["ports"] for what, call in tries.items()}
for (port, what), future in said.items():
    answers["ports"].setdefault(port, []).append(future.result())
print(json.dumps(answers), flush=True)
'''


def listeners(sid):
    """``{pid: [port, ...]}``: the TCP ports each process of session ``sid`` listens on (``/proc/net/tcp*``, by the
    inodes of the process's sockets); a process that listens on none maps to ``[]``."""
    listening = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # (LISTEN)
                    listening[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    found = {}
    for pid in in_session(sid):
        found[pid] = []
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in listening:
                found[pid].append(listening[int(link[8:-1])])
    return found


def folders_made(work, before):
    """Every folder under ``work`` not in ``before``, the first level of each (what the job made)."""
    made = []
    for top, dirs, _ in os.walk(work):
        for d in dirs:
            path = os.path.join(top, d)
            if path not in before and os.path.dirname(path) in before:
                made.append(path)
    return sorted(made)


def texts(top):
    """``{path: bytes}`` of every file under ``top``."""
    found = {}
    for folder, _, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    found[path] = f.read()
    return found


def running(engine, work):
    """Whether the hostile job runs its tasks: a map task's output in the stage where its framework listens (its
    workers are up), else the stage and the job's folder made."""
    if engine.name in LISTENING:
        return bool(glob.glob(os.path.join(work, ".out.*", "**", "map-*"), recursive=True))
    return bool(glob.glob(os.path.join(work, ".out.*"))) and bool(glob.glob(os.path.join(work, "tmp", "gpumr-job-*")))


class Watched:
    """What the hostile run left and said (see :func:`hostile`)."""
    status = out = err = canaries = markers = parts = files = tmp_left = None
    ports = answers = modes = refusal = no_probe = None


@pytest.fixture(scope="module")
def hostile(engine, seq48, request):
    """One run of the faces job over ``seq48`` per engine, made as hostile as a shared node makes it.

    Its current folder holds modules named like those its processes import
    (:data:`PLANTED`), each writing a marker when imported; the environment
    holds an AWS secret key and a token; it runs with ``--debug`` and
    ``--framework-logs`` (and RADICAL-Pilot's ``--pilot-sandbox``), from the
    installed ``gpumr`` script. As root, a real second user (uid >= 1000,
    :func:`conftest.other_user`) waits with a process of its own; once a task has
    written its output, it tries every TCP listener of the job's processes and
    lists every folder the job made. The folders live in one that user may enter.
    """
    engine.need_jobs()
    w = Watched()
    work = tempfile.mkdtemp(prefix="gpumr-conformance-")  # (pytest's tmp folders are root's alone)
    os.chmod(work, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    markers = os.path.join(work, "markers")
    for folder in (markers, os.path.join(work, "tmp"), os.path.join(work, "sandbox")):
        os.makedirs(folder)
        os.chmod(folder, 0o777 if folder == markers else 0o755)
    for name in PLANTED:
        with open(os.path.join(work, f"{name}.py"), "w") as f:
            f.write(PLANT.format(markers=markers))
    w.canaries = [f"canary-aws-{secrets.token_hex(8)}", f"canary-token-{secrets.token_hex(8)}"]
    env = {"AWS_SECRET_ACCESS_KEY": w.canaries[0], "MY_TOKEN": w.canaries[1]}
    more = ["--pilot-sandbox", os.path.join(work, "sandbox")] if engine.name == "radical" else []
    argv = engine.argv("faces", seq48, "-o", os.path.join(work, "out"), "--device", "cpu", "--debug",
                       "--framework-logs", os.path.join(work, "logs"), *more)
    before = {work, *(os.path.join(work, d) for d in os.listdir(work))}

    probe = None
    if os.geteuid() == 0:
        uid = request.getfixturevalue("other_user")
        probe = as_other_user(uid, [sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        ready = probe.stdout.readline()
        if ready.strip() != "ready":  # (its Python may not be one the other user can run: a checkout under /root)
            end(probe)
            w.no_probe = f"the second user cannot run this Python ({sys.executable}): {probe.stderr.read()[-500:]}"
            probe = None
        elif engine.open_ports:  # a node with another person's process refuses it, in one line
            w.refusal = engine.run(engine.argv("faces", seq48, "-o", os.path.join(work, "out"), "--device", "cpu",
                                               open_ports_ok=False), work, script=True)
    proc = engine.popen(argv, work, env=env, script=True)
    try:
        if probe is not None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None and not running(engine, work):
                time.sleep(0.05)
            found = {} if engine.open_ports else listeners(proc.pid)  # (theirs are open: refused above)
            w.ports = sorted({port for ports in found.values() for port in ports})
            held = [pid for pid, ports in found.items() if not ports]  # (held while the second user tries: the
            made = folders_made(work, before)                          # job cannot end meanwhile)
            w.modes = {path: os.stat(path).st_mode & 0o777 for path in made}
            try:
                for pid in held:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                probe.stdin.write(json.dumps({"ports": w.ports, "folders": made}) + "\n")
                probe.stdin.flush()
                w.answers = json.loads(probe.stdout.readline() or "null")
                if proc.poll() is not None:
                    w.answers = f"the job ended before the second user had tried it: {w.answers}"
            finally:
                for pid in held:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
        w.out, w.err = proc.communicate(timeout=900)
        w.status = proc.returncode
    finally:
        end(proc)
        if probe is not None:
            end(probe)
    w.markers = sorted(os.listdir(markers))
    w.tmp_left = sorted(os.listdir(os.path.join(work, "tmp")))
    w.parts = part_bytes(__import__("pathlib").Path(work) / "out") if os.path.isdir(os.path.join(work, "out")) else {}
    w.files = {path: data for path, data in texts(work).items() if not path.startswith(markers)
               and os.path.basename(path) not in {f"{n}.py" for n in PLANTED}}
    for folder in engine.own_logs:  # (the canaries are this run's own: what others' runs left there holds none)
        w.files.update(texts(folder))
    return w


def test_the_same_bytes_as_inline(engine, hostile, reference):
    """The faces job's part files are the inline engine's, byte for byte; the summary the same; TMPDIR empty."""
    assert hostile.status == 0, hostile.err[-3000:]
    assert hostile.parts == reference and hostile.parts
    summary = [line for line in hostile.err.splitlines() if line.startswith("gpumr: 48 records: ")]
    assert len(summary) == 1 and summary[0].startswith("gpumr: 48 records: 48 on CPU, 0 on GPU, 0 bad in "), summary
    assert hostile.tmp_left == []


def test_a_module_planted_in_the_current_folder_never_runs(engine, hostile):
    """``yaml.py``, ``numpy.py`` and ``gpumr.py`` in the folder the job is started from: none imported, by any
    process of the job (the launcher, a framework's daemon or JVM's Python workers, a fork server, a task)."""
    assert hostile.markers == [], hostile.markers
    assert hostile.status == 0, hostile.err[-3000:]


def test_secrets_in_the_environment_reach_no_file_and_no_debug_line(engine, hostile):
    """``AWS_SECRET_ACCESS_KEY`` and ``MY_TOKEN``: in no file the job leaves (its output, ``--framework-logs``,
    RADICAL-Pilot's sandbox, its scratch and temporary folders, the log folder of PyFlink's installation) and not
    on its stderr under ``--debug``."""
    assert hostile.status == 0, hostile.err[-3000:]
    assert any("/out/part-" in path for path in hostile.files), sorted(hostile.files)  # (the scan saw the output)
    for canary in hostile.canaries:
        assert canary not in hostile.err and canary not in hostile.out
        assert [p for p, data in hostile.files.items() if canary.encode() in data] == []


def test_another_user_reaches_no_listener_and_no_folder_of_the_job(engine, hostile):
    """The second user, while the job runs: every TCP listener of the job's processes refuses Dask's plain and
    TLS clients (without the job's certificate) and Py4J without the gateway's token; every folder the job made
    is 0700 and not listed. Flink and RADICAL-Pilot are refused on such a node in one line, status 1."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to make a second local user with useradd)")
    if hostile.no_probe:
        missing("the second user's attempts", hostile.no_probe)
    assert isinstance(hostile.answers, dict), hostile.answers
    assert hostile.status == 0, hostile.err[-3000:]
    if engine.open_ports:
        status, out, err = hostile.refusal
        line = one_line(status, err)
        assert line.startswith(f"gpumr: error: --engine {engine.name}: ") and "--allow-open-ports" in line, line
    assert hostile.ports or engine.name not in LISTENING, "no listener found: the second user tried nothing"
    answered = {port: said for port, said in hostile.answers["ports"].items() if any(": answered" in s for s in said)}
    assert answered == {}, answered
    private = {path: mode for path, mode in hostile.modes.items() if not os.path.basename(path).startswith(STAGE)}
    assert private and all(mode == 0o700 for mode in private.values()), hostile.modes
    listed = {folder: said for folder, said in hostile.answers["folders"].items()
              if folder in private and "refused" not in said}
    assert listed == {}, listed


# ---- 8. a CT job on a simulated GPU ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    """Small CT projections (32^3 voxels, 48 angles) with their geometry beside them."""
    from conftest import ct_phantom
    return ct_phantom(tmp_path_factory.mktemp("phantom"), 32, 48)[0]


def test_a_ct_job_on_a_gpu_puts_every_slab_there_in_one_owner_where_the_tasks_run_here(engine, phantom, tmp_path):
    """Four slabs under ``--device auto`` with one simulated GPU: on engines whose tasks run on this machine the
    job's GPU owner runs every one, set up once; Hadoop's tasks set their GPU up themselves, each slab once."""
    import argparse

    from gpumr.engines import get
    engine.need_jobs()
    status, out, err = engine.run(["-v", *engine.argv("backproject", "--projections", phantom, "--slab", "8", "-o",
                                                      tmp_path / "out")], str(tmp_path),
                                  env={"GPUMR_SIMULATE_GPUS": "1"})
    assert status == 0, err[-3000:]
    values = [json.loads(line.split(b"\t", 1)[1]) for data in part_bytes(tmp_path / "out").values()
              for line in data.splitlines()]
    here = get(engine.name).tasks_here(argparse.Namespace(master="local[1]", scheduler=None, jobmanager=None,
                                                          resource="local.localhost"))
    setups = [line for line in err.splitlines() if "GPU owner: backproject set up on gpu:0" in line]
    assert len(setups) == (1 if here else 0), err[-3000:]
    devices = {v["device"] for v in values}  # (elsewhere, --device auto may give a slab the CPU)
    assert len(values) == 4 and (devices == {"gpu:0"} if here else devices <= {"gpu:0", "cpu"}), err[-3000:]
