"""The host emulation of CUDA (gpumr.gpu.emulate): builds, refusals, launch checks, memory, the build cache."""

import multiprocessing as mp
import os
import re
import shlex

import numpy as np
import pytest

from gpumr.errors import GpumrError
from gpumr.gpu import emulate, kernels

PROBE = r"""
__constant__ float c_scale[4];

// y[i] += a * x[i] * c_scale[0]
extern "C" __global__ void axpy(const float* __restrict__ x, float* __restrict__ y, int n, float a)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * __ldg(x + i) * c_scale[0];
}

// Each block appends its threads' linear ids in the order they run; blocks run concurrently.
extern "C" __global__ void order(int* __restrict__ seen, int* __restrict__ per_block, int* __restrict__ total)
{
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int id = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    seen[block * threads + atomicAdd(per_block + block, 1)] = id;
    atomicAdd(total, 1);
}

// Vector types keep CUDA's layout.
extern "C" __global__ void vectors(const int4* __restrict__ in, int2* __restrict__ out, double2 d)
{
    const int4 v = in[threadIdx.x];
    out[threadIdx.x] = make_int2(v.x + v.w, min(v.y, v.z) + (int)d.y);
}
"""


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A folder given as ``$GPUMR_CUDA_SOURCES``; ``sources(name, text)`` writes ``name.cu`` there."""
    folder = tmp_path / "cuda"
    folder.mkdir()
    monkeypatch.setenv(kernels.SOURCES_ENV, str(folder))

    def write(name, text):
        (folder / f"{name}.cu").write_text(text)
        return str(folder / f"{name}.cu")
    return write


@pytest.fixture
def probe(sources):
    """The probe kernels loaded on an emulated device of 1 MiB."""
    sources("probe", PROBE)
    lx = emulate.EmulatedLauncher(0, 1 << 20)
    return lx, lx.module("probe")


def test_kernels_run_with_constant_memory_and_sliced_arrays(probe):
    lx, mod = probe
    axpy = mod.get_function("axpy")
    x = np.arange(10, dtype=np.float32)
    y = lx.to_device(np.ones(10, np.float32))
    lx.set_constant(mod, "c_scale", np.array([2.0], np.float32))
    lx.launch(axpy, (1, 1, 1), (4, 1, 1), lx.to_device(x[3:7]), y[3:7], np.int32(4), np.float32(0.5))
    want = np.ones(10, np.float32)
    want[3:7] += 0.5 * x[3:7] * 2
    assert np.array_equal(lx.to_host(y), want)  # only the slice's four elements changed


def test_blocks_run_concurrently_and_a_blocks_threads_in_order(probe):
    lx, mod = probe
    grid, block = (5, 3, 2), (4, 2, 3)
    n_blocks, n_threads = 30, 24
    seen, per_block = lx.zeros((n_blocks, n_threads), np.int32), lx.zeros(n_blocks, np.int32)
    total = lx.zeros(1, np.int32)
    lx.launch(mod.get_function("order"), grid, block, seen, per_block, total)
    assert lx.to_host(total)[0] == n_blocks * n_threads  # atomics lose nothing across host threads
    assert (lx.to_host(seen) == np.arange(n_threads)).all()  # x fastest, then y, then z, one after another
    assert lx.threads == len(os.sched_getaffinity(0))


def test_vector_types_have_cudas_layout(probe):
    lx, mod = probe
    v = np.arange(32, dtype=np.int32).reshape(8, 4)
    out = lx.zeros((8, 2), np.int32)
    d = np.array((1.5, 7.0), dtype=[("x", "<f8"), ("y", "<f8")])[()]
    lx.launch(mod.get_function("vectors"), (1,), (8,), lx.to_device(v), out, d)
    assert np.array_equal(lx.to_host(out), np.stack([v[:, 0] + v[:, 3], np.minimum(v[:, 1], v[:, 2]) + 7], 1))


def test_launches_are_checked_as_a_driver_checks_them(probe):
    lx, mod = probe
    axpy = mod.get_function("axpy")
    x, y = lx.zeros(8, np.float32), lx.zeros(8, np.float32)
    ok = (x, y, np.int32(8), np.float32(1))
    cases = [
        ((x, y, np.int32(8)), "takes 4 arguments, 3 given"),
        ((x, y, 8, np.float32(1)), r"invalid type on parameter #2 \(0-based\): int"),
        ((x, y, np.int64(8), np.float32(1)), r"#2 \(0-based\) is a 4-byte signed scalar \(int32\); got int64"),
        ((x, y, np.int32(8), np.float64(1)), "4-byte floating scalar .float32.; got float64"),
        ((x, y.ptr, np.int32(8), np.float32(1)), r"invalid type on parameter #1 \(0-based\): int where the kernel "
                                                 "takes a pointer"),
        ((x, np.zeros(8, np.float32), np.int32(8), np.float32(1)), "got a host numpy array"),
        ((x, lx.zeros(8, np.int32), np.int32(8), np.float32(1)), "points to 4-byte floating elements; got a int32"),
        ((x, emulate.EmulatedLauncher(1, 1 << 20).zeros(8, np.float32), np.int32(8), np.float32(1)),
         "an array of another device"),
    ]
    for args, message in cases:
        with pytest.raises(TypeError, match=message):
            lx.launch(axpy, (1,), (8,), *args)
    for grid, block in (((1,), (1025,)), ((1,), (32, 33)), ((1,), (1, 1, 65)), ((1, 65536), (1,)), ((2 ** 31,), (1,)),
                        ((0,), (1,))):
        with pytest.raises(emulate.LaunchError, match="beyond CUDA's limits"):
            lx.launch(axpy, grid, block, *ok)
    with pytest.raises(ValueError, match="20 bytes do not fit its 16"):
        lx.set_constant(mod, "c_scale", np.zeros(5, np.float32))
    with pytest.raises(GpumrError, match="no extern \"C\" __global__ function nothing"):
        mod.get_function("nothing")


def test_constant_memory_beyond_64_kib_is_refused(sources):
    sources("big", "__constant__ float4 c_big[4097];\n"
                   "extern \"C\" __global__ void k(float* o) { o[0] = c_big[0].x; }\n")
    with pytest.raises(GpumrError, match="take 65552 bytes, more than the 65536 bytes of constant memory"):
        emulate.EmulatedLauncher(0, 1 << 20).module("big")


def test_device_memory_is_the_simulated_size():
    lx = emulate.EmulatedLauncher(0, 1000)
    a = lx.zeros(600, np.uint8)
    with pytest.raises(lx.out_of_memory, match="out of memory on simulated GPU 0: 500 bytes asked, 400 of 1000 free"):
        lx.to_device(np.zeros(500, np.uint8))
    assert lx.used == lx.peak == 600
    view = a[100:200]
    del a
    assert lx.used == 600  # a slice keeps its allocation
    del view
    assert lx.used == 0 and lx.peak == 600
    lx.zeros(1000, np.uint8)


@pytest.mark.parametrize("snippet, feature", [
    ("extern __shared__ float dynamic[];", "dynamic shared memory (extern __shared__)"),
    ("int f() { return __syncthreads_count(1); }", "counting block barriers (__syncthreads_count)"),
    ("int f(int v) { return __shfl_down(v, 1); }", "warp shuffles without a mask (__shfl_down)"),
    ("int f(int v) { return __ballot_sync(0xffffffff, v); }", "warp votes (__ballot_sync)"),
    ("float f(cudaTextureObject_t t) { return 0; }", "textures and surfaces (cudaTextureObject_t)"),
    ("extern \"C\" __global__ void g(); void f() { g<<<1, 1>>>(); }", "launches from a kernel"),
    ("void f() { asm(\"exit;\"); }", "inline PTX (asm)"),
    ("#include <cooperative_groups.h>", "CUDA's headers (#include <cooperative_groups.h>)"),
    ("float f(float x) { return __expf(x); }", "the device intrinsic __expf"),
])
def test_features_it_does_not_restate_are_refused_by_name(sources, snippet, feature):
    path = sources("haar", "// __shared__ in a comment is fine\nextern \"C\" __global__ void k(int* o) { o[0] = 1; }\n"
                   + snippet + "\n")
    with pytest.raises(GpumrError) as info:
        emulate.build("haar")
    message = str(info.value)
    assert message.startswith(f"{path}:3: uses {feature}") and "does not restate" in message
    assert "\n" not in message


def test_the_header_poisons_what_the_scan_cannot_see(sources):
    """A barrier hidden behind token pasting passes the scan; the compiler stops on the poisoned name."""
    path = sources("haar", "#define SYNC(x) __sync##x()\n"
                           "extern \"C\" __global__ void k(int* o) { SYNC(threads); o[0] = 1; }\n")
    with pytest.raises(GpumrError, match=f"{path}: the host build with .* failed: .*poisoned \"__syncthreads\""):
        emulate.build("haar")


def _build_in_child(queue):
    try:
        queue.put(emulate.build("probe")[0])
    except Exception as exc:  # noqa: BLE001 (reported to the parent)
        queue.put(repr(exc))


def test_builds_are_cached_by_content_and_concurrent_builds_are_safe(sources, tmp_path, monkeypatch):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path / "cache"))
    sources("probe", PROBE)
    runs = tmp_path / "compiles"
    cxx = tmp_path / "cxx"  # the compiler, noting each compilation
    cxx.write_text(f'#!/bin/sh\ncase " $* " in *" -o "*) echo "$$" >> {shlex.quote(str(runs))} ;; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_build_in_child, args=(queue,)) for _ in range(3)]
    for p in procs:
        p.start()
    paths = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert len(set(paths)) == 1 and paths[0].startswith(str(tmp_path / "cache")), paths
    files = os.listdir(tmp_path / "cache")  # one build and its proof of authorship, no temporary left over
    assert sorted(files) == sorted([os.path.basename(paths[0]), f".{os.path.basename(paths[0])}.gpumr"]), files
    assert len(runs.read_text().split()) == 1  # one task built it; the others waited for it and used it
    stamp = os.stat(paths[0]).st_mtime_ns
    assert emulate.build("probe")[0] == paths[0] and os.stat(paths[0]).st_mtime_ns == stamp  # reused
    sources("probe", PROBE + "\n// changed\n")
    assert emulate.build("probe")[0] != paths[0]  # a changed source is a new build
    assert emulate.build("probe", sanitize=True)[0].endswith("-host-asan.so")


def test_missing_source_and_compiler_errors_are_one_line(sources, monkeypatch):
    sources("probe", "extern \"C\" __global__ void k(int* o) { o[0] = undefined_name; }\n")
    with pytest.raises(GpumrError, match=r"probe.cu: the host build with .* failed: .*'undefined_name' was not "):
        emulate.build("probe")
    with pytest.raises(GpumrError, match=r"no kernel source nothing.cu in \$GPUMR_CUDA_SOURCES"):
        emulate.build("nothing")
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(GpumrError, match="/nonexistent/g\\+\\+"):
        emulate.build("probe")


def test_the_sanitizer_build_needs_libasan_first():
    with pytest.raises(GpumrError, match=r"needs gcc's libasan loaded first: run with LD_PRELOAD="):
        emulate.EmulatedLauncher(0, 1 << 20, sanitize=True)


ASAN_CHILD = r"""
import sys

