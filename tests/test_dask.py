"""The Dask engine on a real ``LocalCluster`` of two worker processes (``dask_client`` in conftest).

Both workloads give the lines an inline ``--device cpu`` run gives; on the
workers' simulated GPUs every record runs on a GPU; input and output at
S3 URIs (the moto server); a worker killed mid-job, and every record still
comes out exactly once; a failed job leaves nothing visible.
"""

import glob
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
from conftest import ct_phantom, lines_of
from s3server import BUCKET

from gpumr.errors import GpumrError
from gpumr.io.packing import pack

pytest.importorskip("distributed", reason="the Dask engine needs dask.distributed (the dev extra)")
from conftest import run_workload


def run(kind, argv, client=None):
    """The Dask engine (on the session's cluster where given)."""
    return run_workload(kind, argv, "dask", client)


def mrjob_run(kind, argv, engine):
    return run_workload(kind, argv, engine)

pytestmark = pytest.mark.slow


def no_ms(counts):
    return {k: v for k, v in counts.items() if "milliseconds" not in k}


def without_device(lines):
    """Output values less what says where they ran."""
    out = {}
    for line in lines:
        key, value = line.split("\t", 1)
        out[json.loads(key)] = {k: v for k, v in json.loads(value).items() if k not in ("device", "simulated")}
    return out


def inline(kind, argv, out):
    """The reference: the same workload on mrjob's inline runner, ``--device cpu``."""
    counts, _ = mrjob_run(kind, [*argv, "-o", str(out), "--device", "cpu", "--no-conf"], "inline")
    return counts, lines_of(str(out))


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    return ct_phantom(tmp_path_factory.mktemp("ct"), 16, 24)


def test_faces_equal_inline_every_record_once(dask_client, packed, tmp_path):
    want_counts, want = inline("faces", [packed], tmp_path / "inline")
    # Splits much smaller than the files: most split boundaries fall inside records.
    counts, _ = run("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "20KiB", "--device", "cpu"],
                    client=dask_client)
    assert lines_of(str(tmp_path / "out")) == want and len(want) == 12
    assert no_ms(counts) == no_ms(want_counts) and counts["records on CPU"] == 12
    assert sorted(os.listdir(tmp_path / "out")) == ["_SUCCESS", "part-00000"]
    # Three reducers: the parts together are the same sorted lines; the earlier output (gpumr dask's) is replaced.
    counts, _ = run("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "20KiB", "--device", "cpu",
                              "--reducers", "3"], client=dask_client)
    assert lines_of(str(tmp_path / "out")) == want and counts["records on CPU"] == 12
    assert sorted(os.listdir(tmp_path / "out")) == ["_SUCCESS", "part-00000", "part-00001", "part-00002"]
    counts, _ = run("faces", [packed, "-o", str(tmp_path / "out0"), "--device", "cpu", "--reducers", "0"],
                    client=dask_client)
    assert sorted(lines_of(str(tmp_path / "out0"))) == want and counts["records on CPU"] == 12
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == [".inline.gpumr", ".out.gpumr", ".out0.gpumr"]


def test_backproject_equals_inline(dask_client, phantom, tmp_path):
    seq, _ = phantom
    argv = ["--projections", seq, "--slab", "5"]
    want_counts, want = inline("backproject", argv, tmp_path / "inline")
    counts, _ = run("backproject", [*argv, "-o", str(tmp_path / "out"), "--device", "cpu"], client=dask_client)
    got = lines_of(str(tmp_path / "out"))
    assert got == want and len(got) == 4  # the same slab lines (the arrays they name: below), in the same order
    # The same slabs, each once; the voxels equal to float32 rounding (the CPU backprojector is numba's parallel
    # fastmath loop, whose vectorised sums may round differently in another process).
    for z in (0, 5, 10, 15):
        np.testing.assert_allclose(np.load(tmp_path / "out" / "arrays" / f"z{z:05d}.slab.npy"),
                                   np.load(tmp_path / "inline" / "arrays" / f"z{z:05d}.slab.npy"), rtol=1e-5, atol=1e-7)
    assert no_ms(counts) == no_ms(want_counts) and counts["records on CPU"] == 4  # 16 slices, 5 per slab


