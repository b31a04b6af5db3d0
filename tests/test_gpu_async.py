"""The emulated GPU is asynchronous and can fail, and the drivers are right under it.

The emulating launcher runs queued work late, in an order CUDA allows, so that a wait a driver leaves out
gives a wrong result here; and it injects launch failures and sticky errors at chosen calls. Each of the
driving risks of issue 65 has a test here that fails on the drivers before the fix (R1-R5):

* R1: uploads on the legacy default stream, which the kernels' non-blocking streams do not wait for;
* R2: constants replaced between launches land after kernels of another stream read them;
* R3: the CT self-check's bound let small errors pass and never ran production's launch shape;
* R4: a failure released the lease and let go of buffers while queued work still used them, and a sticky
  error never kept a device from being leased again;
* R5: threads sharing a backprojector shared its slots and streams; a device could be set up twice.
"""

import threading

import cv2
import numpy as np
import pytest
from conftest import said_lines

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.devices.nvml import simulated_gpus
from gpumr.errors import GpumrError
from gpumr.gpu import emulate, kernels, launch, trust

pytestmark = pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")

PROBE = r"""
__constant__ float c_scale[1];

// y[i] = x[i] * c_scale[0]
extern "C" __global__ void scaled(const float* __restrict__ x, float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __ldg(x + i) * c_scale[0];
}
"""


@pytest.fixture
def fresh(monkeypatch):
    """Launchers and distrusted devices of this test's own (a lost simulated GPU stays lost in its process)."""
    monkeypatch.setattr(launch, "_launchers", {})
    monkeypatch.setattr(trust, "_untrusted", {}, raising=False)


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """``probe(**launcher options)``: an emulated device of 1 MiB with the probe kernel loaded and its
    constant set to 2: ``(lx, module, scaled)``."""
    folder = tmp_path / "cuda"
    folder.mkdir()
    (folder / "probe.cu").write_text(PROBE)
    monkeypatch.setenv(kernels.SOURCES_ENV, str(folder))

    def make(**kw):
        lx = emulate.EmulatedLauncher(0, 1 << 20, **kw)
        mod = lx.module("probe")
        lx.set_constant(mod, "c_scale", np.array([2.0], np.float32))
        lx.synchronize()
        return lx, mod, mod.get_function("scaled")
    return make


def _poison(a):
    return (a.view(np.uint8) == emulate.POISON).all()


# -- the emulator ---------------------------------------------------------------------------------

def test_queued_work_runs_when_the_host_waits_for_it(probe):
    lx, _, scaled = probe()
    s = lx.stream()
    x = np.arange(8, dtype=np.float32)
    dev, host = lx.empty(8, np.float32), lx.pinned(8, np.float32)
    up = lx.pinned(8, np.float32)
    up[:] = x
    lx.to_device_async(up, dev, s)
    token = lx.to_host_async(dev, host, s)
    assert lx.pending() == 2 and _poison(host)  # nothing has run: the copy back has not landed
    lx.wait(token)
    assert lx.pending() == 0 and np.array_equal(host, x)


def test_a_non_blocking_stream_does_not_wait_for_the_legacy_stream_but_an_event_orders_it(probe):
    lx, _, scaled = probe()
    x = np.arange(1, 9, dtype=np.float32)
    for order in ("none", "event", "blocking"):
        s = lx.stream(blocking=order == "blocking")
        dev = lx.to_device(x)  # on the legacy default stream
        if order == "event":
            lx.wait_event(s, lx.record(None))
        y, host = lx.empty(8, np.float32), lx.pinned(8, np.float32)
        lx.launch_on(s, scaled, (1,), (8,), dev, y, np.int32(8))
        lx.wait(lx.to_host_async(y, host, s))
        if order == "none":
            assert np.isnan(host).all()  # the kernel read the upload before it landed
        else:
            assert np.array_equal(host, 2 * x), order
        lx.synchronize()


