"""The RADICAL-Pilot engine on a real pilot on ``local.localhost`` (one session and pilot for the module): what is
RP's own. What every engine shares (the same bytes as inline, refusals, -q, Ctrl-C and SIGTERM, the hostile cases)
is tests/test_conformance.py's.

The backprojection gives byte for byte the part files an inline run gives
(its slab arrays within 1e-5); a task killed mid-job is run again and every
record comes out once; a task's own error ends the job in one line, leaving
nothing. Jobs pass ``--allow-open-ports``: another test's second user may
have processes on this node meanwhile.
"""

import argparse
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
from conftest import ct_phantom, lines_of, part_bytes, run_workload

from gpumr.errors import GpumrError

if os.environ.get("CI") == "true":
    import radical.pilot  # noqa: F401 (CI runs this engine: a missing package fails here)
else:
    pytest.importorskip("radical.pilot", reason="the RADICAL-Pilot engine needs radical.pilot (the dev extra)")

# A real pilot is about 35 processes (124 threads) whose message bridges poll every 10 ms, and each RP task is a
# dozen short shell processes: beside two busy loops on 2 cores a job of 13 tasks ran 18x slower than idle
# (723 s against 40 s), six tasks of `python -c "import numpy"` 86-452 s against 15 s. So the jobs here are few
# tasks each (SPLIT: the sample frames' two SequenceFiles in two splits each, one split starting mid-file), and
# the bound is longer than the suite's.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
SPLIT = "256KiB"


@pytest.fixture(scope="module")
def tmgr(tmp_path_factory, emulated_kernels):
    """One RP session and pilot (two cores, two GPUs: four simulated ones, of which RP hands out two)."""
    from gpumr.engines.radical.pilot import pilot_session
    from gpumr.engines.start import Start
    os.environ["GPUMR_SIMULATE_GPUS"] = "4"  # (the pilot's agent and its tasks inherit it; this process drops it)
    os.environ["-*-command-variables-*-"] = "X=1"  # (what `make X=1` exports, which RP's agent cannot source)
    # The pilot lives for the module, ended by the fixture: its runtime only needs to outlast the module's tests
    # on a loaded machine (30 minutes could run out under two busy loops, failing every test after it).
    o = argparse.Namespace(resource="local.localhost", pilot_cores=2, pilot_gpus=2, pilot_runtime=240,
                           pilot_sandbox=None, pilot=[])
    try:
        with pilot_session(o, Start.make(str(tmp_path_factory.mktemp("rp")))) as manager:
            os.environ.pop("GPUMR_SIMULATE_GPUS")
            yield manager
    finally:
        os.environ.pop("GPUMR_SIMULATE_GPUS", None)
        os.environ.pop("-*-command-variables-*-", None)


def run(kind, argv, manager=None):
    return run_workload(kind, [*argv, "--allow-open-ports"], "radical", manager)


def inline(kind, argv, out):
    counts, _ = run_workload(kind, [*argv, "-o", str(out), "--device", "cpu", "--no-conf"], "inline")
    return counts, lines_of(str(out))


def no_ms(counts):
    return {k: v for k, v in counts.items() if "milliseconds" not in k}


def test_backproject_equals_inline(tmgr, tmp_path):
    seq, _ = ct_phantom(tmp_path / "ct", 16, 24)
    argv = ["--projections", seq, "--slab", "5"]
    want_counts, _ = inline("backproject", argv, tmp_path / "inline")
    counts, _ = run("backproject", [*argv, "-o", str(tmp_path / "out"), "--device", "cpu"], tmgr)
    assert part_bytes(tmp_path / "out") == part_bytes(tmp_path / "inline")
    arrays = sorted(os.listdir(tmp_path / "inline" / "arrays"))
    assert sorted(os.listdir(tmp_path / "out" / "arrays")) == arrays and len(arrays) == 4
    for name in arrays:
        np.testing.assert_allclose(np.load(tmp_path / "out" / "arrays" / name),
                                   np.load(tmp_path / "inline" / "arrays" / name), rtol=1e-5, atol=1e-5)
    assert no_ms(counts) == no_ms(want_counts) and counts["records on CPU"] == 4


def test_gpus_rp_assigned_take_every_record(tmgr, packed, tmp_path, monkeypatch):
    """``--device gpu``: each map task asks RP for one GPU and uses only the one RP gave it."""
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "4")  # (the launcher checks that a GPU is here)
    counts, _ = run("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "1MiB", "--device", "gpu",
                              "--pilot-gpus", "2"], tmgr)  # (two tasks, a SequenceFile each: RP's two GPUs at once)
    devices = {json.loads(line.split("\t", 1)[1])["device"] for line in lines_of(str(tmp_path / "out"))}
    assert counts["records on GPU"] == 12 and not counts.get("records on CPU")
    assert devices and devices <= {"gpu:0", "gpu:1"}  # (of four simulated GPUs, RP's two)


def _task_pids():
    """Processes of running RP tasks of gpumr (``python -P -m gpumr.engines.radical.task call.pickle ...``)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"gpumr.engines.radical.task" in argv and b"call.pickle" in argv:
            pids.append(int(pid))
    return pids


def test_a_killed_task_runs_again_every_record_once(tmgr, seq48, tmp_path, capsys):
    _, want = inline("faces", [seq48], tmp_path / "inline")
    killed, ended = [], threading.Event()

    def kill_first_task():  # (until the job ends: on a loaded machine its first task started after more than 300 s)
        while not ended.is_set() and not killed:
            for pid in _task_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.01)
    t = threading.Thread(target=kill_first_task)
    t.start()
    try:
        counts, _ = run("faces", [seq48, "-o", str(tmp_path / "out"), "--split-size", "1MiB", "--device", "cpu"],
                        tmgr)
    finally:
        ended.set()
        t.join()
    assert killed
    got = lines_of(str(tmp_path / "out"))
    keys = [json.loads(line.split("\t", 1)[0]) for line in got]
    assert got == want and len(keys) == len(set(keys)) == 48
    assert counts["records on CPU"] == 48 and not counts.get("bad records")
    assert "ended without a result" in capsys.readouterr().err


def test_a_task_error_is_one_line_and_leaves_nothing(tmgr, packed, tmp_path):
    import shutil

    import cv2
    cascade = tmp_path / "gone.xml"
    shutil.copy(os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_alt2.xml"), cascade)
    from gpumr.faces.workload import Faces
    check = Faces.check

    def check_then_spoil(self, o):
        check(self, o)
        cascade.write_text("<opencv_storage>not a cascade</opencv_storage>")
    Faces.check = check_then_spoil
    try:
        with pytest.raises(GpumrError, match="gone.xml") as info:
            run("faces", [packed, "-o", str(tmp_path / "out"), "--cascade", str(cascade), "--device", "cpu"], tmgr)
    finally:
        Faces.check = check
    assert "\n" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["gone.xml"]


def test_options_out_of_limits_are_refused():
    for argv, message in ((["--resource", "localhost"], "not an RP resource name"),
                          (["--pilot", "walltime=3"], "give KEY=VALUE"),
                          (["--device", "gpu"], "needs --pilot-gpus")):
        with pytest.raises(GpumrError, match=message):
            run("faces", ["x.seq", "-o", "out", *argv])
