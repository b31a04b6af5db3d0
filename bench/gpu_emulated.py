"""The GPU paths on a simulated GPU (CUDA kernels executed on the host), against the CPU paths in the same run.

What a test pays for running the real GPU path without a GPU:

* faces: ``FaceGPU.run`` on 640x480 sample frames in batches of 16 (the
  host-side pyramid, the emulated kernels on all cores), after the set-up
  and self-check; baseline: OpenCV's ``detectMultiScale``, one thread;
* CT: ``SlabBackprojector.run`` on one slab (projections already on the
  emulated device); baseline: the numba CPU backprojector (all cores) on the
  same slab;
* the one-off costs: building both kernels for the host (an empty cache),
  and a device's set-up and self-check.

Usage: python bench/gpu_emulated.py [--frames 32] [--voxels 128] [--angles 180] [--slab 32]
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
from _common import frame_corpus, table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--voxels", type=int, default=128)
    ap.add_argument("--angles", type=int, default=180)
    ap.add_argument("--slab", type=int, default=32)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-emu-bench-")
    os.environ["GPUMR_KERNEL_CACHE"] = os.path.join(work, "kernels")  # an empty cache: the build is timed
    try:
        import cv2

        from gpumr.ct import geometry
        from gpumr.ct.backproject import backproject, pad
        from gpumr.ct.backproject_gpu import SlabBackprojector
        from gpumr.devices.nvml import simulated_gpus
        from gpumr.faces.cpu import cascade_path, detect, load_cascade
        from gpumr.faces.gpu import FaceGPU
        from gpumr.gpu import emulate, kernels, launch

        t0 = time.perf_counter()
        for name in kernels.KERNELS:
            emulate.build(name)
        t_build = time.perf_counter() - t0
        gpu = simulated_gpus("1")[0]
        threads = launch.launcher(gpu).threads

        paths = frame_corpus(work, count=args.frames, distinct=min(args.frames, 32))
        grays = [cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths]
        fg = FaceGPU(cascade_path())
        t0 = time.perf_counter()
        fg.run(grays[:1], gpu)  # set-up and self-check
        t_face_setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(0, len(grays), 16):
            fg.run(grays[i:i + 16], gpu)
        t_emu = (time.perf_counter() - t0) / len(grays)
        cv2.setNumThreads(1)
        clf = load_cascade()
        t0 = time.perf_counter()
        for g in grays:
            detect(clf, g)
        t_cv = (time.perf_counter() - t0) / len(grays)

        n, na, slab = args.voxels, args.angles, min(args.slab, args.voxels)
        g = geometry.simple(n, na, n_detector=n)
        q = np.random.default_rng(0).standard_normal((na, n, n), dtype=np.float32)
        padded = pad(q)
        bp = SlabBackprojector(padded, g)
        t0 = time.perf_counter()
        bp.state(gpu)  # upload and self-check
        t_ct_setup = time.perf_counter() - t0
        z0 = n // 2 - slab // 2
        t0 = time.perf_counter()
        (emu_slab,) = bp.run([(z0, z0 + slab)], gpu)
        t_emu_slab = time.perf_counter() - t0
        backproject(None, g, 0, 1, padded=padded)  # numba's compiled kernel loaded
        t0 = time.perf_counter()
        cpu_slab = backproject(None, g, z0, z0 + slab, padded=padded)
        t_cpu_slab = time.perf_counter() - t0
        err = np.linalg.norm(emu_slab - cpu_slab) / np.linalg.norm(cpu_slab)

        rows = [["face detection, s per 640x480 frame", f"{t_emu:.3f}", f"{t_cv:.3f}", f"{t_emu / t_cv:.2f}"],
                [f"backprojection, s per slab of {slab}x{n}x{n}, {na} angles", f"{t_emu_slab:.2f}",
                 f"{t_cpu_slab:.2f}", f"{t_emu_slab / t_cpu_slab:.2f}"]]
        table(f"emulated GPU ({threads} host threads) vs the CPU path", ["what", "emulated", "CPU", "ratio"], rows)
        table("one-off costs (s)", ["what", "s"], [["build both kernels for the host", f"{t_build:.1f}"],
                                                   ["face device set-up + self-check", f"{t_face_setup:.1f}"],
                                                   ["CT device set-up + self-check", f"{t_ct_setup:.1f}"]])
        print(f"\nslab relative L2 to the CPU: {err:.1e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