def test_simulated_gpus_take_every_record(dask_client, packed, phantom, tmp_path):
    """The workers see two simulated GPUs and declare a GPU resource: ``--device gpu`` runs every record there."""
    _, want = inline("faces", [packed], tmp_path / "inline")
    counts, _ = run("faces", [packed, "-o", str(tmp_path / "faces"), "--split-size", "40KiB", "--device", "gpu"],
                    client=dask_client)
    got = lines_of(str(tmp_path / "faces"))
    assert counts["records on GPU"] == 12 and not counts.get("records on CPU")
    assert all(json.loads(line.split("\t", 1)[1])["device"].startswith("gpu:") for line in got)
    assert all(json.loads(line.split("\t", 1)[1])["simulated"] is True for line in got)
    assert without_device(got) == without_device(want)
    seq, _ = phantom
    counts, _ = run("backproject", ["--projections", seq, "--slab", "8", "-o", str(tmp_path / "ct"), "--device", "gpu"],
                    client=dask_client)
    assert counts["records on GPU"] == 2 and not counts.get("records on CPU")
    assert len(lines_of(str(tmp_path / "ct"))) == 2 and len(os.listdir(tmp_path / "ct" / "arrays")) == 2


def test_s3_input_and_output(dask_client, s3, packed, tmp_path):
    _, want = inline("faces", [packed], tmp_path / "inline")
    for name in os.listdir(packed):
        if not name.startswith("."):
            with open(os.path.join(packed, name), "rb") as f:
                s3.put(f"dask/in/{name}", f.read())
    out = f"s3://{BUCKET}/dask/out"
    counts, _ = run("faces", [f"s3://{BUCKET}/dask/in", "-o", out, "--split-size", "20KiB", "--device", "cpu"],
                    client=dask_client)
    assert counts["records on CPU"] == 12
    keys = s3.keys("dask/")
    assert sorted(k for k in keys if k.startswith("dask/out/")) == ["dask/out/_SUCCESS", "dask/out/part-00000"]
    assert s3.get("dask/out/part-00000").decode().splitlines() == want
    assert not [k for k in keys if "/." in k and ".tmp" in k]  # no stage left