def test_set_constant_lands_after_it_returns(probe):
    """A kernel of a non-blocking stream queued after ``set_constant`` reads the constants of before."""
    lx, mod, scaled = probe()
    x = np.ones(4, np.float32)
    dev = lx.to_device(x)
    lx.synchronize()
    s = lx.stream()
    got = []
    for ordered in (False, True):
        lx.set_constant(mod, "c_scale", np.array([3.0 + ordered], np.float32))
        if ordered:
            lx.wait_event(s, lx.record(None))
        y, host = lx.empty(4, np.float32), lx.pinned(4, np.float32)
        lx.launch_on(s, scaled, (1,), (4,), dev, y, np.int32(4))
        lx.wait(lx.to_host_async(y, host, s))
        got.append(host.tolist())
        lx.synchronize()
    assert got == [[2.0] * 4, [4.0] * 4]


def test_work_no_stream_or_event_orders_runs_later_work_first(probe):
    """A copy on one stream and a zeroing of the same memory on another: nothing orders them, and the later
    one runs first (late order); ordered by an event, the copy comes first."""
    lx, _, _ = probe(order="late")  # (the order this case describes, whatever GPUMR_EMULATE_ORDER says)
    a, b = lx.stream(), lx.stream()
    up = lx.pinned(4, np.float32)
    up[:] = 7
    for ordered in (False, True):
        dev = lx.empty(4, np.float32)
        lx.to_device_async(up, dev, a)
        if ordered:
            lx.wait_event(b, lx.record(a))
        lx.zero_async(dev, b)
        lx.synchronize()
        assert lx.to_host(dev).tolist() == ([0.0] * 4 if ordered else [7.0] * 4)


def test_random_orders_are_orders_cuda_allows(probe):
    """Seeded random orders give both outcomes of unordered work, and never run a stream's work out of its
    order (a copy back always sees its stream's kernel)."""
    seen = set()
    for seed in range(16):
        lx, _, scaled = probe(order=f"random:{seed}")
        a, b = lx.stream(), lx.stream()
        up, host = lx.pinned(4, np.float32), lx.pinned(4, np.float32)
        up[:] = 7
        dev, y = lx.empty(4, np.float32), lx.empty(4, np.float32)
        lx.to_device_async(up, dev, a)
        lx.launch_on(a, scaled, (1,), (4,), dev, y, np.int32(4))
        token = lx.to_host_async(y, host, a)
        lx.zero_async(dev, b)
        lx.synchronize()
        lx.wait(token)
        assert host.tolist() in ([14.0] * 4, [0.0] * 4)
        seen.add(host[0])
    assert seen == {14.0, 0.0}


def test_eager_order_runs_each_call_at_once(probe):
    lx, _, scaled = probe(order="eager")
    dev = lx.to_device(np.ones(4, np.float32))
    y, host = lx.empty(4, np.float32), lx.pinned(4, np.float32)
    s = lx.stream()
    lx.launch_on(s, scaled, (1,), (4,), dev, y, np.int32(4))
    lx.to_host_async(y, host, s)
    assert lx.pending() == 0 and host.tolist() == [2.0] * 4


def test_an_injected_launch_failure_raises_at_its_call_and_the_device_goes_on(probe):
    lx, _, scaled = probe(faults="failure@launch#2")
    dev, y = lx.to_device(np.ones(4, np.float32)), lx.zeros(4, np.float32)
    lx.launch(scaled, (1,), (4,), dev, y, np.int32(4))
    with pytest.raises(emulate.DeviceError, match=r"launch #2 on simulated GPU 0: CUDA_ERROR_LAUNCH_FAILED") as e:
        lx.launch(scaled, (1,), (4,), dev, y, np.int32(4))
    assert not e.value.sticky and lx.is_device_error(e.value)
    lx.launch(scaled, (1,), (4,), dev, y, np.int32(4))
    assert lx.to_host(y).tolist() == [2.0] * 4


