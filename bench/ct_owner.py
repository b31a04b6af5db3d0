"""Where a CT job's slabs run and how often the node sets the device up, reads and filters the projections: the job
with one GPU owner per node (``--gpu-owner on``, the default) against each task setting its GPU up itself (``off``),
in one run, on simulated GPUs (the emulating launcher runs the CUDA kernels on the host: counts, not GPU speed).

Usage: python bench/ct_owner.py [--voxels 1024] [--angles 8] [--slab 16] [--engine local] [--cpu-threads 1]

A few angles keep the emulated kernels' host time to minutes at 1024^3; the slab count, the set-ups, reads and
filter passes depend on the volume and the tasks, not on the angles. ``--cpu-threads 1`` makes the local engines
start a task process per core, the case where per-task set-up repeats.
"""

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from _common import table


def gpumr(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=env)


def counted(stderr):
    """What one job's ``-v`` log says: slabs, on the GPU, GPU set-ups, projection reads, filter passes, the processes
    that did them."""
    lines = stderr.splitlines()
    summary = re.search(r"(\d+) records: (\d+) on CPU, (\d+) on GPU", stderr)
    rows = [tuple(map(int, m.groups()[1:])) + (m.group(1) or "host",) for ln in lines
            for m in [re.search(r"projections filtered(?: on (gpu:\d+))?: detector rows (\d+)-(\d+) of (\d+) "
                                r"\(process (\d+)\)", ln)] if m]
    reads = [ln for ln in lines if "projections read:" in ln]
    setups = [ln for ln in lines if re.search(r"GPU backprojection set up on gpu:\d+ \(process", ln)]
    processes = {int(m.group(1)) for ln in lines for m in [re.search(r"\(process (\d+)\)", ln)] if m}
    filtered = sum(b - a for a, b, _, _, _ in rows) / rows[0][2] if rows else 0.0
    return {"slabs": int(summary.group(1)), "on GPU": int(summary.group(3)), "GPU set-ups": len(setups),
            "projection reads": len(reads), "filter passes": round(filtered, 2),
            "filtered on": ", ".join(sorted({r[4] for r in rows})) or "-", "reading processes": len(processes)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--voxels", type=int, default=1024)
    p.add_argument("--angles", type=int, default=8)
    p.add_argument("--slab", type=int, default=16)
    p.add_argument("--engine", default="local")
    p.add_argument("--cpu-threads", type=int, default=1)
    p.add_argument("--gpus", default="1:80GiB", help="GPUMR_SIMULATE_GPUS (default 1:80GiB)")
    p.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    a = p.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="gpumr-ct-owner-")
    os.makedirs(work, exist_ok=True)
    try:
        run(a, work)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(a, work):
    """Both jobs in ``work``; print the table."""
    env = {**os.environ, "GPUMR_SIMULATE_GPUS": a.gpus}
    seq = os.path.join(work, "p.seq")
    if not os.path.exists(seq):
        for args in (["ct", "geometry", "-o", "g.json", "--voxels", a.voxels, "--angles", a.angles],
                     ["ct", "phantom", "--geometry", "g.json", "-o", "p.seq"]):
            made = gpumr(args, work, env)
            if made.returncode:
                sys.exit(made.stderr)
    rows = []
    for owner in ("off", "on"):
        out = os.path.join(work, f"out-{owner}")
        print(f"{a.voxels}^3 x {a.angles} angles, --gpu-owner {owner} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        mrjob = ["--no-conf"] if a.engine in ("inline", "local") else []
        job = gpumr(["-v", "run", "backproject", "--projections", seq, "-o", out, "--slab", a.slab, "--engine",
                     a.engine, "--cpu-threads", a.cpu_threads, "--gpu-owner", owner, *mrjob], work, env)
        seconds = time.perf_counter() - t0
        if job.returncode:
            sys.exit(job.stderr[-3000:])
        got = counted(job.stderr)
        rows.append([owner, got["slabs"], got["on GPU"], got["GPU set-ups"], got["projection reads"],
                     got["filter passes"], got["filtered on"], got["reading processes"], f"{seconds:.1f}"])
        shutil.rmtree(out, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.remove(os.path.join(work, f".out-{owner}.gpumr"))
    table(f"backproject {a.voxels}^3, {a.angles} angles, --slab {a.slab}, --engine {a.engine}, --cpu-threads "
          f"{a.cpu_threads}, GPUMR_SIMULATE_GPUS={a.gpus} (emulated kernels: counts, not GPU speed)",
          ["--gpu-owner", "slabs", "on GPU", "GPU set-ups", "projection reads", "filter passes", "filtered on",
           "reading processes", "wall s"], rows)
    off, on = rows
    print(f"\nset-ups {off[3]} -> {on[3]}, reads {off[4]} -> {on[4]}, filter passes {off[5]} -> {on[5]}; "
          f"wall {off[8]} s -> {on[8]} s (ratio {float(on[8]) / float(off[8]):.2f})")


if __name__ == "__main__":
    main()
