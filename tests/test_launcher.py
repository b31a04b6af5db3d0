"""One launcher, one task runtime: each class of the fifth hostile round, against real processes.

A Dask scheduler and worker started as separate processes (``dask
scheduler``, ``dask worker``), the moto S3 server, a real second user; the
launcher's checks counted on every engine.
"""

import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import child_with, ct_phantom, forked_by, interrupt_job, lines_of

from gpumr.cli import main

pytestmark = pytest.mark.slow


def gpumr(args, cwd, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("gpumr: error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A running Dask cluster of separate processes: ``dask scheduler`` and one ``dask worker`` of one thread."""
    pytest.importorskip("distributed", reason="the Dask engine needs dask.distributed (the dev extra)")
    d = tmp_path_factory.mktemp("dask")
    file = d / "scheduler.json"
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    env = dict(os.environ, DASK_DISTRIBUTED__LOGGING__DISTRIBUTED="error")
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                               "--scheduler-file", str(file)], cwd=d, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 120
    while not file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    procs.append(subprocess.Popen([dask, "worker", "--scheduler-file", str(file), "--nworkers", "1", "--nthreads", "1",
                                   "--no-dashboard", "--local-directory", str(d / "worker")], cwd=d, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    address = json.loads(file.read_text())["address"]
    from distributed import Client
    with Client(address, timeout=60) as c:
        c.wait_for_workers(1, timeout=120)
    yield address
    for p in reversed(procs):
        p.terminate()
        p.wait(60)


# ---- class 1: side files by content ----------------------------------------------------------------------
def test_two_jobs_on_one_running_cluster_never_see_each_others_side_files(scheduler, tmp_path):
    """The second job, with other projections under the same name, used to write the first job's volume."""
    volumes = {}
    for name, voxels, angles in (("pa", 12, 16), ("pb", 12, 24)):
        (tmp_path / name).mkdir()
        seq, direct = ct_phantom(tmp_path / name, voxels, angles, name="proj")
        volumes[name] = direct
        proc = gpumr(["run", "backproject", "--projections", seq, "--slab", "6", "-o", tmp_path / name / "out",
                      "--engine", "dask", "--scheduler", scheduler, "--device", "cpu"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert main(["ct", "assemble", str(tmp_path / name / "out"), "-o", str(tmp_path / name / "vol.npy")]) == 0
    assert not np.allclose(volumes["pa"], volumes["pb"], atol=1e-3)  # (the two scans differ)
    for name, direct in volumes.items():
        got = np.load(tmp_path / name / "vol.npy")
        assert np.linalg.norm(got - direct) / np.linalg.norm(direct) < 1e-5, name


def test_concurrent_jobs_with_same_named_cascades_each_get_their_own(scheduler, packed, tmp_path):
    """Two jobs at once, each shipping a cascade named ``c.xml`` (different files): each gets the faces of its own."""
    import cv2
    outs = {}
    for name in ("default", "alt2"):
        (tmp_path / name).mkdir()
        src = os.path.join(cv2.data.haarcascades, f"haarcascade_frontalface_{name}.xml")
        (tmp_path / name / "c.xml").write_bytes(open(src, "rb").read())
    procs = {name: subprocess.Popen([sys.executable, "-m", "gpumr", "run", "faces", packed, "-o",
                                     str(tmp_path / name / "out"), "--engine", "dask", "--scheduler", scheduler,
                                     "--cascade", str(tmp_path / name / "c.xml"), "--device", "cpu"],
                                    cwd=tmp_path, stderr=subprocess.PIPE, text=True)
             for name in ("default", "alt2")}
    for name, p in procs.items():
        assert p.wait(600) == 0, p.stderr.read()[-3000:]
        outs[name] = lines_of(str(tmp_path / name / "out"))
        ref = tmp_path / name / "ref"
        assert main(["run", "faces", packed, "-o", str(ref), "--cascade", str(tmp_path / name / "c.xml"),
                     "--device", "cpu", "--no-conf"]) == 0
        assert outs[name] == lines_of(str(ref)), name
    assert outs["default"] != outs["alt2"]


def _on_scheduler(client):
    """Every plugin the scheduler keeps (``Client.upload_file`` left two per file, holding its bytes)."""
    return client.run_on_scheduler(lambda dask_scheduler: [*dask_scheduler.plugins, *dask_scheduler.worker_plugins])


def test_side_files_reach_a_running_cluster_in_chunks_and_stay_on_the_workers_not_the_scheduler(scheduler, tmp_path,
                                                                                                 monkeypatch):
    """``Client.upload_file`` kept every job's projections on the scheduler (two plugins holding their bytes: 245 MB
    more after each 256^3 job) and sent them again for every job. Now: streamed in chunks to the worker, published
    there whole under the content name, not sent again for a second job, nothing left on the scheduler."""
    import hashlib

    from distributed import Client

    from gpumr.engines.dask import sidefiles as dask_ship
    seq, direct = ct_phantom(tmp_path, 12, 16)
    assert os.path.getsize(seq) > 4 * 1024
    monkeypatch.setattr(dask_ship, "CHUNK", 1024)  # (the launcher cuts the chunks: here, in this process)
    sent = []
    real_send = dask_ship._send
    monkeypatch.setattr(dask_ship, "_send", lambda client, side, *a: sent.append(side.option) or
                        real_send(client, side, *a))
    digest = hashlib.sha256(open(seq, "rb").read()).hexdigest()
    name = f"{digest[:24]}-{os.path.basename(seq)}"  # (its content name: gpumr.launch.ship)

    def copy(dask_worker):
        path = os.path.join(dask_worker.local_directory, name)
        return hashlib.sha256(open(path, "rb").read()).hexdigest(), os.stat(path).st_ino, os.stat(path).st_mtime_ns
    with Client(scheduler, timeout=60) as client:
        before = _on_scheduler(client)
        copies = []
        for i in range(2):
            out = tmp_path / f"out{i}"
            assert main(["run", "backproject", "--projections", seq, "--slab", "6", "-o", str(out), "--engine", "dask",
                         "--scheduler", scheduler, "--device", "cpu", "-q"]) == 0
            assert main(["ct", "assemble", str(out), "-o", str(tmp_path / f"vol{i}.npy"), "-q"]) == 0
            got = np.load(tmp_path / f"vol{i}.npy")
            assert np.linalg.norm(got - direct) / np.linalg.norm(direct) < 1e-5
            assert _on_scheduler(client) == before  # nothing of the job stays on the scheduler
            copies.append(client.run(copy).popitem()[1])
        assert copies[0][0] == digest  # the worker's copy is the file, whole
        assert copies[1] == copies[0]  # the second job sent nothing: the same copy, untouched
    assert sent.count("--projections") == 1, sent


def test_a_worker_that_joins_later_fetches_a_side_file_from_one_that_holds_it(scheduler, tmp_path):
    """A worker that joins after the launcher shipped (dask-jobqueue's batch jobs start one by one) gets the copy from
    a worker that has it, in chunks, when its task asks; where none can send it, one line says so."""
    import hashlib

    from distributed import Client

    from gpumr.engines.dask import sidefiles as dask_ship
    from gpumr.errors import GpumrError
    data = os.urandom(3 * dask_ship.CHUNK + 123)
    name = f"{hashlib.sha256(data).hexdigest()[:24]}-later.bin"
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    with Client(scheduler, timeout=60) as client:
        old = list(client.scheduler_info()["workers"])
        assert len(old) == 1
        client.run(lambda dask_worker: open(os.path.join(dask_worker.local_directory, name), "wb").write(data))
        proc = subprocess.Popen([dask, "worker", scheduler, "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                                 "--local-directory", str(tmp_path / "later")], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(2, timeout=120)
            new = [w for w in client.scheduler_info()["workers"] if w not in old]
            path = client.submit(dask_ship.found, {name: (len(data), old)}, name, workers=new, pure=False).result()
            assert path.startswith(str(tmp_path / "later")) and open(path, "rb").read() == data
            assert not [f for f in os.listdir(os.path.dirname(path)) if f.endswith(".tmp")]  # (no unfinished copy)
            other = f"{'0' * 24}-nowhere.bin"  # a holder that does not hold it: the task's error says so
            with pytest.raises(GpumrError, match="no worker that held it could send it"):
                client.submit(dask_ship.found, {other: (5, old)}, other, workers=new, pure=False).result()
        finally:
            proc.terminate()
            proc.wait(60)
            deadline = time.monotonic() + 60
            while len(client.scheduler_info()["workers"]) > 1 and time.monotonic() < deadline:
                time.sleep(0.2)  # (the tests after this one expect the cluster's one worker)


# ---- class 2: secrets ------------------------------------------------------------------------------------
def test_a_scheduler_address_with_a_secret_is_refused_without_showing_it(tmp_path, packed):
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "dask", "--scheduler",
                  "tcp://bob:SECRET@127.0.0.1:1"], tmp_path)
    assert "SECRET" not in proc.stderr and "bob" not in proc.stderr
    assert "tcp://***@127.0.0.1:1" in one_line(proc)


# ---- class 4: hangs --------------------------------------------------------------------------------------
def test_a_scheduler_that_never_answers_ends_the_job_in_bounded_time(tmp_path, packed):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
    t0 = time.monotonic()
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "dask", "--scheduler",
                  f"tcp://127.0.0.1:{server.getsockname()[1]}"], tmp_path, timeout=120)
    assert time.monotonic() - t0 < 90
    assert "did not answer" in one_line(proc) or "no Dask scheduler answered" in one_line(proc)
    assert not os.path.exists(tmp_path / "o")
    server.close()


@pytest.mark.parametrize("address, words", [("tls://127.0.0.1:1", "needs Dask's TLS configuration"),
                                            ("ucx://127.0.0.1:1", "needs UCX for Dask"),
                                            ("http://127.0.0.1:1", "not a Dask scheduler address")])
def test_other_schemes_are_one_line(tmp_path, packed, address, words):
    assert words in one_line(gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "dask", "--scheduler",
                                    address], tmp_path))


# ---- class 6: signals ------------------------------------------------------------------------------------
SLOW = """
import time
from gpumr import Workload


class Slow(Workload):
    name = "slow"
    decode = "raw"

    def cpu(self, key, value, o):
        time.sleep(1)
        return {"n": len(value)}
"""


def test_a_job_stopped_on_a_running_cluster_waits_for_its_running_task_and_leaves_nothing(scheduler, packed, tmp_path):
    """A cancelled task leaves the scheduler's list at once while its worker's thread runs it on: the launcher
    dropped the stage, and the task, ending seconds later, made it again beside the output with its files (its
    arrays' folder, made with its parents)."""
    from distributed import Client
    (tmp_path / "slow.py").write_text(SLOW.replace("time.sleep(1)", "time.sleep(3)").replace(
        'return {"n": len(value)}', 'import numpy\n        return {"n": len(value), "a": numpy.zeros(4)}'))
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "run", "slow.py:Slow", packed, "-o", str(tmp_path / "out"),
                             "--engine", "dask", "--scheduler", scheduler, "--split-size", "32KiB"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        with Client(scheduler, timeout=60) as client:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not any("-map-" in str(k) for keys in client.processing().values()
                                                          for k in keys):
                time.sleep(0.05)  # a map task runs: a record of 3 s has begun
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr.read().strip().splitlines()[-1] == "gpumr: terminated"
    time.sleep(4)  # (longer than a record: a task that ran on has written by now)
    assert os.listdir(tmp_path) == ["slow.py"]  # no stage, no output, no proof


CRASH = """
import os, time
from gpumr import Workload

PIDS = {pids!r}


class Crash(Workload):
    name = "crash"
    decode = "raw"

    def cpu(self, key, value, o):
        open(os.path.join(PIDS, str(os.getpid())), "w").close()
        try:
            os.mkdir(PIDS + "-first")  # the job's first record: its task sleeps on it
        except FileExistsError:
            os._exit(3)  # a record of another task (the first one's sleeps): this task dies
        time.sleep(120)
        return {{"n": len(value)}}
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the local engine runs one task process on one core: "
                    "no second task to end")
def test_a_local_task_that_dies_ends_the_others_at_once(tmp_path, packed):
    """mrjob's local runner ended its Pool's worker processes when a task failed, and the other tasks' processes
    (the workers' children) ran on, orphaned, to their end; here one sleeps two minutes a record."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "crash.py").write_text(CRASH.format(pids=str(pids)))
    t0 = time.monotonic()
    proc = gpumr(["run", "crash.py:Crash", packed, "-o", tmp_path / "out", "--engine", "local", "--split-size",
                  "32KiB"], tmp_path, timeout=300)
    assert "a task of the local job failed" in one_line(proc) and time.monotonic() - t0 < 100
    assert len(os.listdir(pids)) >= 2
    deadline = time.monotonic() + 10  # (a killed process's end is the kernel's, a moment later)
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in os.listdir(pids)):
        time.sleep(0.1)
    assert not [p for p in os.listdir(pids) if os.path.exists(f"/proc/{p}")]
    assert sorted(os.listdir(tmp_path)) == ["crash.py", "pids", "pids-first"]


@pytest.mark.parametrize("engine, marker", [("spark", "java"), ("dask", "multiprocessing.forkserver"),
                                            ("radical", "rp.")])
def test_a_signal_as_the_framework_starts_leaves_nothing(tmp_path, packed, engine, marker):
    """Ctrl-C the moment the framework starts. Spark: inside ``getOrCreate`` the JVM (which ignores SIGINT) was left
    running, for ever. Dask: every run left ``dask-scratch-space`` in TMPDIR (the signal comes as the fork server
    forks the first worker). RADICAL-Pilot: a signal while its session started left the session open, and the
    launcher waited at exit for its forked process, for ever."""
    ready = forked_by(marker) if engine == "dask" else child_with(marker)
    more = ["--allow-open-ports"] if engine == "radical" else []  # (another test's second user may have processes)
    status, err, tmp, left = interrupt_job(sys.executable, ["faces", packed, "-o", str(tmp_path / "out"), "--engine",
                                                            engine, "--device", "cpu", *more], str(tmp_path), ready)
    assert status == 130 and err.strip().splitlines() == ["gpumr: interrupted"], err[-3000:]
    assert tmp == [] and left == [] and sorted(os.listdir(tmp_path)) == ["tmp"]


def test_a_ctrl_c_as_the_job_folder_is_made_leaves_nothing_in_tmpdir(tmp_path, monkeypatch):
    """The folder (and the file Python's tempfile makes and removes to test TMPDIR on its first use) is made
    whole: a Ctrl-C meanwhile comes after it, and the folder goes as the job does."""
    import signal
    import tempfile

    from gpumr.launch.job import job_folder
    real = tempfile.mkdtemp

    def interrupted(*args, **kwargs):
        made = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # (as a terminal's Ctrl-C, the moment the folder exists)
        return made

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempfile, "mkdtemp", interrupted)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # (the command's; a module imported by an
    try:                                                               # earlier test, dask_jobqueue's, sets its own)
        with pytest.raises(KeyboardInterrupt):
            with job_folder():
                pytest.fail("the job went on past a Ctrl-C")
    finally:
        signal.signal(signal.SIGINT, saved)
    assert os.listdir(tmp_path) == []


