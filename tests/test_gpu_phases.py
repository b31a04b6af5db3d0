"""bench/gpu_phases.py: every driver call timed, as driven and each alone; its tables under the emulating launcher."""

import os
import sys

import numpy as np
import pytest

from gpumr.devices.nvml import simulated_gpus
from gpumr.gpu import emulate, launch
from gpumr.gpu.interface import Launcher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import gpu_phases  # noqa: E402 (after the sys.path line that finds it)


class Recording(Launcher):
    """A host launcher that records the order of the calls it gets."""

    name = "recording"
    out_of_memory = MemoryError

    def __init__(self):
        self.events = []

    def zeros(self, shape, dtype):
        self.events.append("zeros")
        return np.zeros(shape, dtype)

    def zero_async(self, dev, stream):
        self.events.append("zero_async")

    def launch(self, fn, grid, block, *args):
        self.events.append("launch")

    def wait(self, token):
        self.events.append("wait")

    def synchronize(self):
        self.events.append("synchronize")


def kernel():
    """A kernel's stand-in: only its identity names its launches."""


@pytest.mark.parametrize("alone", [False, True])
def test_each_call_is_counted_by_kind_and_alone_waits_for_the_device_after_each_queued_call(alone):
    inner = Recording()
    lx = gpu_phases.Phases(inner, {id(kernel): "stage"}, alone)
    dev = lx.zeros((4,), np.float32)
    lx.zero_async(dev, None)
    lx.launch_on(None, kernel, (1, 1, 1), (32, 1, 1), dev)
    lx.wait(None)
    assert dict(lx.calls) == {"zeros": 1, "zero_async": 1, "launch stage": 1, "wait": 1}
    assert set(lx.seconds) == set(lx.calls) and all(s >= 0 for s in lx.seconds.values())
    # (a zero-filled allocation is queued too: a zeroing on the legacy stream)
    queued = ["zeros", "zero_async", "launch"]
    assert inner.events == ([e for q in queued for e in (q, "synchronize")] if alone else queued) + ["wait"]
    assert lx.name == "recording" and lx.out_of_memory is inner.out_of_memory  # the rest passes through


def _rows(rows):
    return {r[0]: r[1:] for r in rows}


@pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")
def test_the_slab_path_profile_names_each_call_per_slab_and_accounts_for_the_wall_time(capsys):
    gpu = simulated_gpus("1")[0]
    lx = launch.launcher(gpu)
    syncs = lx.calls["synchronize"]
    rows = _rows(gpu_phases.ct(gpu, 32, 32, 8, "a simulated GPU"))
    out = capsys.readouterr().out
    assert "Where the slab path's time goes: 32^3 from 32 projections, slabs of 8" in out
    # per slab as run drives it: one zeroing, one launch, one copy back, its event, the slot's wait for the
    # last copy out of it, one host wait
    for call in ("zero_async", "launch backproject_slab", "to_host_async", "record", "wait_event", "wait"):
        assert float(rows[call][0]) >= 1, (call, rows)
    assert rows["to_device_async"][0] == "0.25"  # the projections' upload, in one chunk, once for the 4 slabs
    # alone: the device synchronised after each of the 5 queued calls of the 4 slabs
    assert lx.calls["synchronize"] - syncs >= 4 * 5
    parts = [float(v[1]) for k, v in rows.items() if not k.startswith("wall")]
    staging = float(rows["host: filling the projections' page-locked staging (once per device)"][1])
    wall = float(rows["wall, per slab"][1])
    assert wall > 0 and staging > 0 and sum(parts) == pytest.approx(wall, abs=0.01)
    assert float(rows["launch backproject_slab"][1]) > 0 and float(rows["launch backproject_slab"][2]) > 0


@pytest.mark.slow
@pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")
def test_the_faces_profile_names_each_kernel_per_part_and_times_the_grouping_apart(capsys):
    gpu = simulated_gpus("1")[0]
    rows = _rows(gpu_phases.faces(gpu, 16, 16, "a simulated GPU", size=(160, 120)))
    out = capsys.readouterr().out
    assert "16 frames of 160x120, batches of 16, in 2 parts of at most 8" in out
    for k in ("pyramid", "integral_rows", "integral_cols", "first_stage", "first_survivors"):
        assert rows[f"launch {k}"][0] == "1.00", (k, rows)
    assert float(rows["launch run_stages"][0]) >= 1  # one launch per group of stages
    assert rows["to_host_async"][0] == rows["wait"][0] == "1.00"  # per upload (a part)
    assert "synchronize" not in rows  # (a part's only wait is for its copy back)
    assert float(rows["host: copying each part's tables and frames into its page-locked upload"][1]) > 0
    grouping = rows["grouping (groupRectangles, after the lease) (outside the wall above)"]
    assert float(grouping[1]) > 0


@pytest.mark.slow
@pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")
def test_the_lease_plan_runs_here_on_a_simulated_gpu(tmp_path):
    """``bench/gpu_check.sh --lease 1`` and ``--lease 2`` with ``--emulate``: every step of the plan for a lent GPU
    runs (small sizes, the kernels on the host) and its table comes out, so that a lease spends its minutes
    measuring, not debugging the plan."""
    import subprocess
    want = {"1": ["== micro", "The host side of a GPU", "== phases512", "Where the slab path's time goes: 32^3",
                  "== phases1024", "Where the faces' kernel path's time goes", "== variants",
                  "The slab path's variants", "== host", "The host's own cost of driving a GPU"],
            "2": ["== ct1024", "GPU backprojection on Simulated GPU", "job 40^3 x 12", "== faces",
                  "face detection, 8 frames", "job --device auto"]}
    for part, tables in want.items():
        proc = subprocess.run(["bash", os.path.join(REPO, "bench", "gpu_check.sh"), "--lease", part, "--emulate"],
                              env=dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / part)),
                              capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        assert proc.stdout.startswith(f"gpu_check --lease {part} --emulate: a simulated GPU")
        for t in tables:
            assert t in proc.stdout, (t, proc.stdout[-3000:])
    bad = subprocess.run(["bash", os.path.join(REPO, "bench", "gpu_check.sh"), "--lease", "3"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--lease takes 1 or 2, not '3'" in bad.stderr