def test_an_injected_sticky_error_strikes_when_its_work_runs_and_every_call_after_fails(probe):
    lx, _, scaled = probe()
    lx.inject("sticky", "launch", 1)
    s = lx.stream()
    dev = lx.to_device(np.ones(4, np.float32))
    lx.synchronize()
    y, host = lx.empty(4, np.float32), lx.pinned(4, np.float32)
    lx.launch_on(s, scaled, (1,), (4,), dev, y, np.int32(4))  # accepted: the error comes when it runs
    token = lx.to_host_async(y, host, s)
    with pytest.raises(emulate.DeviceError, match="CUDA_ERROR_ILLEGAL_ADDRESS") as e:
        lx.wait(token)
    assert e.value.sticky and lx.pending() == 0 and _poison(host)  # the copy after it never ran
    for call in (lambda: lx.zeros(4, np.float32), lx.synchronize, lambda: lx.to_host(dev), lx.stream):
        with pytest.raises(emulate.DeviceError, match="launch #1 on simulated GPU 0: CUDA_ERROR_ILLEGAL_ADDRESS"):
            call()


def test_faults_are_read_from_the_environment_and_bad_ones_refused(monkeypatch):
    monkeypatch.setenv(emulate.FAULTS_ENV, "sticky@launch#3, failure@to_host_async#1")
    assert emulate.EmulatedLauncher(0, 1 << 20).faults == {("launch", 3): "sticky", ("to_host_async", 1): "failure"}
    monkeypatch.setenv(emulate.FAULTS_ENV, "sticky@launch")
    with pytest.raises(GpumrError, match=r"GPUMR_EMULATE_FAULTS: 'sticky@launch' is not KIND@CALL#N"):
        emulate.EmulatedLauncher(0, 1 << 20)
    with pytest.raises(GpumrError, match="GPUMR_EMULATE_ORDER='soon': one of late, eager, random"):
        emulate.EmulatedLauncher(0, 1 << 20, order="soon")


def test_memory_given_back_under_queued_work_is_a_violation(probe):
    lx, _, _ = probe()
    s = lx.stream()
    dev = lx.empty(4, np.float32)
    lx.zero_async(dev, s)
    del dev  # a pool may hand it out again while the zeroing is queued
    assert lx.violations and "zero_async" in lx.violations[0]
    with pytest.raises(emulate.EmulationError, match="given back while work queued on a stream still used them"):
        lx.synchronize()
    dev = lx.empty(4, np.float32)
    lx.zero_async(dev, s)
    lx.synchronize()
    del dev
    assert len(lx.violations) == 1


# -- R1: uploads ordered before the streams' kernels read them --------------------------------------

def _ct(n=40, n_angles=40, seed=0):
    g = geometry.simple(n, n_angles)
    q = np.random.default_rng(seed).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    return g, q


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_r1_the_first_slabs_after_set_up_read_the_uploads(fresh, monkeypatch):
    """With nothing run on the device between the set-up and the first slabs (the self-check's order
    aside), every slab equals the CPU's: the uploads landed before the lanes' kernels read them."""
    monkeypatch.setattr(SlabBackprojector, "_self_check", lambda self, st, case: True)
    g, q = _ct()
    slabs = [(0, 16), (16, 32), (32, 40)]
    got = SlabBackprojector(pad(q), g).run(slabs, simulated_gpus("1")[0])
    for (z0, z1), slab in zip(slabs, got):
        assert _rel(slab, backproject(q, g, z0, z1)) < 1e-5


