"""Both jobs on the Spark cluster (``sc``, conftest) with ``--device gpu`` on its simulated GPUs.

Each executor runs the GPU paths with their CUDA kernels executed on the host:
the output must equal ``--device cpu``'s but for where it ran, every record
counted on the GPU Spark assigned, none falling back.
"""

import json
import os

import numpy as np
import pytest
from conftest import ASSIGNED, ct_phantom, run_spark

from gpumr.cli import main
from gpumr.io.packing import pack
from gpumr.launch.job import run_job

pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (the dev extra)")
pytestmark = pytest.mark.slow


def values_of(out_dir):
    lines = [line for name in sorted(os.listdir(out_dir)) if name.startswith("part-")
             for line in open(os.path.join(out_dir, name), encoding="utf-8").read().splitlines()]
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t", 1) for line in lines)}


@pytest.fixture(autouse=True)
def simulated_here(monkeypatch):
    """The executors run on this machine with 4 simulated GPUs (``sc``); the driver, which checks
    ``--device gpu`` against this machine before any task, sees the same."""
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "4")


def test_faces_device_gpu_equal_device_cpu(sc, sample_frames, tmp_path):
    from gpumr.jobs.face_detect import MRFaceDetect
    packed = str(tmp_path / "packed")
    pack([sample_frames], packed, shards=2, progress=False)
    run_job(MRFaceDetect, [packed], str(tmp_path / "cpu"), "inline", ["--device", "cpu"])
    counts, _ = run_spark("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "1MiB", "--device", "gpu"],
                          sc=sc)
    got, want = values_of(str(tmp_path / "out")), values_of(str(tmp_path / "cpu"))
    assert got.keys() == want.keys() and len(got) == 12
    assert {v.pop("device") for v in got.values()} <= {f"gpu:{a}" for a in ASSIGNED}
    assert all(v.pop("simulated") is True for v in got.values())
    assert got == {k: {f: x for f, x in v.items() if f != "device"} for k, v in want.items()}
    assert counts["records on GPU"] == 12 and not counts.get("records on CPU") and not counts.get("GPU fallbacks")


def test_ct_device_gpu_equals_the_cpu_reconstruction(sc, tmp_path):
    d = tmp_path
    projections, direct = ct_phantom(d, 24, 36, name="gpu-proj")
    counts, _ = run_spark("backproject", ["--projections", projections, "--slab", "10", "-o", str(d / "out"),
                                    "--device", "gpu"], sc=sc)
    assert counts["records on GPU"] == 3 and not counts.get("records on CPU") and not counts.get("GPU fallbacks")
    values = values_of(str(d / "out")).values()
    assert len(values) == 3 and all(v["simulated"] and v["device"] in {f"gpu:{a}" for a in ASSIGNED}
                                     for v in values)
    assert main(["ct", "assemble", str(d / "out"), "-o", str(d / "vol.npy")]) == 0
    vol = np.load(d / "vol.npy")
    assert np.linalg.norm(vol - direct) / np.linalg.norm(direct) < 1e-5
