"""gpumr's CPU FDK against RTK's (``itk-rtk``) on the same projections in the same run, the same volume.

Both reconstruct N^3 from the same phantom's projections with the same
threads (all cores): RTK's ``FDKConeBeamReconstructionFilter`` (weighting,
ramp, backprojection), and gpumr's ``filter_projections`` + ``backproject``
in slabs of 32 slices as the job runs them. Then the backprojections alone:
RTK's ``FDKBackProjectionImageFilter`` and gpumr's on gpumr's filtered
projections. RTK's volume axes are gpumr's permuted (RTK turns about y,
gpumr about z); the correlation of the two volumes is printed, and must be
1.000000. gpumr's kernel is the C one where a C compiler is found
(:mod:`gpumr.ct.native`), else numba's; ``--numba`` times numba's kernel too
(the backprojection alone). With ``--scalar``, the scalar kernel gpumr had
before is timed too (restated in ``tests/test_ct_simd.py``). GUPS = voxels x projections /
seconds; each figure is the median of ``--repeat`` interleaved runs.

Usage: python bench/fdk_rtk.py [--voxels 256] [--angles 360] [--repeat 3] [--numba] [--scalar]
(needs ``pip install itk-rtk``: the ``bench`` extra)
"""

import argparse
import os
import statistics
import time

import numpy as np
from _common import table

from gpumr.ct import geometry, phantom
from gpumr.ct.backproject import backproject, pad, set_threads
from gpumr.ct.fdk import filter_projections


def rtk_setup(g, threads):
    """RTK's image type, geometry and image builders for gpumr geometry ``g``."""
    import itk
    from itk import RTK as rtk
    itk.MultiThreaderBase.SetGlobalDefaultNumberOfThreads(threads)
    image_type = itk.Image[itk.F, 3]
    geo = rtk.ThreeDCircularProjectionGeometry.New()
    for a in g.angles:
        geo.AddProjection(g.DSO, g.DSD, float(np.degrees(a)), float(g.offDetector[1]), float(g.offDetector[0]))
    nv, nu = g.nDetector
    dv, du = g.dDetector

    def stack(arr):
        im = itk.image_from_array(np.ascontiguousarray(arr, np.float32))
        im.SetSpacing([float(du), float(dv), 1.0])
        im.SetOrigin([-(nu - 1) / 2 * du, -(nv - 1) / 2 * dv, 0.0])
        return im

    def volume():
        # RTK's volume [Z, Y, X] is gpumr's [x, z, y]: RTK's X = gpumr's y, Y = z (the axis), Z = x
        (nz, ny, nx), (dz, dy, dx), (oz, oy, ox) = g.nVoxel, g.dVoxel, g.offOrigin
        src = rtk.ConstantImageSource[image_type].New()
        src.SetOrigin([-(ny - 1) / 2 * dy + oy, -(nz - 1) / 2 * dz + oz, -(nx - 1) / 2 * dx + ox])
        src.SetSpacing([dy, dz, dx])
        src.SetSize([ny, nz, nx])
        src.SetConstant(0.0)
        return src  # the caller keeps the source while its output is in use
    return rtk, itk, image_type, geo, stack, volume


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voxels", type=int, default=256)
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--slab", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scalar", action="store_true", help="time the scalar kernel gpumr had before too")
    ap.add_argument("--numba", action="store_true", help="time numba's kernel too, beside the C one")
    args = ap.parse_args()
    n, na = args.voxels, args.angles
    threads = len(os.sched_getaffinity(0))
    set_threads(threads)
    g = geometry.simple(n, na, n_detector=n)
    proj = phantom.projections(g).astype(np.float32)
    rtk, itk, image_type, geo, stack, volume = rtk_setup(g, threads)
    nz = g.nVoxel[0]

    def ours_bp(filtered):
        padded = pad(filtered)
        return np.concatenate([backproject(None, g, z, min(z + args.slab, nz), padded=padded)
                               for z in range(0, nz, args.slab)])

    def ours_fdk():
        return ours_bp(filter_projections(proj, g, threads=threads))

    filtered = filter_projections(proj, g)

    def rtk_run(f, projections):
        src, stacked = volume(), stack(projections)
        f.SetInput(0, src.GetOutput())
        f.SetInput(1, stacked)
        f.SetGeometry(geo)
        f.Update()
        return np.array(itk.array_view_from_image(f.GetOutput())).transpose(1, 2, 0)

    def rtk_fdk():
        return rtk_run(rtk.FDKConeBeamReconstructionFilter[image_type].New(), proj)

    def rtk_bp():
        return rtk_run(rtk.FDKBackProjectionImageFilter[image_type, image_type].New(), filtered)

    runs = {"gpumr FDK": ours_fdk, "RTK FDK": rtk_fdk, "gpumr backprojection": lambda: ours_bp(filtered),
            "RTK backprojection": rtk_bp}
    if args.scalar:
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        from test_ct_simd import scalar

        def scalar_bp():
            return np.concatenate([scalar(filtered, g, z, min(z + args.slab, nz)) for z in range(0, nz, args.slab)])
        runs["gpumr backprojection, scalar kernel (before)"] = scalar_bp
        scalar(filtered, g, 0, 2)  # its compile, before timing
    from gpumr.ct import native
    kernel = "C" if native.kernel() is not None else "numba"
    if args.numba and kernel == "C":
        def numba_bp():
            native.ENABLED, native._loaded[:] = False, []
            try:
                return ours_bp(filtered)
            finally:
                native.ENABLED, native._loaded[:] = True, []
        runs["gpumr backprojection, numba's kernel"] = numba_bp
        numba_bp()  # numba loaded (or compiled) before timing
    backproject(filtered, g, 0, 2)  # load the cached kernel (or compile it) before timing
    times = {k: [] for k in runs}
    out = {}
    for _ in range(args.repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    updates = n ** 3 * na

    def corr(a, b):
        return float(np.corrcoef(a.ravel().astype(np.float64), b.ravel().astype(np.float64))[0, 1])
    rows = []
    for ours, theirs in (("gpumr FDK", "RTK FDK"), ("gpumr backprojection", "RTK backprojection")):
        c = corr(out[ours], out[theirs])
        for name in (theirs, ours):
            rows.append([name, f"{med[name]:.2f}", f"{updates / med[name] / 1e9:.3f}",
                         f"{med[theirs] / med[name]:.2f}x", f"{c:.6f}"])
    for name in ("gpumr backprojection, numba's kernel", "gpumr backprojection, scalar kernel (before)"):
        if name in runs:
            rows.append([name, f"{med[name]:.2f}", f"{updates / med[name] / 1e9:.3f}",
                         f"{med['RTK backprojection'] / med[name]:.2f}x",
                         f"{corr(out[name], out['RTK backprojection']):.6f}"])
    table(f"CPU FDK, {n}^3 from {na} projections of {g.nDetector[0]}x{g.nDetector[1]}, {threads} threads each, "
          f"gpumr's kernel in {kernel}, "
          f"median of {args.repeat} (baseline: RTK {itk.Version.GetITKVersion()} in the same run)",
          ["what", "seconds", "GUPS", "vs RTK", "correlation with RTK"], rows)
    print(f"\ngpumr FDK / RTK FDK: {med['RTK FDK'] / med['gpumr FDK']:.2f}x; backprojection alone: "
          f"{med['RTK backprojection'] / med['gpumr backprojection']:.2f}x")


if __name__ == "__main__":
    main()
