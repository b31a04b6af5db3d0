"""GPU backprojection: kernel GUPS, the whole slab path with transfers, and the CPU in the same run.

For 512^3 from 360 projections of 512x512 and the seed workload, 1024^3
from 360 projections of 1024x1024 (random filtered projections: the timing
does not depend on the values, and METHOD.md forbids timing on zeros).

* kernel: the launches for the whole volume, synchronised, best of 3 after a
  warm-up (the projections already on the device);
* slab path: ``SlabBackprojector.run`` for slabs of 64 slices, upload of the
  projections included, results copied back;
* CPU: the numba backprojector on a slab of 8 slices, per update.

With ``--job``, the seed workload also runs as the job (local runner, one
map task per core, ``--device auto``: the GPU and the CPU cores together) and
the backprojection wall time is reported (target: under 10 s for 1024^3).

Usage: python bench/backproject_gpu.py [--sizes 512 1024] [--job] [--emulate]
(``--emulate``: a simulated GPU, the kernels on the host: the path runs, no GPU's time is measured)
"""

import argparse
import time

import numpy as np
from _common import table

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.devices.nvml import discover


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--slab", type=int, default=64)
    ap.add_argument("--job", action="store_true", help="also run the largest size as the mrjob job")
    ap.add_argument("--emulate", action="store_true", help="a simulated GPU (the kernels on the host; no GPU's time)")
    args = ap.parse_args()
    if args.emulate:
        import os
        os.environ["GPUMR_SIMULATE_GPUS"] = "1"  # (the job's tasks too)
    gpus = discover().gpus
    if not gpus:
        raise SystemExit("no NVIDIA GPU here")
    gpu = gpus[0]
    rows = []
    for n in args.sizes:
        g = geometry.simple(n, args.angles, n_detector=n)
        rng = np.random.default_rng(n)
        q = rng.standard_normal((g.n_angles, *g.nDetector), dtype=np.float32)
        padded = pad(q)
        t0 = time.perf_counter()
        bp = SlabBackprojector(padded, g)
        st = bp.state(gpu)  # upload + self-check
        t_setup = time.perf_counter() - t0
        lx = st["lx"]
        with lx.active():
            out = lx.zeros((n, n, n), np.float32)
            bp.launch(st, 0, n, out)
            lx.synchronize()
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                bp.launch(st, 0, n, out)
                lx.synchronize()
                times.append(time.perf_counter() - t0)
            del out
        t_kernel = min(times)
        t0 = time.perf_counter()
        with lx.active():
            st["proj"] = bp._upload(lx, gpu)  # the path includes the upload, as the driver makes it
            lx.synchronize()
        slabs = bp.run([(z, min(z + args.slab, n)) for z in range(0, n, args.slab)], gpu)
        t_path = time.perf_counter() - t0
        assert sum(s.shape[0] for s in slabs) == n
        t0 = time.perf_counter()
        backproject(None, g, n // 2, n // 2 + 8, padded=padded)
        t_cpu = (time.perf_counter() - t0) * n / 8
        updates = n ** 3 * args.angles
        rows.append([f"{n}^3 x {args.angles}", f"{updates / t_kernel / 1e9:.0f}", f"{t_kernel:.3f}",
                     f"{updates / t_path / 1e9:.0f}", f"{t_path:.2f}", f"{updates / t_cpu / 1e9:.2f}",
                     f"{t_cpu / t_kernel:.0f}x", f"{t_setup:.2f}"])
    table(f"GPU backprojection on {gpu.name} (launcher {st['lx'].name}"
          f"{'; EMULATED: no GPU time' if args.emulate else ''})",
          ["case", "kernel GUPS", "kernel s", "slab path GUPS", "slab path s", "CPU GUPS", "GPU/CPU",
           "upload+check s"], rows)
    if args.job:
        run_job(max(args.sizes), args.angles, args.slab)


def run_job(n, angles, slab):
    """The seed workload through the job: wall time, and slabs per device."""
    import os
    import shutil
    import tempfile

    from gpumr.ct.projections import write_set
    from gpumr.jobs.backproject import MRBackproject
    from gpumr.launch.job import run_job
    work = tempfile.mkdtemp(prefix="gpumr-bpjob-")
    try:
        g = geometry.simple(n, angles, n_detector=n)
        proj = np.random.default_rng(0).random((angles, n, n), dtype=np.float32)
        seq = os.path.join(work, "proj.seq")
        write_set(seq, proj)
        gfile = os.path.join(work, "proj.geometry.json")
        g.save(gfile)
        cores = os.cpu_count()
        c, wall = run_job(MRBackproject, [], os.path.join(work, "out"), "local",
                          ["--projections", seq, "--geometry", gfile, "--slab", str(slab), "--device", "auto",
                           "--cpu-threads", "1", "--gpu-slots", "2", "--reducers", str(cores)])
        print(f"\njob {n}^3 x {angles}, local runner, {cores} map tasks, --device auto: {wall:.1f} s wall "
              f"(start-up, load, filter, backprojection, output); slabs on GPU {c.get('records on GPU', 0)}, "
              f"on CPU {c.get('records on CPU', 0)}; busy backprojecting: GPU "
              f"{c.get('GPU milliseconds', 0) / 1000:.1f} s, CPU {c.get('CPU milliseconds', 0) / 1000:.1f} s "
              f"summed over {cores} tasks")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
