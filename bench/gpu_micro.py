"""What a GPU's host side costs, each alone: the context's start, copies from pageable and page-locked memory,
a page-locked allocation, and the first touch of new host pages.

Each figure through gpumr's launcher interface (PyCUDA or CuPy, as the
drivers use it), best of 3 after a warm-up, with ``--mib`` MiB:

* context start: the launcher made and the first allocation done (a fresh
  process's first call);
* host to device, from pageable memory (``to_device``) and from
  page-locked memory (``to_device_async``, then a wait); device to host,
  into pageable (``to_host``) and page-locked memory (``to_host_async``);
* a page-locked allocation (``pinned``);
* first touch: writing a new host array (page faults) and writing it again.

These are the terms ``bench/gpu_model.py`` assumes (:data:`gpu_model.COPY_GBS`)
and ``bench/host_driving.py`` budgets against.

Usage: python bench/gpu_micro.py [--mib 256] [--emulate]
"""

import argparse
import time

import numpy as np
from _common import table


def best(fn, repeat=3):
    """The least seconds of ``repeat`` runs of ``fn`` after one more as a warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--emulate", action="store_true", help="a simulated GPU (the kernels on the host; no GPU's time)")
    args = ap.parse_args()
    from gpumr.devices.nvml import discover, simulated_gpus
    from gpumr.gpu.launch import launcher
    gpus = simulated_gpus("1") if args.emulate else discover().gpus
    if not gpus:
        raise SystemExit("gpu_micro: no NVIDIA GPU here (--emulate: a simulated one)")
    gpu = gpus[0]
    t0 = time.perf_counter()
    lx = launcher(gpu)
    with lx.active():
        lx.empty(1, np.uint8)
        lx.synchronize()
    start = time.perf_counter() - t0
    n = args.mib << 20
    gb = n / 1e9
    rows = [["context start (launcher, first allocation)", f"{start:.3f} s", ""]]
    with lx.active():
        t0 = time.perf_counter()
        pinned = lx.pinned(n, np.uint8)
        rows.append([f"page-locked allocation, {args.mib} MiB", f"{time.perf_counter() - t0:.3f} s", ""])
        pageable = np.ones(n, np.uint8)
        pinned[:] = 1
        dev = lx.empty(n, np.uint8)
        stream = lx.stream()

        def h2d_pageable():
            lx.to_device(pageable)
            lx.synchronize()

        def h2d_pinned():
            lx.to_device_async(pinned, dev, stream)
            lx.wait(lx.record(stream))

        def d2h_pageable():
            lx.to_host(dev)

        def d2h_pinned():
            lx.wait(lx.to_host_async(dev, pinned, stream))
        for what, fn in (("host to device, pageable (to_device)", h2d_pageable),
                         ("host to device, page-locked (to_device_async)", h2d_pinned),
                         ("device to host, pageable (to_host)", d2h_pageable),
                         ("device to host, page-locked (to_host_async)", d2h_pinned)):
            s = best(fn)
            rows.append([f"{what}, {args.mib} MiB", f"{s * 1e3:.1f} ms", f"{gb / s:.1f} GB/s"])
    t0 = time.perf_counter()
    fresh = np.empty(n, np.uint8)
    fresh.fill(2)
    first = time.perf_counter() - t0
    again = best(lambda: fresh.fill(3))
    rows.append([f"first touch of a new host array, {args.mib} MiB", f"{first * 1e3:.1f} ms", f"{gb / first:.1f} GB/s"])
    rows.append([f"writing it again, {args.mib} MiB", f"{again * 1e3:.1f} ms", f"{gb / again:.1f} GB/s"])
    where = "a simulated GPU (EMULATED: the host's memory, no GPU's time)" if args.emulate else \
        f"{gpu.name} (launcher {lx.name})"
    table(f"The host side of a GPU, each alone, on {where}; best of 3", ["what", "time", "rate"], rows)


if __name__ == "__main__":
    main()