# ---- class 7: not one line -------------------------------------------------------------------------------
def test_the_task_script_and_dry_runs_are_one_line_or_a_plan(tmp_path, packed):
    proc = subprocess.run([sys.executable, "-m", "gpumr.engines.mrjob.task", "--gpumr-spec", "x"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "the task script mrjob's runners start" in one_line(proc)
    for engine in ("inline", "dask"):
        proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", engine, "--dry-run"], tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith("gpumr run: workload faces"), proc.stderr
    assert "--workers: invalid int value: 'abc'" in one_line(
        gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "dask", "--workers", "abc"], tmp_path))
    assert "--master: expected one argument" in one_line(
        gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "spark", "--master"], tmp_path))
    assert os.listdir(tmp_path) == []


# ---- class 8: engines agree ------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["inline", "local", "dask", "spark"])
def test_the_same_outcome_has_the_same_status_on_every_engine(tmp_path, packed, engine):
    (tmp_path / "empty.seq").write_bytes(b"")
    extra = {"dask": ["--workers", "1"], "spark": ["--master", "local[1]"]}.get(engine, [])
    # A 0-byte input alone: no SequenceFile among the inputs, refused before any task, status 1.
    assert "no SequenceFile among the inputs" in one_line(gpumr(
        ["run", "faces", tmp_path / "empty.seq", "-o", tmp_path / "o", "--engine", engine, *extra], tmp_path))
    # Beside a good one: its error line, the job done, status 0, the bad file named in the summary.
    proc = gpumr(["run", "faces", packed + "/part-00000.seq", tmp_path / "empty.seq", "-o", tmp_path / "o",
                  "--engine", engine, "--device", "cpu", *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = proc.stderr.strip().splitlines()[-1]
    assert " 1 bad (" in summary and "empty.seq: bytes 0-0 could not be read: empty file" in summary, summary
    # A rerun on another engine replaces the output of this one.
    other = "inline" if engine != "inline" else "local"
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", other, "--device", "cpu"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_verbose_reaches_an_embedded_dask_clusters_tasks(tmp_path, packed, monkeypatch):
    """``-v`` reaches every task's logger (``-q`` on every engine is tests/test_conformance.py's): an embedded
    cluster's workers write on this terminal, their own debug lines too."""
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")  # (the tasks have something to say: simulated GPUs)
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "v", "--engine", "dask", "-v", "--workers", "1"], tmp_path)
    assert proc.returncode == 0 and "gpumr: debug: faces: 2 task(s) on --engine" in proc.stderr, proc.stderr[-3000:]
    assert "gpumr: debug: task 0 started" in proc.stderr and "simulated" in proc.stderr, proc.stderr[-3000:]


