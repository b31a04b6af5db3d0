"""End to end, as a user waits for it: the gpumr jobs against the plainest program that does the same work.

Every figure is a whole command timed from outside (start-up, imports,
reading the inputs, writing the result), A and B in turn, medians of
``--repeat`` pairs, with the ratio B/A (1.0: as fast as the plain program;
over 1: faster):

* CT: ``gpumr run backproject`` then ``gpumr ct assemble`` to one .npy,
  against ``gpumr ct reconstruct`` of the same projections (one process,
  every core); the two volumes' relative L2 difference, the job's output
  on disk against the raw float32 volume, and what the job's chain adds in
  seconds (its fixed costs, beside the allowance a ratio of 0.95 leaves and
  a bare Python's start with numpy: the chain starts three, reconstruct one).
* Faces: ``gpumr run faces`` over packed frames against a plain 2-process
  OpenCV loop over the same JPEG files (decode and detect, start-up
  included).

Usage: python bench/end_to_end.py [--voxels 256] [--angles 360] [--frames 480] [--engines local dask] [--repeat 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import frame_corpus, table

PY = sys.executable
PLAIN = r"""
import multiprocessing as mp, sys, time
def loop(paths):
    import cv2, numpy as np
    from gpumr.faces.cpu import detect, load_cascade
    cv2.setNumThreads(1)
    clf = load_cascade()
    return sum(len(detect(clf, cv2.imdecode(np.fromfile(p, np.uint8), cv2.IMREAD_GRAYSCALE))) for p in paths)
if __name__ == "__main__":
    paths = sys.argv[1:]
    with mp.get_context("spawn").Pool(2) as pool:
        print(sum(pool.map(loop, [paths[0::2], paths[1::2]])))
"""


def timed(cmd, cwd):
    """Seconds the command took, whole; it must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd[:6]))} ...: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return seconds


def extra(base, runs):
    """The median of the rounds' differences ``runs[i] - base[i]``, seconds: what the job's chain of commands adds
    to the plain program's time (its fixed costs: processes started, modules imported, results joined)."""
    return statistics.median(r - b for b, r in zip(base, runs))


def ratios(base, runs):
    """Each round's ratio ``base[i] / runs[i]`` (over 1: the round's job was faster than its plain program)."""
    return [b / r for b, r in zip(base, runs)]


def paired(base, runs):
    """The median of the rounds' :func:`ratios`: each round's two commands ran one after the other, so a machine
    whose speed drifts between rounds (as a shared one's does within minutes) moves both alike."""
    return statistics.median(ratios(base, runs))


def spread(values, digits=3, unit=""):
    """The spread behind a median, ``"lo-hi"``: the rounds' :func:`ratios`, or a baseline's seconds. On a shared
    machine the same command's time drifts within half an hour (docs/lab-notes/code-figures.rst): a ratio whose
    rounds spread says so, where its median alone would not."""
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}{unit}"


def gpumr(*args):
    return [PY, "-m", "gpumr", *map(str, args)]