import cv2
import numpy as np
from skimage import data

from gpumr.ct import geometry
from gpumr.ct.backproject import pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.devices.nvml import simulated_gpus
from gpumr.faces.cpu import cascade_path
from gpumr.faces.gpu import FaceGPU
from gpumr.gpu import launch

gpu = simulated_gpus("1")[0]
assert launch.launcher(gpu).sanitize
astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
faces = [] if "ct-only" in sys.argv else \
    FaceGPU(cascade_path()).run([astro[:90, :61], cv2.resize(astro, (333, 250)), astro[300:, 100:]], gpu)
g = geometry.simple(21, 12)
q = np.random.default_rng(0).standard_normal((12, *g.nDetector)).astype(np.float32)
slabs = SlabBackprojector(pad(q), g).run([(0, 21), (13, 21), (20, 21)], gpu)
print("clean", sum(map(len, faces)), [len(s) for s in slabs])
"""


def _under_asan(tmp_path, *args):
    import subprocess
    import sys
    libasan = subprocess.run([os.environ.get("CC", "gcc"), "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    if not os.path.isabs(libasan) or not os.path.exists(libasan):
        pytest.fail(f"gcc's libasan.so not found ({libasan!r}): install gcc's AddressSanitizer runtime")
    # libstdc++ loaded with the runtime, so that ASan's __cxa_throw interceptor finds the real one (OpenCV
    # throws and catches C++ exceptions inside cv2 calls; without it ASan's own CHECK fails there)
    libstdcxx = subprocess.run([os.environ.get("CC", "gcc"), "-print-file-name=libstdc++.so.6"], capture_output=True,
                               text=True).stdout.strip()
    preload = " ".join([libasan] + ([libstdcxx] if os.path.isabs(libstdcxx) and os.path.exists(libstdcxx) else []))
    env = dict(os.environ, LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0", GPUMR_EMULATE_ASAN="1")
    return subprocess.run([sys.executable, "-c", ASAN_CHILD, *args], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=600)


@pytest.mark.slow
def test_both_kernels_run_clean_under_address_sanitizer(tmp_path, altered_kernel):
    """Every device allocation guarded by ASan's redzones: both kernels and their glue stay inside them.

    And the check can fail: a kernel writing one slice past its slab (through
    GPUMR_CUDA_SOURCES) is reported as a heap buffer overflow at its line in backproject_slab.
    """
    clean = _under_asan(tmp_path)
    assert clean.returncode == 0 and "AddressSanitizer" not in clean.stderr, clean.stderr[-3000:]
    assert clean.stdout.startswith("clean ") and clean.stdout.split()[-3:] == ["[21,", "8,", "1]"]
    altered_kernel("backproject", "        if (z0 + k < nz) {", "        if (z0 + k <= nz) {")
    broken = _under_asan(tmp_path, "ct-only")
    assert broken.returncode != 0 and "ERROR: AddressSanitizer: heap-buffer-overflow" in broken.stderr
    # (in the kernel itself, or in the atomic add it calls: the strip of the self-check takes the atomic path)
    where = re.search(r"(READ|WRITE) of size 4 .*\n(?: +#[01] .*\n)* +#[0-2] \S+ in backproject_slab "
                      r"\S+/backproject\.cu:\d+", broken.stderr)
    assert where, broken.stderr[:3000]


FIBERS = r"""
// A block's sum through shared memory: a tree of halvings, a barrier after each.
extern "C" __global__ void block_sum(const int* __restrict__ in, int* __restrict__ out)
{
    __shared__ int part[256];
    const int t = threadIdx.x;
    part[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) part[t] += part[t + half];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = part[0];
}