def test_r1_the_slab_profile_uploads_before_its_slabs_read(fresh, capsys):
    """``bench/gpu_phases.py`` uploads the projections again before it times the slabs: they read them whole."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import gpu_phases

    from gpumr.ct.backproject_gpu import SlabBackprojector as Real
    results = []
    run = Real.run
    try:
        Real.run = lambda self, slabs, gpu: results.append((self, slabs, run(self, slabs, gpu))) or results[-1][2]
        gpu_phases.ct(simulated_gpus("1")[0], 32, 32, 8, "a simulated GPU")
    finally:
        Real.run = run
    assert len(results) == 3  # the warm-up, the run as driven, each call alone
    for bp, slabs, got in results:
        q = bp.padded[:, 1:-1, 1:-1]
        for (z0, z1), slab in zip(slabs, got):
            assert _rel(slab, backproject(q, bp.geometry, z0, z1)) < 1e-5


def test_the_projections_go_up_in_chunks_each_staging_buffer_refilled_after_its_copy(fresh, monkeypatch):
    """Chunks of 3 angles through two page-locked staging buffers: 14 copies, and the slabs read every angle."""
    from gpumr.ct import backproject_gpu
    g, q = _ct()
    padded = pad(q)
    monkeypatch.setattr(backproject_gpu, "UPLOAD_CHUNK_BYTES", 3 * padded[0].nbytes)
    gpu = simulated_gpus("1")[0]
    lx = launch.launcher(gpu)
    (got,) = SlabBackprojector(padded, g).run([(0, 40)], gpu)
    assert lx.calls["to_device_async"] == 14 and lx.calls["pinned"] >= 2
    assert _rel(got, backproject(q, g)) < 1e-5


def test_a_taller_slab_in_the_same_call_grows_its_slot_once_the_copy_out_of_it_landed(fresh):
    g, q = _ct()
    gpu = simulated_gpus("1")[0]
    lx = launch.launcher(gpu)
    slabs = [(0, 4), (4, 8), (8, 24), (24, 40)]
    got = SlabBackprojector(pad(q), g).run(slabs, gpu)
    for (z0, z1), slab in zip(slabs, got):
        assert _rel(slab, backproject(q, g, z0, z1)) < 1e-5
    assert lx.violations == []


def test_a_caller_holding_many_slabs_gets_copies_and_page_locked_memory_stays_bounded(fresh, monkeypatch):
    from gpumr.ct import backproject_gpu
    monkeypatch.setattr(backproject_gpu, "HOST_SLABS", 2)
    g, q = _ct()
    gpu = simulated_gpus("1")[0]
    bp = SlabBackprojector(pad(q), g)
    held = [s for z in range(0, 40, 8) for s in bp.run([(z, z + 4), (z + 4, z + 8)], gpu)]
    st = bp.state(gpu)
    assert st["host"].out <= 4 and len(held) == 10  # (the self-check's strip is not lent)
    for (z0, z1), slab in zip([(z, z + 4) for z in range(0, 40, 4)], held):
        assert _rel(slab, backproject(q, g, z0, z1)) < 1e-5
    del held
    assert st["host"].out == 0


def _faces(n=3):
    from skimage import data
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    frames = [cv2.resize(astro, (320, 240)), cv2.resize(data.camera(), (320, 240)),
              cv2.resize(astro[50:450, 60:460], (320, 240))]
    return (frames * (n // 3 + 1))[:n]


def _opencv(frames, **kw):
    from gpumr.faces.cpu import cascade_path, detect, load_cascade
    clf = load_cascade(cascade_path())
    return [sorted(detect(clf, g, **kw)) for g in frames]


def test_r1_the_first_faces_after_set_up_read_the_cascade(fresh, monkeypatch):
    """The cascade's arrays and constants are on the device before the lane's kernels read them."""
    from gpumr.faces.cpu import cascade_path
    from gpumr.faces.gpu import FaceGPU
    monkeypatch.setattr(FaceGPU, "_self_check", lambda self, st, case: True)
    frames = _faces(3)
    got = FaceGPU(cascade_path()).run(frames, simulated_gpus("1")[0])
    assert [sorted(f) for f in got] == _opencv(frames)


# -- R2: no constants replaced under a launch ------------------------------------------------------

def test_r2_a_slab_of_more_angles_than_a_launch_takes_reads_each_launchs_own(fresh, altered_kernel):
    """Launches of 16, 16 and 8 angles of one slab, on a lane's stream: each reads its own angles' cosines."""
    altered_kernel("backproject", "#define MAX_ANGLES 2048", "#define MAX_ANGLES 16")
    g, q = _ct(n_angles=40)
    bp = SlabBackprojector(pad(q), g)
    slabs = [(0, 11), (11, 40)]
    for (z0, z1), slab in zip(slabs, bp.run(slabs, simulated_gpus("1")[0])):
        assert _rel(slab, backproject(q, g, z0, z1)) < 1e-5


# -- R3: the self-check's bound, and production's launch shape --------------------------------------

def _ct_edges(n_angles=60, n_detector=None):
    """An odd-sized volume off the detector's centre (its edges project off the detector), random projections."""
    d = geometry.simple(40, n_angles).to_dict()
    d.update(nVoxel=[37, 30, 34], offOrigin=[0.7, -1.3, 0.4], offDetector=[1.1, -0.6])
    if n_detector:
        d.update(nDetector=[n_detector, n_detector], dDetector=[d["dDetector"][0] * 48 / n_detector,
                                                                d["dDetector"][1] * 48 / n_detector])
    g = geometry.from_dict(d)
    q = np.random.default_rng(3).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    return g, q