def test_a_failed_inline_job_leaves_nothing_in_the_temp_folder(tmp_path, packed):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--no-such-mrjob-option"], tmp_path, env=env)
    one_line(proc)
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--cascade", tmp_path / "missing.xml"], tmp_path,
                 env=env)
    one_line(proc)
    (tmp_path / "broken.py").write_text(BROKEN)  # a job whose every task fails
    assert one_line(gpumr(["run", "broken.py:Broken", packed, "-o", tmp_path / "o"], tmp_path, env=env)) == \
        "gpumr: error: a task of the inline job failed: RuntimeError: setup exploded (see: gpumr help job-failed)"
    assert os.listdir(tmp) == [] and not os.path.exists(tmp_path / "o")


def test_a_stopped_job_ends_what_still_writes_in_its_folder_before_removing_it(tmp_path, monkeypatch):
    """As Flink's gateway JVM did when Ctrl-C came while it started (it ignores SIGINT): it made its scratch folders
    in the job's folder after the launcher had removed it, and they stayed in TMPDIR (found with a signal 1-4 s into
    a job). The helper is asked to end (SIGTERM) before the folder goes."""
    from gpumr.launch import job
    monkeypatch.setattr(job.tempfile, "tempdir", str(tmp_path))
    writer = ("import os, signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nend = time.time() + 120\n"
              "while time.time() < end:\n    os.makedirs(os.path.join(sys.argv[1], 'minicluster'), exist_ok=True)\n"
              "    time.sleep(0.02)\n")  # (bounded: a failed run of this test leaves no writer for ever)
    helper = None
    try:
        with pytest.raises(KeyboardInterrupt):
            with job.job_folder() as folder:
                helper = subprocess.Popen([sys.executable, "-c", writer, folder])
                while not os.path.isdir(os.path.join(folder, "minicluster")):
                    time.sleep(0.01)
                raise KeyboardInterrupt
        assert helper.wait(10) == -signal.SIGTERM
        time.sleep(0.2)
        assert os.listdir(tmp_path) == []
    finally:
        if helper is not None and helper.poll() is None:
            helper.kill()
            helper.wait()


