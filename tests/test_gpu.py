"""GPU paths: kernels compile with nvcc here; on an NVIDIA GPU they must match the CPU."""

import os

import numpy as np
import pytest

from gpumr.gpu import kernels

needs_nvcc = pytest.mark.skipif(kernels.nvcc() is None, reason="nvcc (CUDA toolkit) not found")


@needs_nvcc
@pytest.mark.parametrize("name", kernels.KERNELS)
def test_kernel_compiles(tmp_path, name):
    out = kernels.compile_fatbin(name, str(tmp_path / f"{name}.fatbin"), archs=("90",), ptx=False)
    assert os.path.getsize(out) > 1000


@needs_nvcc
def test_build_kernels_command(tmp_path, capsys, monkeypatch):
    from gpumr.cli import main
    assert main(["build-kernels", "-o", str(tmp_path), "--arch", "80"]) == 0
    built = sorted(n for n in os.listdir(tmp_path) if not n.startswith("."))  # (.NAME.gpumr: gpumr's proof)
    assert len(built) == len(kernels.KERNELS) and all(b.endswith(".fatbin") for b in built)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(tmp_path))
    haar = tmp_path / f"haar-{kernels._digest('haar')}.fatbin"
    assert kernels.locate("haar") == (str(haar), "$GPUMR_KERNEL_DIR")  # found, not rebuilt
    assert open(kernels.fatbin("haar"), "rb").read() == haar.read_bytes() == kernels.image("haar")


def _real_gpu():
    from gpumr.devices import nvml
    from gpumr.gpu import launch as gpu
    ok, why = gpu.available()
    if not ok:
        pytest.skip(why)
    found = nvml.discover(env={k: v for k, v in os.environ.items() if k != "GPUMR_SIMULATE_GPUS"})
    if not found.gpus:
        pytest.skip(f"no NVIDIA GPU: {found.reason}")
    return found.gpus[0]


@pytest.mark.gpu
def test_gpu_backprojection_equals_cpu():
    from gpumr.ct import geometry, phantom
    from gpumr.ct.backproject import backproject, pad
    from gpumr.ct.backproject_gpu import SlabBackprojector
    from gpumr.ct.fdk import filter_projections
    gpu = _real_gpu()
    d = geometry.simple(48, 64).to_dict()
    d.update(offOrigin=[0.5, -1.0, 0.3], offDetector=[1.2, -0.7])
    g = geometry.from_dict(d)
    for seed in range(2):
        q = np.random.default_rng(seed).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
        bp = SlabBackprojector(pad(q), g)
        for z0, z1 in ((0, 48), (5, 13)):
            cpu = backproject(q, g, z0, z1)
            (gpu_slab,) = bp.run([(z0, z1)], gpu)
            assert np.linalg.norm(gpu_slab - cpu) / np.linalg.norm(cpu) < 1e-5
    g = geometry.simple(64, 90)
    f = filter_projections(phantom.projections(g), g)
    (vol,) = SlabBackprojector(pad(f), g).run([(0, 64)], gpu)
    cpu = backproject(f, g)
    assert np.linalg.norm(vol - cpu) / np.linalg.norm(cpu) < 1e-5


@pytest.mark.gpu
def test_gpu_fdk_filter_equals_the_hosts():
    """Where the launcher has an FFT (CuPy: cuFFT) the device filters the projections itself: within float32
    rounding of the host's filter, and the slabs of a task's raw projections as the host-filtered ones'."""
    from gpumr.ct import geometry
    from gpumr.ct.backproject import backproject, pad
    from gpumr.ct.backproject_gpu import SlabBackprojector
    from gpumr.ct.bands import FilteredRows
    from gpumr.ct.fdk import filter_projections
    from gpumr.ct.fdk_gpu import filter_on_device
    from gpumr.gpu import launch
    gpu = _real_gpu()
    d = geometry.simple(48, 64).to_dict()
    d.update(offDetector=[1.2, -0.7])
    g = geometry.from_dict(d)
    raw = np.random.default_rng(3).random((g.n_angles, *g.nDetector), dtype=np.float32)
    want = filter_projections(raw, g, "hann")
    lx = launch.launcher(gpu)
    if lx.fft:
        with lx.active():
            q = lx.to_device(pad(raw))
            filter_on_device(lx, q, g, "hann", stream=lx.stream())
            got = lx.to_host(q)[:, 1:-1, 1:-1]
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    (slab,) = SlabBackprojector(FilteredRows(raw, g, "hann"), g).run([(0, 48)], gpu)
    cpu = backproject(want, g)
    assert np.linalg.norm(slab - cpu) / np.linalg.norm(cpu) < 1e-5