def test_r3_the_bound_is_near_the_devices_rounding():
    """At 1024 detector pixels from 360 angles, a few times what a correct device differs by (the emulated one:
    about 0.3 N eps / sqrt(angles)), not hundreds."""
    from gpumr.ct.backproject_gpu import check_tolerance
    eps = float(np.finfo(np.float32).eps)
    g = geometry.simple(1024, 360, n_detector=1024)
    assert 3 * 0.3 * 1024 * eps / np.sqrt(360) < check_tolerance(g) < 10 * 0.3 * 1024 * eps / np.sqrt(360)


def test_r3_a_kernel_off_in_a_quarter_of_one_slice_is_caught(fresh, altered_kernel):
    """Half a percent off in a quarter of the centre slice, at 512 detector pixels: the window sees it."""
    g, q = _ct_edges(n_angles=32, n_detector=512)
    z = g.nVoxel[0] // 2
    altered_kernel("backproject", "if (split == 1) *o += acc[k]; else atomicAdd(o, acc[k]);",
                   f"const float e = (z0 + k == {z} && 2 * ix < nx && 2 * iy < ny) ? 1.005f : 1.0f; "
                   "if (split == 1) *o += e * acc[k]; else atomicAdd(o, e * acc[k]);")
    with pytest.raises(RuntimeError, match=r"GPU backprojection disabled on gpu:0: slices \d+-\d+ differ from the "
                                           r"CPU backprojector"):
        SlabBackprojector(pad(q), g).run([(0, 8)], simulated_gpus("1")[0])


def test_r3_a_kernel_wrong_only_in_its_atomic_path_is_caught(fresh, altered_kernel):
    """Production cuts a 16-slice slab's 60 angles in 3 parts here (atomic adds); a kernel wrong only there."""
    altered_kernel("backproject", "else atomicAdd(o, acc[k]);", "else atomicAdd(o, 1.001f * acc[k]);")
    g, q = _ct_edges()
    bp = SlabBackprojector(pad(q), g)
    with pytest.raises(RuntimeError, match=r"disabled on gpu:0: the first slab's rows 0-7 \(slices 0-15\) differ"):
        bp.run([(0, 16)], simulated_gpus("1")[0])


def test_r3_a_kernel_wrong_only_where_the_volume_s_edge_is_clamped_is_caught(fresh, altered_kernel):
    """Columns clamped at the detector's edge: a volume whose centre the detector sees whole (the window) and
    whose corners it does not (the strip of the first slab reaches them)."""
    altered_kernel("backproject", "(mag * inv_du) + cu1, 0.0f), col_max);",
                   "(mag * inv_du) + cu1, 0.0f), col_max - 1.0f);")
    d = geometry.simple(40, 60).to_dict()
    d.update(nVoxel=[37, 60, 70], offOrigin=[0.7, -1.3, 0.4], offDetector=[1.1, -0.6],
             dDetector=[1.2 * v for v in d["dDetector"]])
    g = geometry.from_dict(d)  # (part of it outside the field of view: a warning line)
    q = np.random.default_rng(3).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    bp = SlabBackprojector(pad(q), g)
    with pytest.raises(RuntimeError, match=r"disabled on gpu:0: the first slab's rows 0-7 \(slices 0-15\) differ"):
        bp.run([(0, 16)], simulated_gpus("1")[0])


