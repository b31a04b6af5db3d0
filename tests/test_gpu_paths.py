"""Both GPU paths, kernels and driver code, on simulated GPUs (the CUDA kernels executed on the host).

Faces through ``FaceGPU`` must equal OpenCV's ``detectMultiScale``; slabs
through ``SlabBackprojector`` must be within relative L2 1e-5 of the CPU
backprojector; a device is trusted only after its self-check passes.
"""

import os

import cv2
import numpy as np
import pytest
from conftest import said_lines

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.devices.nvml import simulated_gpus
from gpumr.faces.cpu import detect, load_cascade
from gpumr.faces.gpu import FaceGPU
from gpumr.gpu import kernels, launch

CASCADES = {c: os.path.join(cv2.data.haarcascades, f"haarcascade_frontalface_{c}.xml")
            for c in ("default", "alt", "alt2")}


def sim_gpu(spec="1"):
    """A fresh simulated GPU (a device memory size of its own: a launcher of its own)."""
    return simulated_gpus(spec)[0]


# -- faces ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def astro():
    from skimage import data
    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)


def edge_face(astro, size):
    """The astronaut's face (OpenCV's box: 177, 66, 95, 95) filling a ``size`` x ``size`` frame, cut by its left edge."""
    return cv2.resize(astro[7:166, 180:339], (size, size),
                      interpolation=cv2.INTER_AREA if size < 159 else cv2.INTER_CUBIC)


@pytest.fixture(scope="module")
def photos(sample_frames, astro):
    """``(all, few)``: the sample frames, scikit-image's photos and faces that fill the frame; a subset of them.

    Faces at the frame's edge give boxes that reach past it, which OpenCV 4
    clips (alt2 at scale factors 1.05 and 1.1 without grouping, alt at 1.27).
    """
    from skimage import data
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE)
              for n in sorted(os.listdir(sample_frames))]
    filling = [edge_face(astro, 64), edge_face(astro, 159), cv2.resize(astro[7:166, 180:379], (199, 159)),
               cv2.resize(astro[66:161, 177:272], (101, 101), interpolation=cv2.INTER_CUBIC)]
    photos = [astro, data.camera(), cv2.resize(frames[3], (320, 240), interpolation=cv2.INTER_AREA)]
    return frames + photos + filling, frames[:2] + photos + filling


def faces_equal_opencv(images, cascade, scale_factor, min_neighbors, reference=False):
    """Run ``FaceGPU`` on a simulated GPU (and the CPU reference if asked) and OpenCV; return OpenCV's faces.

    Asserts that each gives OpenCV's faces for every image.
    """
    from gpumr.faces.cascade import Cascade
    from gpumr.faces.reference import detect_reference
    clf = load_cascade(cascade)
    want = [sorted(detect(clf, g, scale_factor=scale_factor, min_neighbors=min_neighbors)) for g in images]
    runs = {"GPU path": FaceGPU(cascade, scale_factor=scale_factor, min_neighbors=min_neighbors).run(images, sim_gpu())}
    if reference:
        runs["CPU reference"] = [detect_reference(Cascade(cascade), g, scale_factor, min_neighbors) for g in images]
    for what, got in runs.items():
        differ = [(i, g.shape, sorted(a), b) for i, (g, a, b) in enumerate(zip(images, got, want)) if sorted(a) != b]
        assert not differ, what
    return want


@pytest.mark.parametrize("cascade, scale_factor, min_neighbors, which", [
    ("default", 1.1, 3, "all"),
    ("alt", 1.05, 3, "few"),
    ("alt2", 1.27, 3, "few"),
    ("default", 1.5, 3, "few"),
    ("alt", 1.27, 0, "few"),
    ("alt2", 1.05, 0, "few"),
    ("alt2", 1.1, 0, "few"),
    ("default", 1.5, 0, "few"),
])
def test_faces_equal_opencv(photos, cascade, scale_factor, min_neighbors, which):
    images = photos[0] if which == "all" else photos[1]
    want = faces_equal_opencv(images, CASCADES[cascade], scale_factor, min_neighbors)
    assert sum(map(len, want)) >= (20 if min_neighbors == 0 else 3)


