"""Frames/s of the face-detection job against a plain OpenCV loop, same run.

The job runs under mrjob's local runner with 2 map tasks (2 input shards)
over enough frames to run about a minute. Baselines, 2 processes each with
half the frames, OpenCV single-threaded as in the job:

* detect: ``detectMultiScale`` over frames decoded beforehand (the strict one);
* decode+detect: the same loop also decoding the JPEG bytes, as the job must.

Usage: python bench/face_throughput.py [--frames 1200]
"""

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time

from _common import frame_corpus, table

from gpumr.core import BAD, ON_CPU, ON_GPU
from gpumr.io.packing import pack
from gpumr.jobs.face_detect import MRFaceDetect
from gpumr.launch.job import run_job


def _loop(args):
    paths, decode_first = args
    import cv2
    import numpy as np

    from gpumr.faces.cpu import detect, load_cascade
    cv2.setNumThreads(1)
    clf = load_cascade()
    blobs = [np.fromfile(p, np.uint8) for p in paths]
    grays = [cv2.imdecode(b, cv2.IMREAD_GRAYSCALE) for b in blobs] if decode_first else None
    t0 = time.perf_counter()
    n = 0
    for i in range(len(blobs)):
        gray = grays[i] if decode_first else cv2.imdecode(blobs[i], cv2.IMREAD_GRAYSCALE)
        n += len(detect(clf, gray))
    return time.perf_counter() - t0, n


def baseline(paths, decode_first):
    halves = [paths[0::2], paths[1::2]]
    with mp.get_context("spawn").Pool(2) as pool:
        t0 = time.perf_counter()
        res = pool.map(_loop, [(h, decode_first) for h in halves])
        wall = time.perf_counter() - t0
    # Wall time of the slower worker, setup excluded.
    return max(t for t, _ in res), sum(n for _, n in res), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1200)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-face-bench-")
    try:
        paths = frame_corpus(work, count=args.frames)
        seq = os.path.join(work, "seq")
        pack([os.path.dirname(paths[0])], seq, shards=2, progress=False)

        t_detect, faces_a, _ = baseline(paths, decode_first=True)
        t_both, faces_b, _ = baseline(paths, decode_first=False)
        counters, t_job = run_job(MRFaceDetect, [seq], os.path.join(work, "out"), "local", ["--device", "cpu"])
        done = counters.get(ON_CPU, 0) + counters.get(ON_GPU, 0) + counters.get(BAD, 0)
        assert done == args.frames, f"job processed {done} of {args.frames} records"
        n = args.frames
        table(f"face detection, {n} frames 640x480, 2 processes / 2 map tasks",
              ["what", "seconds", "frames/s", "job / this"],
              [["plain OpenCV loop: detect (pre-decoded)", f"{t_detect:.1f}", f"{n / t_detect:.1f}",
                f"{t_detect / t_job:.3f}"],
               ["plain OpenCV loop: decode + detect", f"{t_both:.1f}", f"{n / t_both:.1f}",
                f"{t_both / t_job:.3f}"],
               ["gpumr job, mrjob local runner (whole job)", f"{t_job:.1f}", f"{n / t_job:.1f}", "1.000"]])
        print(f"\njob reaches {t_detect / t_job:.3f} of the strict baseline, {t_both / t_job:.3f} of decode+detect "
              f"({faces_a} faces per pass)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