# -- R4: failures settled before the lease and the buffers go -------------------------------------

class _Chooser:
    """Gives ``gpu`` to every batch; at each release, records the work still queued on its launcher."""

    def __init__(self, gpu):
        self.gpu, self.at_release, self.leases = gpu, [], 0

    fits = staticmethod(lambda memory=0: True)

    def choose(self, memory=0):
        from gpumr.devices.chooser import Choice
        self.leases += 1
        lx = launch.launcher(self.gpu)
        return Choice(self.gpu, "lease", lambda: self.at_release.append((lx.pending(), list(lx.violations))))


def _faces_work():
    import argparse

    from gpumr.faces.workload import Faces
    from gpumr.launch.options import task_options
    from gpumr.tasks.device import Device
    o = argparse.Namespace(**{opt.dest: opt.default for opt in task_options(Faces)})
    work = Faces()
    work.resolve(o)
    work.setup(o)
    assert work.gpu_ready(o, simulated=True) is None
    return work, o, Device


def _process(work, o, chooser, device_for, records):
    from gpumr.core import Processor
    from gpumr.core.counters import outcome
    counts = {}
    out = dict(Processor(work, o, chooser, device_for=device_for,
                         count=lambda name, n=1: counts.update({name: counts.get(name, 0) + n})).process(records))
    for value in out.values():
        counts[outcome(value)] = counts.get(outcome(value), 0) + 1
    return out, counts


def test_r4_a_launch_failure_mid_batch_is_settled_before_the_lease_is_released(fresh):
    """A batch of 16 frames (two parts) whose second part's first launch fails: by the time the lease is released
    nothing of the batch is still queued and no device buffer was let go of under queued work; the frames are
    re-run on the CPU and equal OpenCV's."""
    from gpumr.core.counters import FALLBACKS
    work, o, Device = _faces_work()
    gpu = simulated_gpus("1")[0]
    frames = _faces(16)
    records = [(f"k{i}", cv2.imencode(".png", f)[1].tobytes()) for i, f in enumerate(frames)]
    work._gpu.found(frames[:1], gpu)  # set up and trusted
    lx = launch.launcher(gpu)
    lx.inject("failure", "launch", 10)  # the first launch of the second part
    chooser = _Chooser(gpu)
    out, counts = _process(work, o, chooser, Device, records)
    assert counts[FALLBACKS] == 16 and chooser.at_release[0] == (0, [])
    assert [sorted(out[f"k{i}"]["faces"]) for i in range(16)] == _opencv(frames)


def test_r4_a_sticky_error_keeps_the_device_from_being_leased_again(fresh, tmp_path, monkeypatch):
    """A sticky error in the first batch's slabs: that batch falls back to the CPU (counted), the device is
    untrusted for the process, and device choice gives every later batch the CPU without leasing it."""
    from gpumr.core.counters import FALLBACKS, ON_CPU, ON_GPU
    from gpumr.devices.chooser import DeviceChooser
    from gpumr.tasks.device import Device
    g, q = _ct()
    spec = "1:3GiB"
    gpu = simulated_gpus(spec)[0]

    class Work:  # the CT workload's GPU path over ready projections
        name, gpu_records, cpu_records = "backproject", 2, 1
        bp = SlabBackprojector(pad(q), g)

        def load(self, key, value, o):
            return tuple(int(v) for v in value.split())

        def gpu_memory(self, items, o):
            return 1

        def cpu_batch(self, batch, o):
            return [{"slab": backproject(q, g, *s)} for _, s in batch]

        def gpu_batch(self, batch, o, device):
            return [{"slab": s} for s in self.bp.run([s for _, s in batch], device.gpu)]

        def finish(self, key, result, o):
            return result
    Work.bp.state(gpu)  # set up and trusted
    launch.launcher(gpu).inject("sticky", "launch", 1)
    chooser = DeviceChooser("auto", slots=1, lease_dir=str(tmp_path / "leases"), scheduler=False,
                            env={"GPUMR_SIMULATE_GPUS": spec})
    leased = []
    choose = chooser.choose
    chooser.choose = lambda memory=0: leased.append(choose(memory)) or leased[-1]
    records = [(f"z{z:02d}", f"{z} {z + 8}") for z in range(0, 40, 8)]
    out, counts = _process(Work(), None, chooser, Device, records)
    assert counts.get(FALLBACKS) == 2 and counts.get(ON_GPU, 0) == 0 and counts[ON_CPU] == 5
    assert sum(c.on_gpu for c in leased) == 1  # the first batch only
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in trust.untrusted(gpu)
    for key, z in ((f"z{z:02d}", z) for z in range(0, 40, 8)):
        assert _rel(out[key]["slab"], backproject(q, g, z, z + 8)) < 1e-5