def test_boxes_are_clipped_to_the_frame_as_opencv_4_clips_them(astro):
    """A face at the frame's edge: raw windows reach a pixel or more past it; OpenCV clips them."""
    from gpumr.faces.cascade import Cascade
    from gpumr.faces.reference import candidates
    images = [edge_face(astro, 64), edge_face(astro, 159)]
    for g in images:
        assert any(y + h > g.shape[0] for x, y, w, h in candidates(Cascade(CASCADES["alt2"]), g, 1.05))
    want = faces_equal_opencv(images, CASCADES["alt2"], 1.05, 0, reference=True)
    assert all(y + h == g.shape[0] for g, boxes in zip(images, want) for x, y, w, h in boxes if y + h >= g.shape[0])


def test_only_the_rows_opencvs_stripes_cover_are_scanned(astro):
    """OpenCV's stripes can leave a scale's last row of windows out: alt2 at 1.05 on 64 x 64, scale 14
    has 13 rows and scans 12, and this face has a window on the 13th (box 0, 24, 40, 40) that OpenCV never sees."""
    from gpumr.faces.reference import scales
    s, size, step, box, rows = scales((64, 64), (20, 20), 1.05)[14]
    assert size == (32, 32) and box == (40, 40) and step == 2 and rows == 12
    want = faces_equal_opencv([edge_face(astro, 64)], CASCADES["alt2"], 1.05, 0, reference=True)
    assert [0, 24, 40, 40] not in want[0]


def test_box_size_is_rounded_from_the_float_scale(astro):
    """At scale factor 1.27 the 15th scale's window is cvRound(24 * (float)1.27^15) = 866, not 865."""
    big = edge_face(astro, 1450)
    want = faces_equal_opencv([big], CASCADES["default"], 1.27, 0, reference=True)
    assert 866 in {w for _, _, w, _ in want[0]}


CANCELLING = """<?xml version="1.0"?>
<opencv_storage>
<cascade>
  <stageType>BOOST</stageType><featureType>HAAR</featureType><height>24</height><width>24</width>
  <stageParams><boostType>GAB</boostType><minHitRate>0.995</minHitRate><maxFalseAlarm>0.5</maxFalseAlarm>
    <weightTrimRate>0.95</weightTrimRate><maxDepth>1</maxDepth><maxWeakCount>3</maxWeakCount></stageParams>
  <featureParams><maxCatCount>0</maxCatCount><featSize>1</featSize><mode>BASIC</mode></featureParams>
  <stageNum>1</stageNum>
  <stages><_>
    <maxWeakCount>3</maxWeakCount><stageThreshold>0.5</stageThreshold>
    <weakClassifiers>
      <_><internalNodes>0 -1 0 1e30</internalNodes><leafValues>1e8 1e8</leafValues></_>
      <_><internalNodes>0 -1 0 1e30</internalNodes><leafValues>1. 1.</leafValues></_>
      <_><internalNodes>0 -1 0 1e30</internalNodes><leafValues>-1e8 -1e8</leafValues></_>
    </weakClassifiers></_>
  </stages>
  <features><_><rects><_>0 0 24 24 -1.</_><_>0 0 12 24 2.</_></rects></_></features>
</cascade>
</opencv_storage>
"""


def test_stage_sums_are_accumulated_in_double_as_opencv_does(tmp_path, astro):
    """Leaves 1e8 + 1 - 1e8: 1 in double (every textured window passes the 0.5 threshold), 0 in float (none does)."""
    path = str(tmp_path / "cancelling.xml")
    open(path, "w").write(CANCELLING)
    images = [cv2.resize(astro, (40, 40), interpolation=cv2.INTER_AREA), astro[200:250, 150:210]]
    want = faces_equal_opencv(images, path, 1.1, 0, reference=True)
    assert all(len(boxes) > 10 for boxes in want)