def _iou(a, b):
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    iw = max(0, min(ax + aw, bx + bw) - max(ax, bx))
    ih = max(0, min(ay + ah, by + bh) - max(ay, by))
    inter = iw * ih
    return inter / (aw * ah + bw * bh - inter)


@pytest.mark.gpu
@pytest.mark.parametrize("scale_factor", [1.05, 1.1, 1.27])
def test_gpu_faces_agree_with_opencv(sample_frames, scale_factor):
    import cv2
    from skimage import data

    from gpumr.faces.cpu import detect, load_cascade
    from gpumr.faces.gpu import FaceGPU
    gpu = _real_gpu()
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE) for n in sorted(os.listdir(sample_frames))]
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    frames += [astro, cv2.resize(astro, (256, 256)), cv2.resize(frames[0], (1280, 960)), data.camera()]
    for name in ("haarcascade_frontalface_default.xml", "haarcascade_frontalface_alt.xml",
                 "haarcascade_frontalface_alt2.xml"):
        path = os.path.join(cv2.data.haarcascades, name)
        clf, fg = load_cascade(path), FaceGPU(path, scale_factor=scale_factor)
        got = fg.run(frames, gpu)
        matched = unmatched = total_cv = total_gpu = 0
        for gray, g in zip(frames, got):
            want = detect(clf, gray, scale_factor=scale_factor)
            total_cv += len(want)
            total_gpu += len(g)
            matched += sum(1 for w in want if any(_iou(w, x) >= 0.5 for x in g))
            unmatched += sum(1 for x in g if not any(_iou(w, x) >= 0.5 for w in want))
        assert total_cv > 0
        assert matched >= 0.95 * total_cv, (name, scale_factor, matched, total_cv)
        assert unmatched <= 0.05 * max(total_gpu, 1), (name, scale_factor, unmatched, total_gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("scale_factor", [1.05, 1.1, 1.27])
def test_gpu_pyramid_bytes_equal_opencv_resize(scale_factor):
    """The pyramid kernel on the real device: every level byte for byte ``cv2.resize`` (INTER_LINEAR_EXACT),
    the same checks the emulated build passes in test_gpu_pyramid.py, through the real launcher."""
    import test_gpu_pyramid as emulated

    from gpumr.gpu import launch
    lx = launch.launcher(_real_gpu())
    with lx.active():
        haar = lx, lx.function(lx.module("haar"), "pyramid")
        emulated.test_every_level_equals_opencvs_resize(haar, scale_factor)
        if scale_factor == 1.1:
            emulated.test_any_size_to_any_size_equals_opencvs_resize(haar)


@pytest.mark.gpu
def test_nvml_and_the_free_check_read_the_real_card():
    """NVML's reading equals nvidia-smi's (name, memory, compute mode, UUID); the free check (an exclusive-mode
    context probe) and the chooser's lease give this idle card to a record. The card's settings are only read."""
    import subprocess

    from gpumr.devices.chooser import DeviceChooser
    from gpumr.gpu import context
    gpu = _real_gpu()
    smi = subprocess.run(["nvidia-smi", "-i", str(gpu.index), "--format=csv,noheader,nounits",
                          "--query-gpu=name,memory.total,compute_mode,uuid"],
                         capture_output=True, text=True, check=True).stdout.strip().split(", ")
    print("nvidia-smi:", smi, "NVML:", gpu)
    assert gpu.name == smi[0] and gpu.uuid == smi[3]
    assert abs(gpu.memory_total / 2**20 - float(smi[1])) <= 1
    assert gpu.compute_mode.lower().replace("_", "") == smi[2].lower().replace("_", "")
    assert context.probe(gpu)
    chooser = DeviceChooser("gpu", wait_timeout=30)
    try:
        choice = chooser.choose()
        assert choice.on_gpu and choice.gpu.uuid == gpu.uuid
        choice.release()
    finally:
        chooser.close()