# -- R5: threads sharing a device ------------------------------------------------------------------

def test_r5_threads_sharing_a_backprojector_each_get_their_own_slabs(fresh, monkeypatch):
    """Two threads (two tasks of a worker) run slabs on one GPU at once, both having queued before either
    waits: each through a lane of its own, both right."""
    g, q = _ct()
    gpu = simulated_gpus("1")[0]
    bp = SlabBackprojector(pad(q), g)
    bp.state(gpu)
    both = threading.Barrier(2, timeout=600)
    lx = launch.launcher(gpu)
    wait = type(lx).wait

    def meet(self, token):  # both threads have queued their slabs before either waits
        if threading.current_thread().name.startswith("slabs-") and not getattr(meet.local, "met", False):
            meet.local.met = True
            both.wait()
        return wait(self, token)
    meet.local = threading.local()
    monkeypatch.setattr(type(lx), "wait", meet)
    work = {0: [(0, 8), (8, 16)], 1: [(16, 24), (24, 40)]}
    got, errors = {}, []

    def run(i):
        try:
            got[i] = bp.run(work[i], gpu)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(i,), name=f"slabs-{i}") for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in (0, 1):
        for (z0, z1), slab in zip(work[i], got[i]):
            assert _rel(slab, backproject(q, g, z0, z1)) < 1e-5


def test_r5_a_device_asked_for_by_two_threads_at_once_is_set_up_once():
    made = []

    def setup(gpu):
        made.append(gpu.index)
        threading.Event().wait(0.3)
        return {"lx": None}
    states = trust.DeviceStates("a GPU path", setup, lambda st: True)
    gpu = simulated_gpus("1:5MiB")[0]
    start = threading.Barrier(2, timeout=60)
    got = []

    def get():
        start.wait()
        got.append(states.get(gpu))
    threads = [threading.Thread(target=get) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [0] and len(got) == 2 and got[0] is got[1]


def test_device_choice_never_leases_a_lost_gpu_and_gpu_mode_gives_the_cpu_when_all_are_lost(fresh, tmp_path):
    from gpumr.devices.chooser import DeviceChooser
    env = {"GPUMR_SIMULATE_GPUS": "2:1GiB"}
    chooser = DeviceChooser("gpu", slots=1, lease_dir=str(tmp_path / "leases"), scheduler=False, env=env,
                            wait_timeout=5)
    a, b = simulated_gpus("2:1GiB")
    trust.distrust(a, "a CUDA error: DeviceError: lost")
    with said_lines() as lines:
        for _ in range(3):
            with chooser.choose(1) as c:
                assert c.device == "gpu:1"
    assert lines == ["gpu:0 is not used again by this task: a CUDA error: DeviceError: lost"]
    trust.distrust(b, "a CUDA error: DeviceError: lost too")
    assert not chooser.choose(1).on_gpu  # (no wait for a GPU that will never be free)