def faces_workload(**options):
    """The face workload set up as a task sets it up (every option at its default but ``options``), its GPU
    path ready on simulated GPUs: ``(workload, o)``."""
    import argparse

    from gpumr.faces.workload import Faces
    from gpumr.launch.options import task_options
    o = argparse.Namespace(**{opt.dest: opt.default for opt in task_options(Faces)})
    o.__dict__.update(options)
    work = Faces()
    work.resolve(o)
    work.setup(o)
    assert work.gpu_ready(o, simulated=True) is None
    return work, o


def test_declared_memory_covers_the_batch_peak(sample_frames, astro):
    """The face workload declares, per batch, the device memory the batch needs: at least what the driver holds
    while it runs the batch (its lane's buffers, kept from one batch to the next of the same sizes)."""
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE)
              for n in sorted(os.listdir(sample_frames))]
    work, o = faces_workload()
    fg = work._gpu
    gpu = sim_gpu()
    fg.run(frames[:1], gpu)  # set up and self-checked: the cascade is on the device
    lx = launch.launcher(gpu)
    for batch in ((frames * 2)[:16], [astro, cv2.resize(frames[0], (1280, 720)), frames[1][:100, :37]]):
        fg.run(batch, gpu)  # the lane's buffers fitted to the batch
        lx.reset_peak()
        fg.run(batch, gpu)
        declared = work.gpu_memory(batch, o)
        assert lx.peak <= declared <= 2 * lx.peak + (64 << 20), (lx.peak, declared)
    # 16 frames of 640x480, held 8 at a time (face_gpu.PART), in two slots: ~200 MiB
    assert 150 << 20 < work.gpu_memory((frames * 2)[:16], o) < 260 << 20


def test_a_batch_too_large_for_the_kernels_int_offsets_goes_in_turns(sample_frames, monkeypatch):
    """16 frames of 7000x7000 (within --max-pixels) hold 4.7e9 integral-image elements: sent at once, the
    kernels' int offsets would wrap (numpy 2 refuses the table, and the batch fell back to the CPU).
    Each turn stays within an int; and frames sent in turns get OpenCV's faces."""
    from gpumr.faces import gpu as face_gpu

    def elements(lvs):
        return sum((w + 1) * (h + 1) for _, (w, h), *_ in lvs)
    big = [face_gpu.levels((7000, 7000), (24, 24), 1.1)] * 16
    assert sum(map(elements, big)) > 2 * 2 ** 31
    parts = list(face_gpu.turns(big, face_gpu.MAX_ELEMENTS))
    assert [a for a, _ in parts[1:]] == [b for _, b in parts[:-1]] and parts[0][0] == 0 and parts[-1][1] == 16
    assert len(parts) >= 3 and all(sum(map(elements, big[a:b])) <= 2 ** 31 - 1 for a, b in parts)
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE)
              for n in sorted(os.listdir(sample_frames))[:3]]
    sent = []
    queue = FaceGPU._queue
    monkeypatch.setattr(FaceGPU, "_queue", lambda self, st, lane, slot, plan, grays: sent.append(len(grays)) or
                        queue(self, st, lane, slot, plan, grays))
    monkeypatch.setattr(face_gpu, "MAX_ELEMENTS", elements(face_gpu.levels(frames[0].shape, (24, 24), 1.1)))
    faces_equal_opencv(frames, CASCADES["default"], 1.1, 3)
    assert sent[-3:] == [1, 1, 1]  # one frame a turn (after the self-check's photo)


