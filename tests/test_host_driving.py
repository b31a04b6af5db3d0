"""The null launcher and bench/host_driving.py: the host's own driving cost, with no kernel run and no byte copied."""

import os
import sys

import numpy as np

from gpumr.gpu.null import NullArray, NullLauncher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import host_driving  # noqa: E402 (after the sys.path line that finds it)


def test_the_null_launcher_takes_every_call_and_holds_no_device_memory():
    lx = NullLauncher()
    dev = lx.empty((1 << 40,), np.float32)  # (4 TiB: nothing is allocated)
    assert isinstance(dev, NullArray) and dev.nbytes == 4 << 40 and dev[10:20].shape == (10,)
    host = lx.pinned(4, np.float32)
    lx.to_host_async(dev[:4], host, lx.stream(), after=lx.stream())
    lx.wait(lx.record(None))
    assert host.tolist() == [0.0] * 4 and lx.calls["pinned"] == 1 and lx.calls["to_host_async"] == 1


def test_the_slab_path_and_the_faces_path_are_driven_on_it_and_timed():
    """Per slab as the CT workload drives it (calls of 4): the calls the emulated device counts too; per part
    of 8 frames: one upload (an event orders the kernels after it), 9 launches, one copy back, one wait."""
    per_slab, setup, calls = host_driving.ct(64, 16, 16, 1)
    assert calls == {"zero_async": 1, "launch": 1, "to_host_async": 1, "record": 1, "wait_event": 1, "wait": 1}
    assert per_slab > 0 and setup > 0
    per_part, part_calls = host_driving.faces(16, 16, 1, size=(320, 240))
    assert part_calls == {"to_device_async": 1, "record": 1, "wait_event": 1, "launch": 9, "to_host_async": 1,
                          "wait": 1} and per_part > 0


def test_the_device_filter_is_driven_on_it_in_chunks_of_angles(monkeypatch):
    """Three driver calls per chunk of angles (weigh, transform, store), after the factors' three uploads."""
    import gpumr.ct.fdk_gpu as fdk_gpu
    monkeypatch.setattr(fdk_gpu, "CHUNK_BYTES", 16 * 64 * 128 * 4)  # 16 angles of 64 rows of 128 a round
    host, driving, calls = host_driving.ct_filter(64, 40, 1)
    assert calls == {"module": 1, "to_device": 3, "empty": 1, "launch": 6, "filter_rows": 3, "record": 1, "wait": 1}
    assert host > 0 and driving > 0
