"""What checking what is read by content costs: ``gpumr ct assemble``'s slabs and the tasks' side files.

Same run, same data, files page-cached (read once before timing), rounds
interleaved, medians:

* assemble: a synthetic job output of an ``--n``\\ :sup:`3` volume (slabs of
  16 slices, its proof beside it). Baseline: the copy alone, as assemble
  did before it checked slabs against the proof (each slab's header read,
  its bytes copied through one buffer into the volume under the output
  rule); gpumr: :func:`gpumr.ct.slices.assemble` (each slab's SHA-256
  computed as it is copied, compared with its proof);
* side files: a file of ``--mb`` MB as a task finds it. Baseline: the size
  check alone (what tasks did before); gpumr: the size and content check
  (:func:`gpumr.tasks.runtime._verified`, hashed once per process, a fresh
  process cache each round); and, for scale, what a CT task does with its
  projections anyway: reading them into the filtering buffer
  (:meth:`gpumr.ct.bands.FilteredRows.read`) of a geometry that holds them;
* with ``--job N``: a whole ``gpumr run backproject --engine inline`` job of an
  N\\ :sup:`3` phantom (its projections shipped), with the tasks' content check
  and with the size check alone (the task runtime's caches emptied before each).

Usage: python bench/verified_reads.py [--n 512] [--mb 512] [--rounds 5] [--job 256]
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
from _common import table

from gpumr.ct.slices import assemble
from gpumr.io.joboutput import read_job_output
from gpumr.io.outputs import FileOutput, Proof, digest, proof_path

SLAB = 16


def job_output(folder, n):
    """A job output of an n^3 volume in slabs of :data:`SLAB` slices, with its proof."""
    os.makedirs(os.path.join(folder, "arrays"))
    rng = np.random.default_rng(0)
    lines, listed = [], {}
    for z0 in range(0, n, SLAB):
        name = f"arrays/z{z0:05d}.slab.npy"
        np.save(os.path.join(folder, name), rng.random((min(SLAB, n - z0), n, n), np.float32))
        listed[name] = list(digest(os.path.join(folder, name)))
        value = {"z": [z0, min(z0 + SLAB, n)], "nz": n,
                 "slab": {"array": name, "shape": [min(SLAB, n - z0), n, n], "dtype": "<f4"}, "device": "cpu"}
        lines.append(json.dumps(f"z{z0:05d}") + "\t" + json.dumps(value))
    with open(os.path.join(folder, "part-00000"), "w") as f:
        f.write("\n".join(lines) + "\n")
    Proof(proof_path(folder), "gpumr run", [listed]).save()


def copy_only(folder, path, n):
    """The copy as assemble made it before it checked slabs: headers read, bytes copied through one buffer."""
    buffer = memoryview(bytearray(8 << 20))
    with FileOutput(path, "gpumr ct") as out:
        np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": (n, n, n)})
        for z0 in range(0, n, SLAB):
            with open(os.path.join(folder, f"arrays/z{z0:05d}.slab.npy"), "rb") as f:
                np.lib.format.read_magic(f)
                np.lib.format.read_array_header_1_0(f)
                while True:
                    got = f.readinto(buffer)
                    if not got:
                        break
                    out.write(buffer[:got])


def checked(folder, path, n):
    assemble(read_job_output([folder]), [folder], path)


def fresh(path):
    for p in (path, os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.gpumr")):
        if os.path.exists(p):
            os.unlink(p)


def projections(folder, mb):
    """A CT projection set of about ``mb`` MB and its geometry: ``(SequenceFile, Geometry)``."""
    from gpumr.ct import geometry
    from gpumr.ct.projections import write_set
    side = 256
    angles = max(1, int(mb * 1e6 / (side * side * 4)))
    g = geometry.simple(side, angles, n_detector=side)
    seq = os.path.join(folder, "p.seq")
    write_set(seq, np.random.default_rng(0).random((angles, side, side), np.float32))
    return seq, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="voxels per side of the assembled volume (default 512)")
    ap.add_argument("--mb", type=float, default=512, help="megabytes of the side file (default 512)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--job", type=int, default=0, metavar="N", help="also time a CT job of an N^3 phantom")
    a = ap.parse_args()
    from gpumr.ct.bands import FilteredRows
    from gpumr.tasks import runtime
    work = tempfile.mkdtemp(prefix="gpumr-bench-verified-")
    try:
        out = os.path.join(work, "out")
        job_output(out, a.n)
        vol = os.path.join(work, "v.npy")
        seq, g = projections(work, a.mb)
        size = os.path.getsize(seq)
        name = hashlib.sha256(open(seq, "rb").read()).hexdigest()[:24] + "-p.seq"
        os.link(seq, os.path.join(work, name))
        find = lambda n: os.path.join(work, n)  # noqa: E731 (a one-line choice of function)

        def size_only():
            assert os.path.getsize(find(name)) == size

        def content():
            runtime._CHECKED.clear()
            runtime._verified(name, find, size)

        cases = {"assemble: copy alone (before)": lambda: copy_only(out, vol, a.n),
                 "assemble: checked against the proof": lambda: checked(out, vol, a.n),
                 "side file: size alone (before)": size_only,
                 "side file: size and SHA-256": content,
                 "CT task: projections read for filtering": lambda: FilteredRows.read([seq], g)}
        times = {k: [] for k in cases}
        for k, fn in cases.items():  # (page-cached, imports done)
            fresh(vol)
            fn()
        for _ in range(a.rounds):
            for k, fn in cases.items():
                fresh(vol)
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        vol_mb = a.n ** 3 * 4 / 1e6
        rows = [(k, f"{med[k]:.3f}", f"{(vol_mb if k.startswith('assemble') else size / 1e6) / med[k]:.0f}")
                for k in cases]
        table(f"{a.n}^3 volume ({vol_mb:.0f} MB), side file {size / 1e6:.0f} MB; medians of {a.rounds} rounds",
              ["case", "seconds", "MB/s"], rows)
        ratio = med["assemble: checked against the proof"] / med["assemble: copy alone (before)"]
        print(f"\nassemble checked / copy alone: {ratio:.2f}")
        hashed = med["side file: size and SHA-256"]
        print(f"side file check: {hashed:.3f} s, {hashed / med['CT task: projections read for filtering']:.2f} of "
              "reading the projections for filtering")
        if a.job:
            job(work, a.job, a.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def job(work, n, rounds):
    """A CT job on the inline engine, its side files checked by content (now) and by size alone (before)."""
    from gpumr.cli import main as gpumr
    from gpumr.launch.job import launch
    from gpumr.tasks import runtime
    folder = os.path.join(work, "job")
    os.makedirs(folder)
    seq = os.path.join(folder, "p.seq")
    assert gpumr(["ct", "phantom", "-o", seq, "--voxels", str(n), "--angles", str(max(n, 180)), "-q"]) == 0
    checked_verified, checked_unchanged = runtime._verified, runtime._unchanged

    def size_only(name, find, size):
        path = find(name)
        assert os.path.getsize(path) == size
        return path

    def run(check):
        runtime._BUILT.clear()
        runtime._CHECKED.clear()
        runtime._verified = checked_verified if check else size_only
        runtime._unchanged = checked_unchanged if check else (lambda paths: None)
        out = os.path.join(folder, "out")
        shutil.rmtree(out, ignore_errors=True)
        for p in (os.path.join(folder, ".out.gpumr"),):
            if os.path.exists(p):
                os.unlink(p)
        t0 = time.perf_counter()
        launch(["backproject", "--projections", seq, "-o", out, "--engine", "inline", "--no-conf", "-q"])
        return time.perf_counter() - t0
    times = {True: [], False: []}
    try:
        run(True)
        for _ in range(rounds):
            for check in (False, True):
                times[check].append(run(check))
    finally:
        runtime._verified, runtime._unchanged = checked_verified, checked_unchanged
    before, now = statistics.median(times[False]), statistics.median(times[True])
    table(f"a {n}^3 CT job on --engine inline ({os.path.getsize(seq) / 1e6:.0f} MB of projections shipped); medians "
          f"of {rounds}", ["side files checked", "seconds"], [("by size (before)", f"{before:.2f}"),
                                                              ("by size and SHA-256", f"{now:.2f}")])
    print(f"\njob with the content check / without: {now / before:.3f}")


if __name__ == "__main__":
    main()