@pytest.mark.timeout(600)
def test_a_batch_larger_than_any_gpu_is_halved_and_never_waited_for(sample_frames, tmp_path, monkeypatch):
    """--device gpu on a 160 MiB GPU: a batch of 16 frames of 640x480 declares ~200 MiB (8 frames held at once,
    in two slots) and once waited for ever; now its halves run on the GPU. On a GPU too small for one frame, every
    record runs on the CPU."""
    from collections import Counter

    from gpumr.core import FALLBACKS, ON_CPU, ON_GPU, Processor
    from gpumr.core.counters import outcome
    from gpumr.devices.chooser import DeviceChooser
    from gpumr.tasks.device import Device
    names = sorted(os.listdir(sample_frames))
    records = [(f"{i}-{n}", open(os.path.join(sample_frames, n), "rb").read()) for i, n in enumerate(names + names)]
    records = records[:16]
    work, o = faces_workload(device="gpu")
    assert work.gpu_memory([work.load(k, v, o) for k, v in records], o) > 160 << 20
    want = {k: work.cpu(k, work.load(k, v, o), o)["faces"] for k, v in records}
    for spec, device in (("1:160MiB", "gpu:0"), ("1:40MiB", "cpu")):
        monkeypatch.setenv("GPUMR_SIMULATE_GPUS", spec)
        counts = Counter()
        chooser = DeviceChooser("gpu", scheduler=False, lease_dir=str(tmp_path / "leases"))
        with said_lines() as log:
            out = list(Processor(work, o, chooser, device_for=Device,
                                 count=lambda name, n=1: counts.update({name: n})).process(records))
        counts.update(outcome(v) for _, v in out)
        assert sorted(k for k, _ in out) == sorted(want) and all(sorted(v["faces"]) == sorted(want[k]) for k, v in out)
        assert {v["device"] for _, v in out} == {device} and not counts[FALLBACKS]
        assert counts[ON_GPU if device != "cpu" else ON_CPU] == 16
        too_big = [line for line in log if "needs more device memory" in line]
        assert len(too_big) == (device == "cpu"), log  # said once


def test_a_face_self_check_that_raises_leaves_the_device_untrusted_with_the_reason(altered_kernel, astro):
    altered_kernel("haar", "int* __restrict__ out, int* __restrict__ n_out)\n{\n    run_stages_of<true>",
                   "int* __restrict__ out, int* __restrict__ n_out, int extra)\n{\n    run_stages_of<true>")
    fg = FaceGPU(CASCADES["default"])
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"GPU face detection disabled on gpu:0: its self-check raised "
                                               r"TypeError: run_stages: takes 17 arguments, 16 given"):
            fg.run([astro], sim_gpu())


def test_integral_images_of_every_level_are_opencvs(astro):
    """The device's integral images (a warp per row, a thread per column) of each level it scanned, against OpenCV's
    of the level's pixels (``cv2.integral2``; the squares' sums modulo 2^32, as the kernels' unsigned sums keep
    them), for frames whose rows are no multiple of the warp's 32."""
    det = FaceGPU(CASCADES["default"])
    gpu = sim_gpu("1:5001MiB")
    frames = [np.ascontiguousarray(astro[:301, :257]), np.ascontiguousarray(astro[50:, 100:])]
    det.found(frames, gpu)
    st = det._devices.get(gpu)
    lx, lane, plan = st["lx"], st["lanes"][-1], det.plan([f.shape for f in frames])
    img, total, sq = (lx.to_host(lane.at(lx, plan.layout, "scratch", name)) for name in ("img", "sum", "sq"))
    assert len(plan.table) > 10
    for img_off, int_off, w, h, *_ in plan.table:
        level = img[img_off:img_off + w * h].reshape(h, w)
        want_sum, want_sq = cv2.integral2(level, sdepth=cv2.CV_64F)
        got = slice(int_off, int_off + (w + 1) * (h + 1))
        assert np.array_equal(total[got].reshape(h + 1, w + 1), want_sum.astype(np.uint64))
        assert np.array_equal(sq[got].reshape(h + 1, w + 1), want_sq.astype(np.uint64) % (1 << 32))


def test_a_wrong_face_kernel_is_caught_by_the_self_check(altered_kernel, astro):
    altered_kernel("haar", "(stages_at<K>(C, v, 0, 1) < 0) ? 1 : 0", "(stages_at<K>(C, v, 0, 1) < 0) ? 0 : 1")
    with pytest.raises(RuntimeError, match=r"disabled on gpu:0: self-check on a built-in photo gave \[\], the CPU "
                                           r"reference \[\[177, 66, 95, 95\]\]"):
        FaceGPU(CASCADES["default"]).run([astro], sim_gpu())


