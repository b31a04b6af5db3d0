"""GPU backprojection: kernel GUPS, the whole slab path with transfers, and the CPU in the same run.

For 512^3 from 360 projections of 512x512 and the seed workload, 1024^3
from 360 projections of 1024x1024 (random filtered projections: the timing
does not depend on the values, and METHOD.md forbids timing on zeros).

* kernel: the launches for the whole volume, synchronised, best of 3 after a
  warm-up (the projections already on the device);
* slab path: ``SlabBackprojector.run`` for slabs of 64 slices, upload of the
  projections included, results copied back;
* CPU: the numba backprojector on a slab of 8 slices, per update.

Usage: python bench/backproject_gpu.py [--sizes 512 1024]
"""

import argparse
import time

import numpy as np
from _common import table

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.nvml import discover


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--slab", type=int, default=64)
    args = ap.parse_args()
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
        st = bp._state(gpu.ordinal)  # upload + self-check
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
            st["proj"] = lx.to_device(padded)  # the path includes the upload
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
    table(f"GPU backprojection on {gpu.name} (launcher {st['lx'].name})",
          ["case", "kernel GUPS", "kernel s", "slab path GUPS", "slab path s", "CPU GUPS", "GPU/CPU",
           "upload+check s"], rows)


if __name__ == "__main__":
    main()
