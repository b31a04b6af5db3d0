"""What capturing fd 2 per record costs (:mod:`gpumr.tasks.stderr`): the block alone, and a job's records.

Same run, rounds interleaved, medians:

* a block: ``with captured()`` around nothing (fd 2 pointed at the private
  file and back, what was written read), against an empty ``with`` block;
* a job's records: ``gpumr run faces`` over ``--frames`` sample frames on
  the inline engine (``--device cpu``, ``-q``), each record's decode,
  computation and finish in their blocks (as shipped: three per record),
  against the same job with the task runtime's :class:`~gpumr.tasks.runtime.Said`
  taken out (each record as before); and the same with ``blobs``, whose
  records are tiny (a 64x64 PNG each), where a per-record cost shows most.

Usage: python bench/record_stderr.py [--frames 200] [--rounds 5] [--blocks 100000]
"""

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time

from _common import table


def blocks(n):
    """Seconds per block: ``(captured, empty)``."""
    from gpumr.tasks.stderr import captured
    out = []
    for block in (captured, contextlib.nullcontext):
        t0 = time.perf_counter()
        for _ in range(n):
            with block():
                pass
        out.append((time.perf_counter() - t0) / n)
    return out


def inputs(work, frames):
    """``{workload: SequenceFile}``: sample frames (faces), small PNGs (blobs)."""
    import cv2
    import numpy as np

    from gpumr.faces.sample import make_frames
    from gpumr.io.packing import pack
    make_frames(os.path.join(work, "frames"), count=frames)
    pack([os.path.join(work, "frames")], os.path.join(work, "frames.seq"), progress=False)
    os.makedirs(os.path.join(work, "pngs"))
    rng = np.random.default_rng(0)
    for i in range(frames):
        cv2.imwrite(os.path.join(work, "pngs", f"p{i:05d}.png"), (rng.random((64, 64)) * 255).astype(np.uint8))
    pack([os.path.join(work, "pngs")], os.path.join(work, "pngs.seq"), progress=False)
    return {"faces": os.path.join(work, "frames.seq"), "blobs": os.path.join(work, "pngs.seq")}


def job(workload, seq, out, capture):
    """Seconds of one inline job, each record's code in its blocks (``capture``) or as before."""
    from gpumr.launch.job import launch
    from gpumr.tasks import runtime
    shipped = runtime.Said
    runtime.Said = shipped if capture else (lambda workload: workload)
    shutil.rmtree(out, ignore_errors=True)
    proof = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.gpumr")
    if os.path.exists(proof):
        os.unlink(proof)
    try:
        t0 = time.perf_counter()
        launch([workload, seq, "-o", out, "--engine", "inline", "--no-conf", "--device", "cpu", "-q"])
        return time.perf_counter() - t0
    finally:
        runtime.Said = shipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200, help="records per job (default 200)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=100_000, help="blocks timed alone (default 100,000)")
    a = ap.parse_args()
    captured_s, empty_s = blocks(a.blocks)
    table(f"one block, mean of {a.blocks:,}", ["block", "microseconds"],
          [("with captured()", f"{captured_s * 1e6:.2f}"), ("empty with", f"{empty_s * 1e6:.2f}")])
    work = tempfile.mkdtemp(prefix="gpumr-bench-stderr-")
    try:
        seqs = inputs(work, a.frames)
        rows = []
        for workload, seq in seqs.items():
            out = os.path.join(work, f"out-{workload}")
            job(workload, seq, out, True)  # (imports, page cache)
            times = {True: [], False: []}
            for _ in range(a.rounds):
                for capture in (False, True):
                    times[capture].append(job(workload, seq, out, capture))
            before, now = statistics.median(times[False]), statistics.median(times[True])
            rows.append((workload, f"{before:.3f}", f"{now:.3f}", f"{(now - before) / a.frames * 1e6:+.0f}",
                         f"{now / before:.3f}"))
        table(f"a job of {a.frames} records on --engine inline, medians of {a.rounds}",
              ["workload", "before s", "captured s", "per record us", "ratio"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