# -- CT ---------------------------------------------------------------------------------------------

def ct_case(nz=37, n_angles=40, seed=0):
    """An odd-sized geometry with offsets on the detector and the origin, and random filtered projections."""
    d = geometry.simple(40, n_angles).to_dict()  # its detector covers the 34 x 30 x nz volume
    d.update(nVoxel=[nz, 30, 34], offOrigin=[0.7, -1.3, 0.4], offDetector=[1.1, -0.6])
    g = geometry.from_dict(d)
    q = np.random.default_rng(seed).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    return g, q


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_slabs_equal_the_cpu_backprojector():
    g, q = ct_case()
    bp = SlabBackprojector(pad(q), g)
    slabs = [(0, 37), (0, 5), (5, 13), (13, 30), (30, 37), (36, 37)]  # heights 37, 5, 8, 17, 7, 1 (ZB is 8)
    for (z0, z1), got in zip(slabs, bp.run(slabs, sim_gpu())):
        assert got.shape == (z1 - z0, 30, 34)
        assert rel_l2(got, backproject(q, g, z0, z1)) < 1e-5


def test_more_angles_than_one_launch_holds(altered_kernel):
    altered_kernel("backproject", "#define MAX_ANGLES 2048", "#define MAX_ANGLES 16")
    g, q = ct_case(nz=11, n_angles=40)  # launches of 16, 16 and 8 angles
    bp = SlabBackprojector(pad(q), g)
    assert kernels.defines("backproject")["MAX_ANGLES"] == 16
    (got,) = bp.run([(0, 11)], sim_gpu())
    assert rel_l2(got, backproject(q, g)) < 1e-5


def test_a_device_too_small_for_the_slab_halves_it():
    g, q = ct_case(nz=37)
    padded = pad(q)
    axes = 4 * sum(g.nVoxel)
    slice_bytes = 4 * 30 * 34
    gpu = sim_gpu(f"1:{padded.nbytes + axes + 10 * slice_bytes}")  # room for 10 slices of output
    bp = SlabBackprojector(padded, g)
    (got,) = bp.run([(0, 37)], gpu)
    assert rel_l2(got, backproject(q, g)) < 1e-5
    assert launch.launcher(gpu).peak <= padded.nbytes + axes + 10 * slice_bytes


def test_the_ct_self_check_covers_every_slice_a_thread_keeps(altered_kernel):
    """A kernel wrong only in slices 2..ZB of each thread's ZB is caught before any slab runs."""
    altered_kernel("backproject", "acc[k] += w2 * (top + fr * (bot - top));",
                  "acc[k] += (k ? 1.5f : 1.0f) * w2 * (top + fr * (bot - top));")
    g, q = ct_case()
    with pytest.raises(RuntimeError, match=r"GPU backprojection disabled on gpu:0: slices \d+-\d+ differ from the CPU"):
        SlabBackprojector(pad(q), g).run([(0, 8)], sim_gpu())


def test_a_ct_self_check_that_raises_leaves_the_device_untrusted(altered_kernel):
    """A device full at the self-check, a wrong kernel: no slab is accepted once memory frees up."""
    altered_kernel("backproject", "acc[k] += w2 * (top + fr * (bot - top));",
                  "acc[k] += 1.5f * w2 * (top + fr * (bot - top));")
    g, q = ct_case()
    padded = pad(q)
    gpu = sim_gpu("1:64MiB")
    lx = launch.launcher(gpu)
    uploads = padded.nbytes + 4 * sum(g.nVoxel) + 8 * g.n_angles  # projections, axes, cosines and sines
    hog = lx.zeros(lx.memory - lx.used - uploads, np.uint8)  # only the uploads fit
    bp = SlabBackprojector(padded, g)
    with pytest.raises(RuntimeError, match="its self-check raised DeviceOutOfMemory"):
        bp.run([(0, 8)], gpu)
    del hog
    with pytest.raises(RuntimeError, match="GPU backprojection disabled on gpu:0: its self-check raised "
                                           "DeviceOutOfMemory: out of memory on simulated GPU 0"):
        bp.run([(0, 8)], gpu)