def test_a_worker_killed_mid_job_every_record_once(dask_client, sample_frames, tmp_path):
    """SIGKILL one worker process once the first task has written its file: Dask re-runs its tasks on the other
    (and on the worker its nanny restarts); the client publishes one attempt per split."""
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(4):
        for name in sorted(os.listdir(sample_frames)):
            os.link(os.path.join(sample_frames, name), frames / f"{i}-{name}")
    pack([str(frames)], str(tmp_path / "seq"), shards=2, progress=False)
    _, want = inline("faces", [str(tmp_path / "seq")], tmp_path / "inline")
    pids = dask_client.run(os.getpid)
    killed = []

    def kill_when_started():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not glob.glob(str(tmp_path / ".out.*" / "out" / "map-*")):
            time.sleep(0.01)
        pid = sorted(pids.values())[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    t = threading.Thread(target=kill_when_started)
    t.start()
    counts, _ = run("faces", [str(tmp_path / "seq"), "-o", str(tmp_path / "out"), "--split-size", "8KiB",
                              "--device", "cpu"], client=dask_client)
    t.join()
    assert killed
    got = lines_of(str(tmp_path / "out"))
    keys = [json.loads(line.split("\t", 1)[0]) for line in got]
    assert got == want and len(keys) == len(set(keys)) == 48
    assert counts["records on CPU"] == 48 and not counts.get("bad records")
    dask_client.wait_for_workers(2, timeout=60)  # the nanny restarted it, for the tests after this one


def test_refusals_and_failures_are_one_line_and_leave_nothing(dask_client, packed, tmp_path):
    with pytest.raises(GpumrError, match="^--projections is required: "):
        run("backproject", ["--slab", "4", "-o", str(tmp_path / "x")])
    with pytest.raises(GpumrError, match="^-o OUT is required"):
        run("faces", [packed])
    with pytest.raises(GpumrError, match="^--hadoop-splits: an option of --engine inline, local, hadoop, emr; "
                                         "--engine dask does not take it$"):
        run("faces", [packed, "-o", str(tmp_path / "x"), "--hadoop-splits"])
    with pytest.raises(GpumrError, match="^--scheduler tcp://127.0.0.1:9: no Dask scheduler answered"):
        run("faces", [packed, "-o", str(tmp_path / "x"), "--scheduler", "tcp://127.0.0.1:9"])
    # A task that fails (a cascade the workers cannot load: spoilt after the client checked it): one line, the
    # task's own error; nothing visible.
    import shutil

    import cv2
    cascade = tmp_path / "gone.xml"
    shutil.copy(os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_alt2.xml"), cascade)
    from gpumr.faces.workload import Faces
    check = Faces.check

    def check_then_remove(self, o):
        check(self, o)
        cascade.write_text("<opencv_storage>not a cascade</opencv_storage>")
    Faces.check = check_then_remove
    try:
        with pytest.raises(GpumrError, match="gone.xml") as info:
            run("faces", [packed, "-o", str(tmp_path / "out"), "--cascade", str(cascade), "--device", "cpu"],
                client=dask_client)
    finally:
        Faces.check = check
    assert "\n" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["gone.xml"]


def test_ctrl_c_stops_the_job_and_leaves_nothing(sample_frames, tmp_path):
    """``gpumr run --engine dask`` interrupted once a task has written its file: status 130, one line, the embedded
    cluster stopped, and neither the output nor its stage left."""
    import subprocess
    import sys
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(4):
        for name in sorted(os.listdir(sample_frames)):
            os.link(os.path.join(sample_frames, name), frames / f"{i}-{name}")
    pack([str(frames)], str(tmp_path / "seq"), shards=2, progress=False)
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "run", "faces", str(tmp_path / "seq"), "-o",
                             str(tmp_path / "out"), "--engine", "dask", "--workers", "1", "--split-size", "8KiB",
                             "--device", "cpu"], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not glob.glob(str(tmp_path / ".out.*" / "out" / "map-*")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "gpumr: interrupted" and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["frames", "seq"]


DASK_LOGS = """
import logging, sys
import distributed  # noqa: F401 (its logging configuration: handlers on distributed, distributed.client, tornado ...)
from gpumr.engines.dask import _quiet_logs
_quiet_logs(debug=sys.argv[1] == "debug")
logging.getLogger("distributed.scheduler").critical("Closed comm while trying to write")
logging.getLogger("distributed.client").warning("client warned")
logging.getLogger("tornado.application").error("Exception in callback")
"""


@pytest.mark.parametrize("debug", ["plain", "debug"])
def test_dasks_own_log_is_silent_without_debug_even_at_critical(debug):
    """CI met ``gpumr: interrupted`` under the traceback of the embedded scheduler's CRITICAL "Closed comm ... while
    trying to write" (a level of CRITICAL let it through), and Dask's configuration gives some loggers levels and
    handlers of their own. With --debug they all speak."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", DASK_LOGS, debug], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [m for m in ("Closed comm", "client warned", "Exception in callback") if m in proc.stderr]
    assert said == ([] if debug == "plain" else ["Closed comm", "client warned", "Exception in callback"]), proc.stderr


def test_ctrl_c_while_the_embedded_cluster_starts_stops_the_job(packed, tmp_path):
    """A Ctrl-C while the cluster's workers start (its first child process is up) ends the job: status 130, nothing
    left. Before the fix SIGINT was ignored for the start, the kernel handed it to the progress thread, which dropped
    it, and the job ran to the end with status 0."""
    import subprocess
    import sys

    import psutil
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "run", "faces", packed, "-o", str(tmp_path / "out"),
                             "--engine", "dask", "--workers", "2", "--device", "cpu"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not psutil.Process(proc.pid).children():
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "gpumr: interrupted" and "Traceback" not in err
    assert os.listdir(tmp_path) == []


EARLY = """
import os, time
from gpumr import Option, Workload
from gpumr.errors import GpumrError


def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])


def worker_up():
    # a worker: forked by the launcher's fork server (a child of this process that runs multiprocessing's)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            server = parent(pid)
            with open(f"/proc/{server}/cmdline", "rb") as f:
                if b"multiprocessing.forkserver" in f.read() and parent(server) == os.getpid():
                    return True
        except (OSError, ValueError):
            pass
    return False


