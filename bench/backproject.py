"""GUPS of the CPU backprojector, the numpy reference in the same run, and the whole job's time split.

GUPS = voxels x projections / backprojection seconds. The fast backprojector
runs on 256^3 from 360 projections of 256x256 (all cores, slabs of 32
slices, as the job runs it); the plain numpy reference is timed on a smaller
case and compared per update. The job (local runner, 2 map tasks) runs the
same case end to end.

Usage: python bench/backproject.py [--voxels 256] [--angles 360]
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
from _common import table

from gpumr.ct import geometry, phantom
from gpumr.ct.backproject import backproject, backproject_reference, pad, threads
from gpumr.ct.fdk import filter_projections
from gpumr.ct.projections import read_set, write_set


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voxels", type=int, default=256)
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--slab", type=int, default=32)
    args = ap.parse_args()
    n, na = args.voxels, args.angles
    work = tempfile.mkdtemp(prefix="gpumr-bp-bench-")
    try:
        g = geometry.simple(n, na, n_detector=n)
        proj = phantom.projections(g)
        seq = os.path.join(work, "proj.seq")
        write_set(seq, proj)
        gfile = os.path.join(work, "proj.geometry.json")
        g.save(gfile)

        t0 = time.perf_counter()
        raw = read_set([seq], g)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        filt = filter_projections(raw, g, threads=threads())  # (on the cores a task filters with)
        t_filter = time.perf_counter() - t0
        padded = pad(filt)
        backproject(filt, g, 0, 2, padded=padded)  # compile / load the cached kernel
        t0 = time.perf_counter()
        slabs = [backproject(filt, g, z, min(z + args.slab, n), padded=padded) for z in range(0, n, args.slab)]
        t_bp = time.perf_counter() - t0
        t0 = time.perf_counter()
        for z0, slab in zip(range(0, n, args.slab), slabs):  # as the tasks write them: .npy files
            np.save(os.path.join(work, f"z{z0:05d}.slab.npy"), slab)
        t_out = time.perf_counter() - t0
        updates = n ** 3 * na
        gups = updates / t_bp / 1e9

        small = geometry.simple(32, 36)
        q = np.random.default_rng(0).standard_normal((small.n_angles, *small.nDetector)).astype(np.float32)
        t0 = time.perf_counter()
        backproject_reference(q, small)
        t_ref = time.perf_counter() - t0
        ref_gups = 32 ** 3 * 36 / t_ref / 1e9

        from gpumr.jobs.backproject import MRBackproject
        from gpumr.launch.job import run_job
        _, t_job = run_job(MRBackproject, [], os.path.join(work, "out"), "local",
                           ["--projections", seq, "--geometry", gfile, "--slab", str(args.slab), "--device", "cpu",
                            "--cpu-threads", "1"])

        table(f"CPU backprojection, {n}^3 from {na} projections of {g.nDetector[0]}x{g.nDetector[1]}",
              ["what", "seconds", "GUPS", "vs numpy reference"],
              [["numpy reference (32^3 x 36, per update)", f"{t_ref:.2f}", f"{ref_gups:.4f}", "1.0"],
               ["fast backprojector (numba, all cores)", f"{t_bp:.2f}", f"{gups:.3f}", f"{gups / ref_gups:.0f}x"]])
        table("where the time goes (in-process, same case)", ["phase", "seconds"],
              [["load projections (SequenceFile, TIFF decode)", f"{t_load:.2f}"],
               ["filter (cosine weight, ramp, FFT)", f"{t_filter:.2f}"],
               ["backproject", f"{t_bp:.2f}"],
               ["write output slabs (.npy)", f"{t_out:.2f}"],
               ["whole job, local runner, 2 map tasks x 1 thread", f"{t_job:.2f}"]])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