def test_a_local_job_on_simulated_gpus_leaves_nothing_in_any_temp_folder(tmp_path, packed):
    """mrjob's local runner left /tmp/wrapper.lock.<job key> behind (the setup wrapper of the mrjob it zipped and
    shipped, /tmp hard-coded; CI's /tmp held one per local job): neither the job's TMPDIR nor /tmp keeps anything
    of a job, the emulated kernels' loaded copies included (removed once loaded, not at exit)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), GPUMR_SIMULATE_GPUS="1")
    started = time.time()
    proc = gpumr(["run", "faces", packed, "-o", tmp_path / "o", "--engine", "local", "--device", "gpu"], tmp_path,
                 env=env)
    assert proc.returncode == 0 and " 12 on GPU" in proc.stderr, proc.stderr[-3000:]
    assert os.listdir(tmp) == []
    user = getpass.getuser()
    made = [n for n in os.listdir("/tmp") if n.startswith(f"wrapper.lock.task.{user}.")
            and os.stat(os.path.join("/tmp", n)).st_mtime >= started - 1]
    assert made == []


BROKEN = """
from gpumr import Workload


class Broken(Workload):
    name = "broken"

    def setup(self, o):
        raise RuntimeError("setup exploded")

    def cpu(self, key, image, o):
        return {}
