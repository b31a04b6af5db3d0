"""GPU face detection: frames/s of the batched kernel path, OpenCV on the CPU, and the mixed job.

Same run, 640x480 sample frames:

* GPU kernel path: ``FaceGPU.run`` on batches of decoded grey frames (the
  CPU-side pyramid resize included, in its thread pool);
* CPU: OpenCV ``detectMultiScale`` on one core, and on all cores (processes),
  each on a sample of the frames (:data:`CPU_SAMPLE`), scaled;
* jobs (local runner, one map task per core): ``--device cpu``,
  ``--device gpu`` and ``--device auto``; the target is auto >= 0.95 x
  (cpu + gpu).

Usage: python bench/face_gpu.py [--frames 2000] [--batch 64] [--skip-jobs] [--devices cpu gpu auto] [--emulate]
(``--emulate``: a simulated GPU, the kernels on the host: the paths run, no GPU's time is measured)
"""

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time

from _common import frame_corpus, table

from gpumr.devices.nvml import discover

#: Frames OpenCV runs on one core (half as many per core on all of them); its rates are scaled to the frames.
CPU_SAMPLE = 50


def _cpu_worker(paths):
    import cv2

    from gpumr.faces.cpu import detect, load_cascade
    cv2.setNumThreads(1)
    clf = load_cascade()
    grays = [cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths]
    t0 = time.perf_counter()
    for g in grays:
        detect(clf, g)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--skip-jobs", action="store_true")
    ap.add_argument("--devices", nargs="+", default=["cpu", "gpu", "auto"], choices=["cpu", "gpu", "auto"],
                    help="the jobs run, by --device (default all three)")
    ap.add_argument("--emulate", action="store_true", help="a simulated GPU (the kernels on the host; no GPU's time)")
    args = ap.parse_args()
    if args.emulate:
        os.environ["GPUMR_SIMULATE_GPUS"] = "1"  # (the jobs' tasks too)
    import cv2

    from gpumr.faces.cpu import cascade_path
    from gpumr.faces.gpu import FaceGPU
    from gpumr.io.packing import pack
    from gpumr.jobs.face_detect import MRFaceDetect
    from gpumr.launch.job import run_job
    gpus = discover().gpus
    if not gpus:
        raise SystemExit("no NVIDIA GPU here")
    gpu = gpus[0]
    work = tempfile.mkdtemp(prefix="gpumr-facegpu-")
    try:
        paths = frame_corpus(work, count=args.frames, distinct=128)
        src = os.path.dirname(paths[0])
        grays = [cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths]
        fg = FaceGPU(cascade_path())
        fg.run(grays[:args.batch], gpu)  # warm-up, kernels loaded, self-check done
        t0 = time.perf_counter()
        for i in range(0, len(grays), args.batch):
            fg.run(grays[i:i + args.batch], gpu)
        t_gpu = time.perf_counter() - t0
        n = len(grays)
        # OpenCV on a sample, scaled to n (a whole run on one core would spend the GPU lease: docs/lab-notes/code-figures.rst)
        one = paths[:min(CPU_SAMPLE, n)]
        t_cpu1 = _cpu_worker(one) * n / len(one)
        cores = os.cpu_count()
        every = paths[:min(n, cores * CPU_SAMPLE // 2)]
        with mp.get_context("spawn").Pool(cores) as pool:
            t_all = max(pool.map(_cpu_worker, [every[i::cores] for i in range(cores)])) * n / len(every)
        print(f"so far: GPU kernel path {n / t_gpu:.0f} fps; OpenCV 1 core {n / t_cpu1:.1f}, {cores} processes "
              f"{n / t_all:.0f}", flush=True)
        rows = [["GPU kernel path (batched)", f"{n / t_gpu:.0f}"],
                ["OpenCV, 1 core", f"{n / t_cpu1:.1f}"],
                [f"OpenCV, {cores} processes", f"{n / t_all:.0f}"]]
        if not args.skip_jobs:
            seq = os.path.join(work, "seq")
            pack([src], seq, shards=cores, progress=False)
            fps = {}
            for dev in args.devices:
                _, t = run_job(MRFaceDetect, [seq], os.path.join(work, f"out-{dev}"), "local",
                                    ["--device", dev, "--gpu-slots", "2"])
                fps[dev] = n / t
                print(f"so far: job --device {dev}: {fps[dev]:.0f} fps ({t:.1f} s)", flush=True)
                rows.append([f"job --device {dev} (local runner, {cores} tasks)", f"{fps[dev]:.0f}"])
            if len(fps) == 3:
                rows.append(["auto / (cpu + gpu)", f"{fps['auto'] / (fps['cpu'] + fps['gpu']):.2f}"])
        table(f"face detection, {n} frames 640x480, {gpu.name}{' (EMULATED: no GPU time)' if args.emulate else ''}",
              ["what", "frames/s"], rows)
        print(f"\nGPU kernel path / OpenCV 1 core: {t_cpu1 / t_gpu:.1f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
