"""``gpumr run blobs``: scikit-image's blob_log on every record, on the CPU and on (simulated) GPUs.

The photos are scikit-image's sample images, cropped small and packed
(``skimage_photos`` in conftest); each expected answer is ``blob_log`` called
directly on ``rgb2gray`` of the decoded photo. The GPU path's scale-space
cube (``cuda/blobs.cu``, run on the host by the emulating launcher) must
equal scipy's bit for bit, and its blobs the CPU's.
"""

import json
import os

import numpy as np
import pytest
from conftest import lines_of, run_workload, skimage_gray

from gpumr.cli import main

SEED_004 = dict(max_sigma=30, num_sigma=10, threshold=0.1)


def results(out):
    """``{key: value}`` of a job's output lines."""
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t") for line in lines_of(str(out)))}


def direct(folder, **kw):
    """``{photo: blob_log(rgb2gray(photo), **kw) as a list}`` for every photo of ``folder``."""
    from skimage.feature import blob_log
    return {name: blob_log(skimage_gray(os.path.join(folder, name)), **kw).tolist() for name in os.listdir(folder)}


def test_blobs_equal_blob_log_called_directly(skimage_photos, tmp_path):
    seq, folder = skimage_photos
    counts, _ = run_workload("blobs", [seq, "-o", str(tmp_path / "out"), "--device", "cpu"])
    assert counts["records on CPU"] == len(os.listdir(folder)) and not counts.get("bad records")
    got, want = results(tmp_path / "out"), direct(folder, **SEED_004)
    assert {k: v["blobs"] for k, v in got.items()} == want
    assert all(v["device"] == "cpu" for v in got.values())
    assert sum(len(b) for b in want.values()) > 20  # (the photos have blobs to find)


def test_every_option_reaches_blob_log(skimage_photos, tmp_path):
    seq, folder = skimage_photos
    run_workload("blobs", [seq, "-o", str(tmp_path / "out"), "--device", "cpu", "--min-sigma", "2", "--max-sigma",
                           "12", "--num-sigma", "4", "--threshold", "0.05", "--overlap", "0.2", "--log-scale"])
    want = direct(folder, min_sigma=2, max_sigma=12, num_sigma=4, threshold=0.05, overlap=0.2, log_scale=True)
    assert {k: v["blobs"] for k, v in results(tmp_path / "out").items()} == want
    assert want != direct(folder, **SEED_004)


@pytest.mark.parametrize("args, said", [
    (["--num-sigma", "0"], "--num-sigma must be a whole number from 1 to 100, not 0"),
    (["--max-sigma", "0"], "--max-sigma must be a number over 0 and at most 500, not 0.0"),
    (["--overlap", "1.5"], "--overlap must be a number from 0 to 1, not 1.5"),
    (["--threshold", "nan"], "--threshold must be a number from 0 to 1e+06, not nan"),
    (["--num-sigma", "100", "--max-pixels", "100000000"], "--max-pixels 100,000,000 with --num-sigma 100: one image's "
     "scale space: 83,200,000,000 bytes, over the limit of 17,179,869,184 (see: gpumr help over-a-limit)"),
])
def test_options_out_of_their_limits_are_one_line(skimage_photos, tmp_path, capsys, args, said):
    assert main(["run", "blobs", skimage_photos[0], "-o", str(tmp_path / "out"), *args]) == 1
    assert capsys.readouterr().err == f"gpumr: error: {said}\n"
    assert not os.path.exists(tmp_path / "out")


def test_the_kernels_cube_is_scipys_bit_for_bit(skimage_photos, emulated_kernels):
    """Lines shorter than the largest kernel (the reflections repeat), the photos, linear and log scales."""
    from gpumr.blobs.gpu import LoGCube, check_image
    from gpumr.blobs.scalespace import log_cube, sigmas
    from gpumr.devices.nvml import simulated_gpus
    gpu = simulated_gpus("1")[0]
    images = [check_image(), np.random.default_rng(1).random((9, 40)),
              skimage_gray(os.path.join(skimage_photos[1], "hubble_deep_field.png"))]
    for scales in (sigmas(1, 30, 10, False), sigmas(0.5, 7, 3, True)):
        cube = LoGCube(scales)
        for image in images:
            got, want = cube.run(image, gpu), log_cube(image, scales)
            assert got.shape == want.shape == image.shape + (len(scales),)
            assert np.array_equal(got, want), np.abs(got - want).max()


def test_gpu_path_equals_the_cpu_under_the_emulator(skimage_photos, tmp_path, monkeypatch, emulated_kernels):
    seq, folder = skimage_photos
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counts, _ = run_workload("blobs", [seq, "-o", str(tmp_path / "gpu"), "--device", "gpu"])
    assert counts["records on GPU"] == len(os.listdir(folder)) and not counts.get("GPU fallbacks"), counts
    got = results(tmp_path / "gpu")
    assert {k: v["blobs"] for k, v in got.items()} == direct(folder, **SEED_004)
    assert all(v["device"] == "gpu:0" and v["simulated"] is True for v in got.values())


def test_a_kernel_that_differs_from_scipy_is_never_trusted(skimage_photos, tmp_path, monkeypatch, altered_kernel,
                                                          emulated_kernels):
    """The self-check catches a kernel off by one part in 1e7: every record falls back to the CPU, counted."""
    seq, folder = skimage_photos
    altered_kernel("blobs", "acc += pair * __ldg(w + k);", "acc += pair * __ldg(w + k) * 1.0000001;")
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counts, _ = run_workload("blobs", [seq, "-o", str(tmp_path / "out")])
    n = len(os.listdir(folder))
    assert counts["records on CPU"] == counts["GPU fallbacks"] == n and not counts.get("records on GPU"), counts
    assert {k: v["blobs"] for k, v in results(tmp_path / "out").items()} == direct(folder, **SEED_004)


def test_blobs_on_dask_workers_gpus(dask_client, skimage_photos, tmp_path):
    """The workers' simulated GPUs take every record; the blobs are blob_log's."""
    seq, folder = skimage_photos
    counts, _ = run_workload("blobs", [seq, "-o", str(tmp_path / "out"), "--device", "gpu"], "dask", dask_client)
    assert counts["records on GPU"] == len(os.listdir(folder)), counts
    got = results(tmp_path / "out")
    assert {k: v["blobs"] for k, v in got.items()} == direct(folder, **SEED_004)
    assert {v["device"] for v in got.values()} <= {"gpu:0", "gpu:1"}


def test_the_kernel_is_shipped_and_declares_no_fused_multiply_add(tmp_path):
    """Named nowhere but by its file: the shipped kernels are the installed .cu files, each declaring its flags."""
    from gpumr.gpu import emulate, kernels
    assert "blobs" in kernels.KERNELS and kernels.FLAGS["blobs"] == ["-fmad=false"]
    assert "-ffp-contract=fast" not in emulate.host_flags("blobs")
    own = tmp_path / "own.cu"  # a user's kernel declares its flags the same way
    own.write_text('// nvcc: -fmad=false -lineinfo (why: rounding)\nextern "C" __global__ void k(int* p) { *p = 1; }\n')
    assert kernels.flags(str(own)) == ["-fmad=false", "-lineinfo"]
    own.write_text('extern "C" __global__ void k(int* p) { *p = 1; }\n')
    assert kernels.flags(str(own)) == [] and "-ffp-contract=fast" in emulate.host_flags(str(own))
