"""The slab path's changes of issue 65, each beside what it replaced, in the same run on one device.

* slabs: as the path runs now (each slab copied back straight into a
  page-locked buffer lent to the caller and reused), and the same with each
  slab then received into one fresh result array for the call (what the
  path did before: the host's copy and the first touch of its pages);
* the projections' upload: through page-locked staging in chunks on a
  stream of its own (now), and as one copy from pageable memory (before);
* the FDK filter: the projections uploaded as read and filtered on the
  device (now), against filtered on the host on every core, then uploaded
  (before);
* the faces' parts: ``--frames`` frames in batches of two parts, parts of
  8 frames (now), 16 and 32.

Per variant the wall time, best of 3 after a warm-up: of a ``n``^3 volume
in calls of 4 slabs of 16 slices (the CT workload's), and GUPS; of the
filter and upload, once per device; of the faces' kernel path over the
frames, and frames a second.

Usage: python bench/gpu_variants.py [--ct 512 --angles 512] [--frames 512 --size 640x480] [--emulate]
"""

import argparse
import time

import numpy as np
from _common import table


def best(fn, repeat=3):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct", type=int, default=512)
    ap.add_argument("--angles", type=int, default=512)
    ap.add_argument("--slab", type=int, default=16)
    ap.add_argument("--frames", type=int, default=0, help="faces' frames for the part-size variants (0: none)")
    ap.add_argument("--size", default="640x480", help="the faces' frames, WxH (the sample frames resized)")
    ap.add_argument("--emulate", action="store_true", help="a simulated GPU (the kernels on the host; no GPU's time)")
    args = ap.parse_args()
    from gpumr.ct import geometry
    from gpumr.ct.backproject import pad
    from gpumr.ct.backproject_gpu import SlabBackprojector
    from gpumr.ct.bands import FilteredRows
    from gpumr.devices.nvml import discover, simulated_gpus
    gpus = simulated_gpus("1") if args.emulate else discover().gpus
    if not gpus:
        raise SystemExit("gpu_variants: no NVIDIA GPU here (--emulate: a simulated one)")
    gpu, n = gpus[0], args.ct
    g = geometry.simple(n, args.angles, n_detector=n)
    q = np.random.default_rng(n).standard_normal((g.n_angles, *g.nDetector), dtype=np.float32)
    padded = pad(q)  # (random numbers stand for filtered projections, and, in the filter's rows, for raw ones)
    bp = SlabBackprojector(padded, g, slab=args.slab)
    st = bp.state(gpu)
    lx = st["lx"]
    slabs = [(z, min(z + args.slab, n)) for z in range(0, n, args.slab)]
    calls = [slabs[i:i + 4] for i in range(0, len(slabs), 4)]

    def now():
        for c in calls:
            bp.run(c, gpu)

    def before():
        for c in calls:
            got = bp.run(c, gpu)
            result = np.empty((sum(s.shape[0] for s in got),) + got[0].shape[1:], np.float32)
            at = 0
            for s in got:
                result[at:at + s.shape[0]] = s
                at += s.shape[0]

    def upload_now():
        with lx.active():
            st["proj"] = bp._upload(lx, gpu)
            lx.synchronize()

    def filtered(on_device):
        def run():
            bp.rows = FilteredRows(q, g)  # (the task's read buffer: raw, then as each way leaves it)
            bp.padded = bp.rows.padded
            if not on_device:
                bp.rows.all()
            try:
                with lx.active():
                    st["proj"] = bp._upload(lx, gpu)
                    lx.synchronize()
            finally:
                bp.rows, bp.padded = None, padded
        return run

    def upload_before():
        with lx.active():
            st["proj"] = lx.to_device(bp.padded)
            lx.synchronize()
    updates = n ** 3 * args.angles
    rows = []
    for what, fn in (("slabs, lent page-locked (now)", now),
                     ("slabs, then received into a fresh array per call (before)", before),
                     ("the projections' upload, page-locked staging in chunks (now)", upload_now),
                     ("the projections' upload, one pageable copy (before)", upload_before),
                     (f"the FDK filter on the device after the upload (now{'' if lx.fft else ': NO FFT, on the host'})",
                      filtered(True)),
                     ("the FDK filter on the host, every core, then the upload (before)", filtered(False))):
        s = best(fn)
        rows.append([what, f"{s:.3f}", f"{updates / s / 1e9:.3g}" if what.startswith("slabs") else "-"])
    where = "a simulated GPU (EMULATED: no GPU's time)" if args.emulate else f"{gpu.name} (launcher {lx.name})"
    table(f"The slab path's variants: {n}^3 from {args.angles} projections, slabs of {args.slab} in calls of 4, on "
          f"{where}; best of 3", ["variant", "s", "GUPS"], rows)
    if args.frames:
        faces(gpu, args.frames, tuple(int(v) for v in args.size.split("x")), where)


def faces(gpu, frames, size, where):
    """The faces' kernel path over ``frames`` frames of ``size`` in batches of two parts, for parts of 8, 16, 32."""
    import shutil
    import tempfile

    import cv2
    from _common import frame_corpus

    from gpumr.faces import gpu as facegpu
    from gpumr.faces.cpu import cascade_path
    work = tempfile.mkdtemp(prefix="gpumr-variants-")
    try:
        grays = [cv2.resize(cv2.imread(p, cv2.IMREAD_GRAYSCALE), size, interpolation=cv2.INTER_AREA)
                 for p in frame_corpus(work, count=frames, distinct=min(frames, 64))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    det = facegpu.FaceGPU(cascade_path())
    now, rows = facegpu.PART, []
    try:
        for part in (8, 16, 32):
            facegpu.PART = part

            def run():
                for i in range(0, len(grays), 2 * part):
                    det.found(grays[i:i + 2 * part], gpu)
            s = best(run)
            rows.append([f"parts of {part}, batches of {2 * part}{' (now)' if part == now else ''}", f"{s:.3f}",
                         f"{len(grays) / s:,.0f}"])
    finally:
        facegpu.PART = now
    table(f"The faces' kernel path by part size: {len(grays)} frames of {size[0]}x{size[1]}, on {where}; best of 3",
          ["variant", "s", "frames/s"], rows)


if __name__ == "__main__":
    main()