def test_launches_are_cut_into_whole_waves():
    """A 16-slice 512^2 slab on an H100 (792 blocks at once): 2.59 waves uncut; cut angles fill them."""
    from gpumr.ct.backproject_gpu import split_for_waves
    blocks = 16 * 64 * 2
    s = split_for_waves(blocks, 792, 512)
    assert s > 1 and blocks * s / (-(-blocks * s // 792) * 792) > 0.97
    assert split_for_waves(blocks, None, 512) == 1          # wave unknown: no cut
    assert split_for_waves(blocks, 792, 20) == 1            # too few angles to cut
    assert split_for_waves(792 * 3, 792, 512) == 1          # whole waves already


def test_pipelined_slabs_with_cut_angles_equal_the_cpu_backprojector():
    """Several slabs in flight, each launch's angles cut in parts that meet through atomic adds."""
    from gpumr.ct.backproject_gpu import split_for_waves
    g, q = ct_case(n_angles=60)
    gpu = sim_gpu()
    lx = launch.launcher(gpu)
    bp = SlabBackprojector(pad(q), g)
    st = bp.state(gpu)
    assert split_for_waves(2 * 4 * 5, lx.resident_blocks(st["fn"], 256), 60) == 3  # slab (0, 37): 40 blocks
    slabs = [(0, 37), (3, 11), (11, 30), (36, 37)]
    got = bp.run(slabs, gpu)
    for (z0, z1), slab in zip(slabs, got):
        assert slab.shape == (z1 - z0, 30, 34)
        assert rel_l2(slab, backproject(q, g, z0, z1)) < 1e-5


def test_host_builds_round_as_nvcc_builds():
    """Backprojection may fuse multiply-adds on the GPU, so its host build contracts too; Haar's never does."""
    from gpumr.gpu import emulate, kernels
    assert "-fmad=false" not in kernels.FLAGS["backproject"]
    assert "-ffp-contract=fast" in emulate.host_flags("backproject")
    assert kernels.FLAGS["haar"] == ["-fmad=false"] and "-ffp-contract=fast" not in emulate.host_flags("haar")
    assert "-DGPUMR_FIBERS" in emulate.host_flags("haar")  # its prefix sums meet at barriers


def test_first_survivors_follow_opencvs_skip_rule_and_append_each_once():
    """Random first-stage codes over 700 grid rows (3 blocks, the last partial) of two levels: the appended list
    holds, once each, the windows OpenCV's row walk keeps (a pass; the position after a stage-0 failure skipped),
    and the count on the device says how many."""
    from gpumr.faces.gpu import BLOCK, per_level
    gpu = sim_gpu()
    st = FaceGPU(CASCADES["default"])._setup(gpu)
    lx, f = st["lx"], st["fns"]
    rng = np.random.default_rng(5)
    # two levels: 9 x 300 and 5 x 400 windows on the step grid (only gx, gy and win_off are read)
    table = np.zeros((2, 10), np.int32)
    table[:, 7], table[:, 8], table[:, 9] = (9, 5), (300, 400), (0, 9 * 300)
    n_win = 9 * 300 + 5 * 400
    codes = rng.choice(np.array([-1, 0, 1], np.int8), n_win, p=(0.3, 0.3, 0.4))
    rows = per_level(table[:, 8])
    want = []
    for level, gyi in rows:
        base, gx, x = table[level, 9] + gyi * table[level, 7], table[level, 7], 0
        while x < gx:
            if codes[base + x] == 1:
                want.append(base + x)
            elif codes[base + x] == 0:
                x += 1
            x += 1
    out, count = lx.zeros(n_win, np.int32), lx.zeros(1, np.int32)
    lx.launch(f["first_survivors"], (-(-len(rows) // BLOCK), 1, 1), (BLOCK, 1, 1), lx.to_device(table),
              lx.to_device(rows), np.int32(len(rows)), lx.to_device(codes), out, count)
    n = int(lx.to_host(count)[0])
    assert n == len(want) > 1000 and sorted(lx.to_host(out)[:n].tolist()) == want


def test_a_grid_smaller_than_the_list_takes_it_a_grid_at_a_time(sample_frames, monkeypatch):
    """run_stages' grid is what the device holds at once, not the list's length (which only the device
    knows): with one block, it walks every survivor, 256 at a time, and the faces are OpenCV's."""
    from gpumr.faces import gpu as face_gpu
    frames = [cv2.resize(cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE), (200, 150))
              for n in sorted(os.listdir(sample_frames))[:2]]
    setup = FaceGPU._setup
    monkeypatch.setattr(FaceGPU, "_setup", lambda self, gpu: dict(setup(self, gpu), run_blocks=1))
    blocks = []
    launch_ = type(launch.launcher(sim_gpu())).launch_on
    monkeypatch.setattr(type(launch.launcher(sim_gpu())), "launch_on", lambda self, s, fn, grid, *a: (
        blocks.append(grid[0]) if fn.name == "run_stages" else None) or launch_(self, s, fn, grid, *a))
    faces_equal_opencv(frames, CASCADES["default"], 1.1, 3)
    assert blocks and set(blocks) == {1} and face_gpu.BLOCK == 256


def test_per_level_lists_name_every_item_of_every_level_once():
    from gpumr.faces.gpu import per_level
    got = per_level([3, 0, 2, 1])
    assert got.dtype == np.int32 and got.tolist() == [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [3, 0]]
    assert per_level([]).shape == (0, 2)


def test_a_batch_runs_in_parts_in_order(sample_frames, monkeypatch):
    """A batch of 19 frames: parts of PART frames in order (each queued before the one before it is waited for:
    two slots in flight), and the faces of every part are OpenCV's."""
    from gpumr.faces import gpu as face_gpu
    frames = [cv2.resize(cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE), (200, 150))
              for n in sorted(os.listdir(sample_frames))[:3]] * 7
    frames = frames[:19]  # small frames: the emulation stays quick
    events = []
    queue, collect = FaceGPU._queue, FaceGPU._collect
    monkeypatch.setattr(FaceGPU, "_queue", lambda self, st, lane, slot, plan, grays: events.append(
        ("queue", slot, len(grays))) or queue(self, st, lane, slot, plan, grays))
    monkeypatch.setattr(FaceGPU, "_collect", lambda self, st, lane, slot, plan, token: events.append(
        ("collect", slot, len(plan.shapes))) or collect(self, st, lane, slot, plan, token))
    faces_equal_opencv(frames, CASCADES["default"], 1.1, 3)
    p = face_gpu.PART
    assert events[-6:] == [("queue", 0, p), ("queue", 1, p), ("collect", 0, p), ("queue", 0, 19 - 2 * p),
                           ("collect", 1, p), ("collect", 0, 19 - 2 * p)]


def test_the_ct_self_check_trusts_a_correct_device_on_filtered_noise():
    """Filtered noise cancels each voxel's sum almost to nothing, so two correct float32 backprojectors differ by
    far more than 1e-5 of the result (the H200 disabled itself on such a job at 1024^3): the check measures the
    difference against the terms' magnitude, and the emulated device, correct, is trusted."""
    from gpumr.ct.fdk import filter_projections
    g = geometry.simple(96, 120, n_detector=160)
    f = filter_projections(np.random.default_rng(1).random((120, 160, 160), dtype=np.float32), g)
    bp = SlabBackprojector(pad(f), g)
    for cpu, magnitude in bp._check_case():  # the window and the strip
        assert magnitude > 10 * np.linalg.norm(cpu)  # the sums cancel: a bound on the net result would be 10x stricter
    assert bp.state(sim_gpu())["lx"] is not None  # (raises when the self-check fails)