// The same without its barriers: wrong on a GPU, and wrong here.
extern "C" __global__ void block_sum_racy(const int* __restrict__ in, int* __restrict__ out)
{
    __shared__ int part2[256];
    const int t = threadIdx.x;
    part2[t] = in[blockIdx.x * blockDim.x + t];
    for (int half = blockDim.x / 2; half > 0; half /= 2)
        if (t < half) part2[t] += part2[t + half];
    if (t == 0) out[blockIdx.x] = part2[0];
}

// Odd and even threads wait at different barriers.
extern "C" __global__ void divergent(int* __restrict__ out)
{
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

// A warp's sum by shuffles down.
extern "C" __global__ void warp_sum(const float* __restrict__ in, float* __restrict__ out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[i];
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % warpSize == 0) out[i / warpSize] = v;
}

// Lanes 0-15 read lanes 16-31, which skip the shuffle.
extern "C" __global__ void shuffle_half(int* __restrict__ out)
{
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffu, v, 16);
    out[threadIdx.x] = v;
}
"""


@pytest.fixture
def fibers(sources):
    sources("probe", FIBERS)
    lx = emulate.EmulatedLauncher(0, 1 << 24)
    return lx, lx.module("probe")


def test_barriers_and_shared_memory_give_the_block_sums(fibers):
    lx, mod = fibers
    assert "-DGPUMR_FIBERS" in emulate.host_flags("probe")
    data = np.random.default_rng(1).integers(-1000, 1000, 64 * 256).astype(np.int32)
    out = lx.zeros(64, np.int32)
    mod.get_function("block_sum")(lx.to_device(data), out, grid=(64, 1), block=(256, 1, 1))
    assert lx.to_host(out).tolist() == data.reshape(64, 256).sum(axis=1).tolist()


def test_a_missing_barrier_gives_a_wrong_sum_the_test_sees(fibers):
    lx, mod = fibers
    data = np.random.default_rng(2).integers(1, 1000, 8 * 256).astype(np.int32)
    out = lx.zeros(8, np.int32)
    mod.get_function("block_sum_racy")(lx.to_device(data), out, grid=(8, 1), block=(256, 1, 1))
    got, want = lx.to_host(out), data.reshape(8, 256).sum(axis=1)
    assert (got != want).all()


def test_threads_at_different_barriers_fail_the_launch(fibers):
    lx, mod = fibers
    with pytest.raises(emulate.LaunchError, match=r"divergent: block \(0, 0, 0\): threads wait at different "
                                                  r"__syncthreads \(lines \d+ and \d+\)"):
        mod.get_function("divergent")(lx.zeros(64, np.int32), grid=(1, 1), block=(64, 1, 1))


def test_warp_shuffles_sum_each_warp(fibers):
    lx, mod = fibers
    data = np.random.default_rng(3).standard_normal(4 * 128).astype(np.float32)
    out = lx.zeros(16, np.float32)
    mod.get_function("warp_sum")(lx.to_device(data), out, grid=(4, 1), block=(128, 1, 1))
    assert np.allclose(lx.to_host(out), data.reshape(16, 32).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_a_shuffle_reading_a_lane_not_taking_part_fails_the_launch(fibers):
    lx, mod = fibers
    with pytest.raises(emulate.LaunchError, match="shuffle_half: .*reads lane 16, which is not taking part"):
        mod.get_function("shuffle_half")(lx.zeros(32, np.int32), grid=(1, 1), block=(32, 1, 1))
