"""How the GPU paths drive a device, counted under the emulating launcher: driver calls and host
synchronisations per slab (CT) and per part (faces), the CT self-check and the faces' grouping outside the
lease, a lane per task sharing a GPU."""

import cv2
import numpy as np
import pytest

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import CHECK_WINDOW, SlabBackprojector
from gpumr.devices.nvml import simulated_gpus
from gpumr.gpu import emulate, launch

pytestmark = pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")


def _ct():
    g = geometry.simple(40, 40)
    q = np.random.default_rng(0).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    return g, q


def test_a_batch_of_slabs_reuses_its_buffers_and_waits_once_per_slab():
    """After the first batch, a batch of 4 slabs makes no allocation (device or page-locked) and no stream: per
    slab one zeroing, one launch, one copy back straight into the page-locked buffer the slab is handed out in,
    an event after it and the compute stream's wait for it (the slot is refilled only after the copy out of it),
    and one host wait (the only host synchronisation)."""
    g, q = _ct()
    gpu = simulated_gpus("1")[0]
    lx = launch.launcher(gpu)
    bp = SlabBackprojector(pad(q), g)
    slabs = [(0, 8), (8, 16), (16, 24), (24, 32)]
    bp.run(slabs, gpu)  # set-up, self-check, both slots made; the slabs let go of: their buffers are kept
    lx.calls.clear()
    got = bp.run(slabs, gpu)
    assert dict(lx.calls) == {"zero_async": 4, "launch": 4, "to_host_async": 4, "record": 4, "wait_event": 4,
                              "wait": 4}
    assert lx.syncs == 4
    # each slab is its own page-locked buffer, equal to the CPU's
    assert len({s.__array_interface__["data"][0] for s in got}) == 4
    for (z0, z1), slab in zip(slabs, got):
        assert np.linalg.norm(slab - backproject(q, g, z0, z1)) / np.linalg.norm(slab) < 1e-5


def test_a_taller_slab_grows_the_slots_once():
    g, q = _ct()
    gpu = simulated_gpus("1")[0]
    lx = launch.launcher(gpu)
    bp = SlabBackprojector(pad(q), g)
    bp.run([(0, 4), (4, 8)], gpu)
    lx.calls.clear()
    bp.run([(0, 16), (16, 32), (32, 40)], gpu)
    assert lx.calls["empty"] == 2  # both slots grown to 16 slices, once
    assert lx.calls["pinned"] == 3  # (the 4-slice buffers kept are too small for these slabs)
    lx.calls.clear()
    bp.run([(0, 16), (16, 32)], gpu)
    assert lx.calls["pinned"] == 0 and lx.calls["empty"] == 0


def test_the_ct_self_check_is_small_and_its_cpu_side_runs_before_any_lease(monkeypatch):
    """The CPU's side of the check (a window of slices around the centre, a strip of the first slab) is computed
    when the backprojector is made; once a GPU is given, the CPU backprojector is not called again (the lease
    waits only for the device's side)."""
    import gpumr.ct.backproject as cpu
    from gpumr.ct.backproject_gpu import STRIP_ROWS
    g, q = _ct()
    bp = SlabBackprojector(pad(q), g)
    (window, window_mag), (strip, strip_mag) = bp._devices._expected.result(timeout=120)
    zb = 8
    assert window_mag >= np.linalg.norm(window) > 0 and strip_mag >= np.linalg.norm(strip) > 0
    assert window.shape == (min(2 * zb + 3, g.nVoxel[0]), *(min(w, n) for w, n in zip(CHECK_WINDOW, g.nVoxel[1:])))
    assert strip.shape == (16, STRIP_ROWS, g.nVoxel[2])

    def refuse(*a, **k):
        raise AssertionError("the CPU backprojector ran while the GPU was leased")
    monkeypatch.setattr(cpu, "backproject", refuse)
    (slab,) = bp.run([(0, 8)], simulated_gpus("1")[0])
    assert slab.shape == (8, 40, 40)


def _faces_case():
    """Frames of 320x240 (a part's calls do not depend on the frames' size; the emulation stays quick), the
    detector, a fresh simulated GPU and its launcher."""
    from skimage import data

    from gpumr.faces.cpu import cascade_path
    from gpumr.faces.gpu import FaceGPU
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    frames = [cv2.resize(astro, (320, 240)), cv2.resize(data.camera(), (320, 240)),
              cv2.resize(astro[50:450, 60:460], (320, 240))]
    gpu = simulated_gpus("1")[0]
    return frames, FaceGPU(cascade_path()), gpu, launch.launcher(gpu)


def _opencv(frames, **kw):
    from gpumr.faces.cpu import cascade_path, detect, load_cascade
    clf = load_cascade(cascade_path())
    return [sorted(detect(clf, g, **kw)) for g in frames]


