"""The Flink engine on PyFlink's embedded cluster (a real JobManager and TaskManager in a JVM, Python workers in
processes of their own).

PyFlink cannot share the dev environment (Apache Beam pins cloudpickle 2.2,
which dask refuses), so its jobs run as ``python -m gpumr run ... --engine
flink`` with the Python of an environment that has it: this one's where
PyFlink imports, else ``$GPUMR_FLINK_PYTHON`` (``make flink-env`` makes
``.venv-flink``; ``.ci/run`` sets it). Both workloads give byte for byte
the part files an inline run gives (slab arrays within 1e-5); a killed
Python worker is restarted by Flink and every record comes out once; Ctrl-C
ends in ``gpumr: interrupted``, status 130, with no stage, no job folder and
no JVM left.
"""

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import child_with, ct_phantom, interrupt_job, lines_of, run_workload

from gpumr.errors import GpumrError
from gpumr.io.packing import pack


def _flink_python():
    """A Python with PyFlink and gpumr, or None."""
    try:
        import pyflink.datastream  # noqa: F401 (only whether it imports)
        return sys.executable
    except ImportError:
        pass
    path = os.environ.get("GPUMR_FLINK_PYTHON")
    if path and subprocess.run([path, "-c", "import pyflink, gpumr"], capture_output=True).returncode == 0:
        return path
    return None


PYTHON = _flink_python()
if PYTHON is None:
    WHY = "the Flink engine needs PyFlink: make flink-env (an environment of its own) and GPUMR_FLINK_PYTHON"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the Flink engine: {WHY}", pytrace=False)
    pytest.skip(WHY, allow_module_level=True)

pytestmark = pytest.mark.slow


def flink(argv, cwd, env=None, **popen):
    """``gpumr run ARGV --engine flink`` in PyFlink's Python; the Popen."""
    return subprocess.Popen([PYTHON, "-m", "gpumr", "run", *argv, "--engine", "flink"], cwd=cwd, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, **popen)


def run(argv, cwd, env=None):
    proc = flink(argv, cwd, env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def inline(kind, argv, out):
    counts, _ = run_workload(kind, [*argv, "-o", str(out), "--device", "cpu", "--no-conf"], "inline")
    return counts, lines_of(str(out))


def parts(out):
    return {name: (out / name).read_bytes() for name in sorted(os.listdir(out)) if name.startswith("part-")}


@pytest.fixture(scope="module")
def seq48(sample_frames, tmp_path_factory):
    d = tmp_path_factory.mktemp("seq48")
    (d / "frames").mkdir()
    for i in range(4):
        for name in sorted(os.listdir(sample_frames)):
            os.link(os.path.join(sample_frames, name), d / "frames" / f"{i}-{name}")
    pack([str(d / "frames")], str(d / "seq"), shards=2, progress=False)
    return str(d / "seq")


def test_faces_equal_inline_byte_for_byte(packed, tmp_path):
    inline("faces", [packed], tmp_path / "inline")
    (tmp_path / "tmp").mkdir()
    err = run(["faces", packed, "-o", str(tmp_path / "out"), "--split-size", "80KiB", "--device", "cpu",
               "--reducers", "2"], tmp_path, env={"TMPDIR": str(tmp_path / "tmp")})
    assert os.listdir(tmp_path / "tmp") == []  # (PyFlink's from_collection left an empty folder per phase)
    assert "12 records: 12 on CPU" in err.strip().splitlines()[-1]
    assert b"".join(parts(tmp_path / "out").values()) == b"".join(parts(tmp_path / "inline").values())
    assert sorted(os.listdir(tmp_path / "out")) == ["_SUCCESS", "part-00000", "part-00001"]


def test_backproject_equals_inline(tmp_path):
    seq, _ = ct_phantom(tmp_path / "ct", 16, 24)
    argv = ["--projections", seq, "--slab", "5"]
    inline("backproject", argv, tmp_path / "inline")
    run(["backproject", *argv, "-o", str(tmp_path / "out"), "--device", "cpu"], tmp_path)
    assert parts(tmp_path / "out") == parts(tmp_path / "inline")
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
                                                    "--device", "cpu"], str(tmp_path), child_with("java"))
    assert status == 130 and err.strip().splitlines() == ["gpumr: interrupted"], err[-3000:]
    assert tmp == [] and left == [] and sorted(os.listdir(tmp_path)) == ["tmp"]


def test_ctrl_c_ends_the_flink_job_and_leaves_nothing(seq48, tmp_path):
    """(An empty tmpXXXXXXXX folder stayed in TMPDIR: PyFlink's ``from_collection`` removes its file, not the
    folder it made; it is now made in the job's folder.)"""
    status, err, tmp, left = interrupt_job(PYTHON, ["faces", seq48, "-o", str(tmp_path / "out"), "--engine", "flink",
                                                    "--split-size", "40KiB", "--device", "cpu"], str(tmp_path),
                                           lambda proc: glob.glob(str(tmp_path / ".out.*" / "out" / "map-*")))
    assert status == 130 and err.strip().splitlines()[-1] == "gpumr: interrupted" and "Traceback" not in err, \
        err[-3000:]
    assert tmp == [] and left == [] and sorted(os.listdir(tmp_path)) == ["tmp"]