class Early(Workload):
    name = "early"
    decode = "raw"
    options = (Option("--table", "a side file", metavar="FILE", side_file=True),)

    def check(self, o):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if worker_up():
                raise GpumrError(f"--table {os.path.basename(o.table)}: refused while the cluster started")
            time.sleep(0.02)
        raise GpumrError("no worker started while the side files were checked")

    def cpu(self, key, value, o):
        return {}
"""


def test_the_embedded_cluster_starts_while_the_side_files_are_checked_and_a_refusal_ends_it(packed, tmp_path):
    """The cluster's workers start while the launcher checks the side files (their start, 0.5 s after Dask's
    0.4 s import, overlaps the checks); a check that refuses then ends the job with its one line, and the cluster
    that started for it leaves no process and no file. The workload's check below waits for a worker of the
    launcher: before the early start it waited in vain (no worker before the plan), and said so."""
    import subprocess
    import sys

    from conftest import in_session
    (tmp_path / "early.py").write_text(EARLY)
    (tmp_path / "table.txt").write_text("a side file\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "run", "early.py:Early", packed, "--table", "table.txt",
                             "-o", str(tmp_path / "out"), "--engine", "dask", "--workers", "1"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    _, err = proc.communicate(timeout=300)
    said = "gpumr: error: --table table.txt: refused while the cluster started"
    assert proc.returncode == 1 and err.strip().splitlines() == [said], err[-3000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and in_session(proc.pid):
        time.sleep(0.2)
    assert not in_session(proc.pid) and os.listdir(tmp) == []
    assert sorted(os.listdir(tmp_path)) == ["early.py", "table.txt", "tmp"]


FORKED = """
import os
from gpumr import Workload


class Forked(Workload):
    name = "forked"
    decode = "raw"

    def cpu(self, key, value, o):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return {"parent": f.read().replace(b"\\0", b" ").decode()}