def test_a_part_of_faces_is_one_upload_nine_launches_one_copy_back_and_one_wait():
    """Per part of 8 frames, once the lane's buffers are made: one upload (on the lane's upload stream, the kernel
    stream waiting for it: an event), 9 launches (pyramid, 2 integral passes, feature tables, first stage, first
    survivors, 3 stage groups), one copy back and one wait, the only host synchronisation (issue 33: at most 2; 17
    before: 8 uploads and 9 read-backs, 63 calls in all); the survivor counts never leave the device. The faces are
    OpenCV's."""
    from gpumr.faces.gpu import PART
    frames, fg, gpu, lx = _faces_case()
    batch = (frames * 6)[:2 * PART]
    fg.run(batch, gpu)  # set up, self-checked, the lane's buffers made for this batch
    lx.calls.clear()
    got = fg.run(batch, gpu)
    per_part = {k: v / 2 for k, v in lx.calls.items()}
    assert per_part == {"to_device_async": 1, "record": 1, "wait_event": 1, "launch": 9, "to_host_async": 1,
                        "wait": 1}
    assert lx.syncs / 2 == 1
    assert [sorted(f) for f in got] == _opencv(batch)
    # a batch of other sizes grows the lane's buffers once: one device buffer, SLOTS page-locked uploads
    lx.calls.clear()
    fg.run([cv2.resize(f, (400, 300)) for f in batch[:PART]], gpu)
    assert lx.calls["empty"] == 1 and lx.calls["pinned"] == 2 and lx.syncs == 1


def test_more_survivors_than_one_copy_back_brings_take_a_second(monkeypatch):
    """min_neighbors 0 on a face: more raw windows than RESULT_WINDOWS (patched to 4) survive; the part's rest
    comes in a second copy, two synchronisations, and the raw boxes are still OpenCV's."""
    from gpumr.faces import gpu as face_gpu
    from gpumr.faces.cpu import cascade_path
    frames, _, gpu, lx = _faces_case()
    fg = face_gpu.FaceGPU(cascade_path(), min_neighbors=0)
    fg.run(frames[:1], gpu)
    monkeypatch.setattr(face_gpu, "RESULT_WINDOWS", 4)
    lx.calls.clear()
    got = fg.run(frames[:1], gpu)
    assert lx.calls["wait"] == 1 and lx.calls["to_host"] == 1 and lx.syncs == 2
    assert [sorted(f) for f in got] == _opencv(frames[:1], min_neighbors=0) and len(got[0]) > 4


def test_tasks_sharing_a_gpu_each_drive_it_through_a_lane_of_their_own(monkeypatch):
    """Two threads of one process (two tasks of a worker) on one GPU at once: each its own lane (streams,
    device and page-locked buffers); both get OpenCV's faces; the lanes are kept for later batches."""
    import threading

    from gpumr.faces.gpu import FaceGPU, Lane
    frames, fg, gpu, lx = _faces_case()
    fg.run(frames[:1], gpu)
    st = fg._devices.get(gpu)
    both = threading.Barrier(2, timeout=600)
    queue = FaceGPU._queue
    lanes = set()

    def meet(self, st, lane, slot, plan, grays):  # both hold a lane before either queues
        lanes.add(id(lane))
        both.wait()
        return queue(self, st, lane, slot, plan, grays)
    monkeypatch.setattr(FaceGPU, "_queue", meet)
    lx.calls.clear()
    got = {}
    threads = [threading.Thread(target=lambda i=i: got.update({i: fg.run(frames[i:i + 1], gpu)})) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lanes) == 2 and lx.calls["stream"] == 2  # the first lane was the self-check's; one new one (2 streams)
    assert len(st["lanes"]) == 2 and all(isinstance(lane, Lane) for lane in st["lanes"])
    assert [sorted(got[i][0]) for i in (0, 1)] == _opencv(frames[:2])


def test_grouping_and_boxes_wait_for_no_lease(monkeypatch):
    """The face workload's GPU batch returns what the device found; boxes and OpenCV's grouping run in
    finish, which the record flow calls after the lease is released."""
    import argparse
    from collections import Counter

    from gpumr.core import Processor
    from gpumr.core.counters import ON_GPU, outcome
    from gpumr.core.workload import Workload
    from gpumr.faces import gpu as face_gpu
    from gpumr.faces import reference
    from gpumr.faces.gpu import Found
    from gpumr.faces.workload import Faces
    from gpumr.launch.options import task_options
    from gpumr.tasks.device import Device
    frames, _, gpu, _ = _faces_case()
    o = argparse.Namespace(**{opt.dest: opt.default for opt in task_options(Faces)})
    work = Faces()
    work.resolve(o)
    work.setup(o)
    assert work.gpu_ready(o, simulated=True) is None
    held, events = [False], []

    class Chooser:
        fits = staticmethod(lambda memory=0: True)

        def choose(self, memory=0):
            from gpumr.devices.chooser import Choice
            held[0] = True
            return Choice(gpu, "lease", lambda: held.__setitem__(0, False))
    monkeypatch.setattr(face_gpu, "group", lambda *a: events.append(held[0]) or reference.group(*a))
    batch = work.gpu_batch([("a", frames[0])], o, Device(Chooser().choose()))
    assert isinstance(batch[0], Found) and type(work).finish is not Workload.finish
    held[0] = False
    events.clear()
    records = [(f"k{i}", cv2.imencode(".png", f)[1].tobytes()) for i, f in enumerate(frames)]
    out = dict(Processor(work, o, Chooser(), device_for=Device).process(records))
    assert Counter(map(outcome, out.values()))[ON_GPU] == 3
    assert events == [False] * 3  # grouped 3 times, never under the lease
    assert [sorted(out[f"k{i}"]["faces"]) for i in range(3)] == _opencv(frames)
    assert out["k0"]["width"] == 320 and out["k0"]["device"] == "gpu:0"