"""


@pytest.mark.parametrize("engine", ["local", "dask", "spark"])
def test_a_failing_task_is_one_line_on_every_engine(tmp_path, packed, engine):
    (tmp_path / "broken.py").write_text(BROKEN)
    extra = {"dask": ["--workers", "1"], "spark": ["--master", "local[1]"]}.get(engine, [])
    line = one_line(gpumr(["run", "broken.py:Broken", packed, "-o", tmp_path / "o", "--engine", engine, *extra],
                          tmp_path))
    assert line.endswith(f"a task of the {engine} job failed: RuntimeError: setup exploded "
                         "(see: gpumr help job-failed)"), line
    assert sorted(os.listdir(tmp_path)) == ["broken.py"]


# ---- checks once per job, on every engine ----------------------------------------------------------------
COUNTED = '''
import os
from gpumr.ct.workload import Backproject


class Counted(Backproject):
    """Backprojection, its launcher-side check and its task set-up counted in files."""

    name = "counted"

    def check(self, o):
        with open({checks!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        super().check(o)

    def setup(self, o):
        with open({setups!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        super().setup(o)
'''


@pytest.mark.parametrize("engine", ["inline", "local", "dask", "spark"])
def test_backproject_check_runs_once_per_job_on_every_engine(tmp_path, engine):
    """The launcher was written three times: ``gpumr run backproject --engine inline`` read and checked every
    projection twice. The check (Backproject's own, which reads every projection) runs once, in the launcher."""
    seq, _ = ct_phantom(tmp_path, 8, 8)
    checks, setups = tmp_path / "checks", tmp_path / "setups"
    (tmp_path / "counted.py").write_text(COUNTED.format(checks=str(checks), setups=str(setups)))
    extra = {"dask": ["--workers", "2"], "spark": ["--master", "local[2]"]}.get(engine, [])
    proc = gpumr(["run", "counted.py:Counted", "--projections", seq, "--slab", "2", "-o", tmp_path / "out",
                  "--engine", engine, "--device", "cpu", *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launcher = checks.read_text().split()
    assert len(launcher) == 1  # once per job
    assert setups.exists() and launcher[0] not in setups.read_text().split() or engine == "inline"
    assert len(lines_of(str(tmp_path / "out"))) == 4