def du(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def ct(work, voxels, angles, engines, repeat, slab):
    timed(gpumr("ct", "geometry", "-o", "g.json", "--voxels", voxels, "--angles", angles), work)
    timed(gpumr("ct", "phantom", "--geometry", "g.json", "-o", "proj.seq", "-q"), work)
    runs = {e: [] for e in ["direct", *engines]}
    parts = {e: [] for e in engines}
    starts = []  # a bare Python with numpy: the job's chain starts three (launcher, task, assembly), reconstruct one
    for i in range(repeat):
        starts.append(timed([PY, "-c", "import numpy"], work))
        runs["direct"].append(timed(gpumr("ct", "reconstruct", "proj.seq", "-o", f"direct{i}.npy"), work))
        for engine in engines:
            out, vol = f"out-{engine}{i}", f"vol-{engine}{i}.npy"
            job = timed(gpumr("run", "backproject", "--projections", "proj.seq", "--slab", slab, "-o", out,
                              "--engine", engine, "--device", "cpu", "-q"), work)  # (each engine's defaults)
            assemble = timed(gpumr("ct", "assemble", out, "-o", vol, "-q"), work)
            runs[engine].append(job + assemble)
            parts[engine].append((job, assemble))
    direct = np.load(os.path.join(work, "direct0.npy"))
    base = statistics.median(runs["direct"])
    rows = [["gpumr ct reconstruct (one process)", f"{base:.2f}", "-", "-", "-", "1.000",
             spread(runs["direct"], 2, " s"), "-", "-"]]
    for engine in engines:
        vol = np.load(os.path.join(work, f"vol-{engine}0.npy"))
        rel = float(np.linalg.norm(vol - direct) / np.linalg.norm(direct))
        size = du(os.path.join(work, f"out-{engine}0")) / direct.nbytes
        job = statistics.median(j for j, _ in parts[engine])
        assemble = statistics.median(a for _, a in parts[engine])
        total = statistics.median(runs[engine])
        rows.append([f"gpumr run backproject --engine {engine} + ct assemble", f"{total:.2f}", f"{job:.2f}",
                     f"{assemble:.2f}", f"{extra(runs['direct'], runs[engine]):+.2f}",
                     f"{paired(runs['direct'], runs[engine]):.3f}", spread(ratios(runs["direct"], runs[engine])),
                     f"{rel:.1e}", f"{size:.3f}x"])
    table(f"CT {voxels}^3 from {angles} projections, slab {slab}, CPU, medians of {repeat} (extra: the median of "
          "each round's job + assemble time less its reconstruct time; ratio: the median of each round's "
          "reconstruct time over its job's; rounds: the lowest and highest round's ratio, or reconstruct's seconds; "
          "size: the job's output over the raw float32 volume)",
          ["what", "s", "job s", "assemble s", "extra s", "ratio", "rounds", "rel L2", "size"], rows)
    print(f"a ratio of 0.95 leaves the job {base * (1 / 0.95 - 1):.2f} s more than reconstruct's {base:.2f} s; "
          f"a Python with numpy starts in {statistics.median(starts):.2f} s (the job's chain starts three: "
          "launcher, task, assembly; reconstruct one)")


def faces(work, count, engines, repeat):
    paths = frame_corpus(work, count=count)
    with open(os.path.join(work, "plain.py"), "w") as f:
        f.write(PLAIN)
    timed(gpumr("pack", os.path.dirname(paths[0]), "-o", "frames.seq", "--shards", "2", "-q"), work)
    runs = {e: [] for e in ["plain", *engines]}
    for i in range(repeat):
        runs["plain"].append(timed([PY, "plain.py", *paths], work))
        for engine in engines:
            extra = ["--workers", "2"] if engine == "dask" else []
            runs[engine].append(timed(gpumr("run", "faces", "frames.seq", "-o", f"faces-{engine}{i}", "--engine",
                                            engine, "--device", "cpu", "-q", *extra), work))
    base = statistics.median(runs["plain"])
    rows = [["plain OpenCV loop, 2 processes", f"{base:.2f}", f"{count / base:.1f}", "1.000",
             spread(runs["plain"], 2, " s")]]
    for engine in engines:
        t = statistics.median(runs[engine])
        rows.append([f"gpumr run faces --engine {engine}", f"{t:.2f}", f"{count / t:.1f}",
                     f"{paired(runs['plain'], runs[engine]):.3f}", spread(ratios(runs["plain"], runs[engine]))])
    table(f"faces, {count} frames 640x480, CPU, 2 processes, medians of {repeat}, start-up included (ratio: the "
          "median of each round's plain-loop time over its job's; rounds: the lowest and highest round's ratio, or "
          "the plain loop's seconds)", ["what", "s", "frames/s", "ratio", "rounds"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voxels", type=int, default=256)
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--slab", type=int, default=32)
    ap.add_argument("--frames", type=int, default=480)
    ap.add_argument("--engines", nargs="+", default=["local", "dask"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("ct", "faces"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-e2e-")
    try:
        if args.only != "faces":
            ct(work, args.voxels, args.angles, args.engines, args.repeat, args.slab)
        if args.only != "ct":
            faces(work, args.frames, args.engines, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
