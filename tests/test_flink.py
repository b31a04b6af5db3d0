"""The Flink engine on PyFlink's embedded cluster (a real JobManager and TaskManager in a JVM, Python workers in
processes of their own): what is Flink's own. What every engine shares (the same bytes as inline, refusals, -q,
Ctrl-C and SIGTERM, the hostile cases) is tests/test_conformance.py's.

PyFlink cannot share the dev environment, so its jobs run as ``python -m
gpumr run ... --engine flink`` with the Python :func:`conftest.flink_python`
finds. The backprojection gives the part files an inline run gives (slab
arrays within 1e-5); a killed Python worker ends the job in one line; a
signal as the gateway starts leaves nothing. Jobs pass ``--allow-open-ports``:
another test's second user may have processes on this node meanwhile.
"""

import glob
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
from conftest import NO_FLINK, child_with, ct_phantom, flink_python, interrupt_job, lines_of, part_bytes, run_workload

from gpumr.errors import GpumrError

PYTHON = flink_python()
if PYTHON is None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the Flink engine: {NO_FLINK}", pytrace=False)
    pytest.skip(NO_FLINK, allow_module_level=True)

pytestmark = pytest.mark.slow


def flink(argv, cwd, env=None, **popen):
    """``gpumr run ARGV --engine flink`` in PyFlink's Python; the Popen."""
    return subprocess.Popen([PYTHON, "-m", "gpumr", "run", *argv, "--engine", "flink", "--allow-open-ports"], cwd=cwd, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, **popen)


def run(argv, cwd, env=None):
    proc = flink(argv, cwd, env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def inline(kind, argv, out):
    counts, _ = run_workload(kind, [*argv, "-o", str(out), "--device", "cpu", "--no-conf"], "inline")
    return counts, lines_of(str(out))


def test_backproject_equals_inline(tmp_path):
    seq, _ = ct_phantom(tmp_path / "ct", 16, 24)
    argv = ["--projections", seq, "--slab", "5"]
    inline("backproject", argv, tmp_path / "inline")
    run(["backproject", *argv, "-o", str(tmp_path / "out"), "--device", "cpu"], tmp_path)
    assert part_bytes(tmp_path / "out") == part_bytes(tmp_path / "inline")
    arrays = sorted(os.listdir(tmp_path / "inline" / "arrays"))
    assert sorted(os.listdir(tmp_path / "out" / "arrays")) == arrays and len(arrays) == 4
    for name in arrays:
        np.testing.assert_allclose(np.load(tmp_path / "out" / "arrays" / name),
                                   np.load(tmp_path / "inline" / "arrays" / name), rtol=1e-5, atol=1e-5)


def _pids(*words):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if all(w in argv for w in words):
            found.append(int(pid))
    return found


def test_a_killed_worker_ends_the_job_in_one_line_leaving_nothing(seq48, tmp_path):
    """SIGKILL the Python worker once a map task has written its file: the job fails (Flink's collect sink takes no
    restarted job's results without checkpoints), in one line, and nothing is published or left."""
    proc = flink(["faces", seq48, "-o", str(tmp_path / "out"), "--split-size", "40KiB", "--device", "cpu",
                  "--parallelism", "1"], tmp_path)
    killed = []

    def kill_worker():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not glob.glob(str(tmp_path / ".out.*" / "out" / "map-*")):
            time.sleep(0.01)
        for pid in _pids(b"pyflink.fn_execution.beam.beam_boot"):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    t = threading.Thread(target=kill_worker)
    t.start()
    _, err = proc.communicate(timeout=600)
    t.join()
    assert killed and proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpumr: error: the Flink job failed: ") and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == []


def test_gpu_resource_declared(packed, tmp_path):
    """``--device gpu``: the map runs in slots holding Flink's ``gpu`` external resource (the embedded cluster
    declares this machine's two simulated GPUs), and every record goes to a GPU first. (The simulated GPUs' host
    kernels fail their self-check inside PyFlink's worker, whose ``__main__`` is Beam's: those records fall back
    to the CPU, counted; a real GPU runs PyCUDA's kernels and does not take that path.)"""
    err = run(["faces", packed, "-o", str(tmp_path / "out"), "--device", "gpu"], tmp_path,
              env={"GPUMR_SIMULATE_GPUS": "2"})
    last = err.strip().splitlines()[-1]
    on_gpu = int(last.split(" on GPU")[0].rsplit(" ", 1)[1])
    fallbacks = int(last.split(" GPU fallbacks")[0].rsplit(" ", 1)[1]) if "fallbacks" in last else 0
    assert on_gpu + fallbacks == 12, last


def test_refusals(packed):
    for argv, message in ((["--jobmanager", "http://h:8081"], "give HOST:PORT"),
                          (["--jobmanager", "h:99999"], "give HOST:PORT"),
                          (["--parallelism", "0"], "--parallelism")):
        with pytest.raises(GpumrError, match=message):
            run_workload("faces", [packed, "-o", "out", *argv], "flink")


def test_a_signal_as_the_gateway_starts_leaves_nothing(packed, tmp_path):
    """Ctrl-C the moment PyFlink's gateway JVM starts (it ignores SIGINT): the JVM made its scratch folders in the
    job's folder after the launcher had removed it (they stayed in TMPDIR), and Py4J logged a traceback."""
    status, err, tmp, left = interrupt_job(PYTHON, ["faces", packed, "-o", str(tmp_path / "out"), "--engine", "flink",
                                                    "--device", "cpu", "--allow-open-ports"], str(tmp_path), child_with("java"))
    assert status == 130 and err.strip().splitlines() == ["gpumr: interrupted"], err[-3000:]
    assert tmp == [] and left == [] and sorted(os.listdir(tmp_path)) == ["tmp"]
