"""The same frames through a plain OpenCV loop, mrjob's local runner and real Hadoop (local mode).

All three use 2 processes / 2 map slots and OpenCV single-threaded:

* plain loop: 2 processes, each decoding and detecting half the frames
  (the baseline; start-up excluded);
* mrjob local runner: the face job over 2 shards (2 map tasks);
* Hadoop: the same job through ``-r hadoop`` on the local Hadoop in
  ``../shared/hadoop`` (LocalJobRunner, 2 map slots), whole files per task.

For each: frames/s, its share of the plain loop's frames/s, and the share of
the processor time of all its processes (``getrusage`` of the waited-for
children: JVM, Python tasks, sort) that went into face detection itself
(gpumr's ``CPU milliseconds`` counter, time inside the CPU detector). The
rest is start-up (JVM, Python and OpenCV imports per task), reading and
handing records over (streaming pipes, sort, shuffle) and mrjob's own work.

Usage: python bench/engines.py [--frames 480] [--repeat 3]   (Hadoop on PATH, else its row is skipped)
"""

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

from _common import frame_corpus, table

from gpumr.core import BAD, ON_CPU
from gpumr.core.counters import CPU_MS
from gpumr.io.packing import pack
from gpumr.jobs.face_detect import MRFaceDetect
from gpumr.launch.job import run_job


def _loop(paths):
    import cv2
    import numpy as np

    from gpumr.faces.cpu import detect, load_cascade
    cv2.setNumThreads(1)
    clf = load_cascade()
    blobs = [np.fromfile(p, np.uint8) for p in paths]
    t0, c0 = time.perf_counter(), time.process_time()
    for b in blobs:
        detect(clf, cv2.imdecode(b, cv2.IMREAD_GRAYSCALE))
    return time.perf_counter() - t0, time.process_time() - c0


def plain(paths):
    with mp.get_context("spawn").Pool(2) as pool:
        res = pool.map(_loop, [paths[0::2], paths[1::2]])
    return max(t for t, _ in res), sum(c for _, c in res)


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def job(seq, out, runner):
    """(seconds, counters, processor seconds of all the job's processes)."""
    from hadoop import cluster
    c0 = _children_cpu()
    if runner == "hadoop":
        t0 = time.perf_counter()
        run = cluster.run(MRFaceDetect, [seq, "--device", "cpu"], out, "bench")
        seconds, counters = time.perf_counter() - t0, run.counters
    else:
        counters, seconds = run_job(MRFaceDetect, [seq], os.path.join(out, "out"), runner, ["--device", "cpu"])
    return seconds, counters, _children_cpu() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=480)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from hadoop import cluster
    why = cluster.unavailable()
    work = tempfile.mkdtemp(prefix="gpumr-engines-bench-")
    try:
        paths = frame_corpus(work, count=args.frames)
        seq = os.path.join(work, "seq")
        pack([os.path.dirname(paths[0])], seq, shards=2, progress=False)
        n = args.frames
        results = {"plain": [], "local": [], "hadoop": []}
        for i in range(args.repeat):
            results["plain"].append(plain(paths) + ({CPU_MS: None},))
            for runner in ("local",) + (() if why else ("hadoop",)):
                out = os.path.join(work, f"{runner}-{i}")
                os.makedirs(out)
                seconds, counters, cpu = job(seq, out, runner)
                assert counters.get(ON_CPU, 0) + counters.get(BAD, 0) == n, counters
                results[runner].append((seconds, cpu, counters))
        base = min(t for t, _, _ in results["plain"])
        rows = []
        for name, label in (("plain", "plain OpenCV loop, 2 processes"), ("local", "gpumr job, mrjob local runner"),
                            ("hadoop", "gpumr job, Hadoop local mode")):
            runs = results[name]
            if not runs:
                rows.append([label, "-", "-", "-", "-", "-", why or ""])
                continue
            times = [t for t, _, _ in runs]
            best = min(runs, key=lambda r: r[0])
            t, cpu, counters = best
            detect_s = counters[CPU_MS] / 1000 if counters.get(CPU_MS) is not None else cpu
            rows.append([label, f"{min(times):.1f}", f"{statistics.median(times):.1f}", f"{n / min(times):.1f}",
                         f"{base / min(times):.3f}", f"{cpu:.1f}", f"{detect_s / cpu:.0%}"])
        table(f"face detection, {n} frames 640x480, 2 processes / 2 map slots, best of {args.repeat} "
              f"(CPU milliseconds counter vs processor time of all processes)",
              ["what", "min s", "median s", "frames/s", "share of plain", "CPU s", "in detection"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