"""


def test_the_embedded_clusters_workers_are_forked_from_a_server_that_imported_dask_and_it_ends_with_the_job(
        packed, tmp_path):
    """A worker forked from the fork server the launcher started early (Dask and the task runtime imported) is
    ready as soon as the scheduler: spawned, each imported Dask again (0.3-0.4 s before a CT job's first slab).
    The server ends with the job: left to end with the launcher, it held the launcher's stdout and stderr 0.09 s
    past its exit while it tore its modules down."""
    import psutil
    (tmp_path / "forked.py").write_text(FORKED)
    from gpumr.launch.job import launch
    launch([f"{tmp_path / 'forked.py'}:Forked", packed, "-o", str(tmp_path / "out"), "--engine", "dask",
            "--workers", "1", "-q"])
    parents = {json.loads(line.split("\t", 1)[1])["parent"] for line in lines_of(str(tmp_path / "out"))}
    assert len(parents) == 1 and "multiprocessing.forkserver" in next(iter(parents)), parents
    assert "'distributed', 'gpumr.tasks.runtime'" in next(iter(parents))
    assert not [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]


PLANNED = """
import os, sys, time
from multiprocessing import forkserver
from gpumr.errors import GpumrError
from gpumr.launch.job import launch
seen = []
def cmdline(pid, deadline=10.0):
    # (the start returns once the exec closed its close-on-exec pipe, before the kernel sets the new command
    # line: on a busy machine it reads empty for a moment)
    end = time.monotonic() + deadline
    while True:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            got = f.read()
        if got or time.monotonic() > end:
            return got.replace(b"\\0", b" ").decode()
        time.sleep(0.01)
def spied(_real=forkserver.ensure_running):
    numpy = "numpy" in sys.modules
    _real()
    pid = forkserver._forkserver._forkserver_pid
    if not seen:
        seen.append((pid, numpy, cmdline(pid)))
forkserver.ensure_running = spied  # (as gpumr.engines.dask.cluster.fork_server calls it)
try:
    launch(sys.argv[1:])
except GpumrError as exc:
    print("refused:", exc)
print("server:", seen and seen[0][2])
print("numpy before it:", seen and seen[0][1])
print("ended:", not seen or not os.path.exists(f"/proc/{seen[0][0]}"))
"""


@pytest.mark.parametrize("engine, more, early", [("dask", [], True), ("dask=", [], True),
                                                 ("dask", ["--dry-run"], False),
                                                 ("dask", ["--scheduler", "tcp://127.0.0.1:9"], False),
                                                 ("local", [], False)])
def test_the_fork_server_starts_before_the_command_line_is_parsed_and_a_refusal_ends_it(engine, more, early,
                                                                                        tmp_path):
    """``--engine dask`` on the command line starts the fork server (the workload's module among its imports)
    before the workload's class is loaded, and before the launcher imports numpy: its Dask import is what the
    first worker waits for (started after the parse, a 256^3 CT job's first slab came 0.3-0.5 s later; after the
    plan's imports, numpy's among them, a 64^3 job took 1.5-4% longer). Here the input is missing, a refusal that
    comes before the plan starts its engine: the server started all the same, and the refusal ended it. Not for
    a running cluster, a dry run or another engine."""
    import subprocess
    import sys
    named = ["--engine=dask"] if engine == "dask=" else ["--engine", engine]
    proc = subprocess.run([sys.executable, "-c", PLANNED, "faces", "missing.seq", "-o", "out", *named, *more],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    said = proc.stdout.splitlines()
    assert proc.returncode == 0 and said[0] == "refused: missing.seq: no such file or directory", proc.stderr[-3000:]
    if early:
        assert "multiprocessing.forkserver" in said[1] and "'distributed', 'gpumr.tasks.runtime', " \
               "'gpumr.faces.workload'" in said[1], said
        assert said[2] == "numpy before it: False", said
    else:
        assert said[1:3] == ["server: []", "numpy before it: []"], said
    assert said[3] == "ended: True" and sorted(os.listdir(tmp_path))[:1] != ["out"], said


def test_an_embedded_cluster_has_as_many_workers_as_the_cores_hold_tasks():
    """Backprojection tasks thread over every core: one worker (projections read and filtered once); faces: one per
    core; ``--workers`` wins."""
    import argparse

    from gpumr.ct.workload import Backproject
    from gpumr.engines.dask import embedded_workers
    from gpumr.faces.workload import Faces
    cores = os.cpu_count()
    o = argparse.Namespace
    assert embedded_workers(o(workers=None, cpu_threads=None), Backproject()) == 1
    assert embedded_workers(o(workers=None, cpu_threads=1), Backproject()) == cores
    assert embedded_workers(o(workers=None, cpu_threads=None), Faces()) == cores
    assert embedded_workers(o(workers=3, cpu_threads=None), Backproject()) == 3


SETTINGS = """
import dask
from gpumr import Workload


class Settings(Workload):
    name = "settings"
    decode = "raw"

    def cpu(self, key, value, o):
        from distributed import get_worker
        worker = get_worker()
        return {"profile": dask.config.get("distributed.worker.profile.enabled"),
                "tick": dask.config.get("distributed.admin.tick.interval"),
                "profiling": "profile" in worker.periodic_callbacks}
"""


def test_an_embedded_clusters_workers_run_without_the_dashboards_sampling(packed, tmp_path):
    """The embedded cluster's workers do not sample their threads' stacks for a dashboard nobody is shown
    (:data:`gpumr.engines.dask.cluster.EMBEDDED_CONFIG`): with Dask's defaults, two busy workers on 2 cores ran a pure-Python
    task 5-7% slower."""
    import subprocess
    import sys

    from gpumr.engines.dask.cluster import EMBEDDED_CONFIG
    (tmp_path / "settings.py").write_text(SETTINGS)
    proc = subprocess.run([sys.executable, "-m", "gpumr", "run", "settings.py:Settings", packed, "-o",
                           str(tmp_path / "out"), "--engine", "dask", "--workers", "1", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = [json.loads(line.split("\t", 1)[1]) for line in lines_of(str(tmp_path / "out"))]
    assert values and all(v == {"profile": False, "tick": EMBEDDED_CONFIG["distributed.admin.tick.interval"],
                                "profiling": False, "device": "cpu"} for v in values), values[:2]
