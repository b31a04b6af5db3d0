"""``gpumr ct``: geometry, phantom, plan, reconstruct, assemble."""

import contextlib
import math
import os
import threading
import time

from .. import limits
from ..errors import GpumrError
from ..log import quiet, report
from .args import command, positive


def _geometry_args(p, required=True):
    """The options of a scanner's geometry (``gpumr ct geometry``, and ``phantom`` without ``--geometry``)."""
    p.add_argument("--voxels", type=positive, nargs="+", default=[128], metavar="N",
                   help="voxels per side, or Z Y X (default 128)")
    p.add_argument("--voxel-size", type=float, nargs="+", default=[1.0], metavar="MM",
                   help="voxel size in mm, or Z Y X (default 1)")
    p.add_argument("--angles", type=positive, default=180, metavar="N",
                   help="projections, equally spaced over the arc (default 180)")
    p.add_argument("--arc", type=float, default=360.0, metavar="DEG",
                   help="degrees the source turns through (default 360, a full turn)")
    p.add_argument("--start", type=float, default=0.0, metavar="DEG", help="angle of the first projection (default 0)")
    p.add_argument("--short-scan", action="store_true",
                   help="the shortest arc Parker's weights allow: 180 degrees plus the fan angle")
    p.add_argument("--dso", type=float, default=None, metavar="MM",
                   help="source to rotation axis (default 4 x the volume's largest side)")
    p.add_argument("--dsd", type=float, default=None, metavar="MM", help="source to detector (default 1.5 x DSO)")
    p.add_argument("--detector", type=positive, nargs="+", default=None, metavar="N",
                   help="detector pixels per side, or ROWS COLS (default: 15%% more than voxels across)")
    p.add_argument("--pitch", type=float, nargs="+", default=None, metavar="MM",
                   help="detector pixel pitch in mm, or ROW COL (default: enough to see the whole volume)")
    p.add_argument("--off-detector", type=float, nargs=2, default=[0.0, 0.0], metavar=("ROW", "COL"),
                   help="detector centre shift in mm (default 0 0)")
    p.add_argument("--off-origin", type=float, nargs=3, default=[0.0, 0.0, 0.0], metavar=("Z", "Y", "X"),
                   help="volume centre shift in mm (default 0 0 0)")


def _geometry_from(args, source):
    """The geometry the options describe; a warning or an error names ``source``, the file it is written to."""
    from ..ct.geometry import build
    return build(args.voxels, args.voxel_size, args.angles, args.dso, args.dsd, args.detector, args.pitch,
                 args.off_detector, args.off_origin, math.radians(args.arc), math.radians(args.start),
                 args.short_scan, source=source)


def _describe(g):
    arc = math.degrees(float(g.angles[-1] - g.angles[0]) * len(g.angles) / max(len(g.angles) - 1, 1))
    return (f"{'x'.join(map(str, g.nVoxel))} voxels of {'x'.join(f'{d:g}' for d in g.dVoxel)} mm, "
            f"{g.n_angles} angles over {arc:.1f} degrees, detector {g.nDetector[0]}x{g.nDetector[1]} of "
            f"{g.dDetector[0]:.3f}x{g.dDetector[1]:.3f} mm, DSO {g.DSO:g} mm, DSD {g.DSD:g} mm")


def _find_geometry(args):
    """``--geometry``, or the geometry file beside the (first) projections."""
    from ..ct.geometry import beside
    if args.geometry:
        return args.geometry
    projections = getattr(args, "projections", None)
    first = projections[0] if isinstance(projections, list) else projections
    if first and os.path.exists(beside(first)):
        return beside(first)
    raise GpumrError("--geometry is required" + (f": no {beside(first)} beside the projections" if first else ""))


def cmd_geometry(args):
    g = _geometry_from(args, args.output)
    g.save(args.output)
    report(f"wrote {args.output}: {_describe(g)}")


def _check_outputs(paths, inputs):
    """Refuse, before any work, an output file that gpumr may not write (:func:`gpumr.io.outputs.check_output`)."""
    from ..io.outputs import check_output
    for option, path in paths:
        if path:
            check_output(path, "gpumr ct", folder=False, inputs=inputs, option=option)


def cmd_phantom(args):
    from ..ct import geometry, phantom
    from ..ct.projections import write_set
    from ..ct.slices import save_volume
    g = geometry.load(args.geometry) if args.geometry else _geometry_from(args, geometry.beside(args.output))
    if args.noise_i0 is not None:
        limits.number("--noise-i0", args.noise_i0, above=0, most=limits.MAX_I0)
        limits.number("--mu-scale", args.mu_scale, above=0, most=limits.MAX_LENGTH_MM)
        limits.number("--seed", args.seed, least=0, integer=True)
    inputs = [args.geometry] if args.geometry else []
    geo_out = geometry.beside(args.output)
    same = args.geometry and os.path.exists(geo_out) and os.path.samefile(args.geometry, geo_out)
    _check_outputs([("-o", args.output), ("-o", None if same else geo_out), ("--truth", args.truth)], inputs)
    t0 = time.perf_counter()
    stream = phantom.iter_projections(g, args.noise_i0, args.mu_scale, args.seed)
    write_set(args.output, _bar(g.n_angles, "projections", "proj", stream), inputs=inputs)
    if not same:
        g.save(geo_out)
    if args.truth:
        save_volume(phantom.volume(g), args.truth, inputs=inputs)
    report(f"wrote {g.n_angles} projections {g.nDetector[0]}x{g.nDetector[1]} to {args.output} and the geometry "
           f"to {geo_out}" + (f", ground truth to {args.truth}" if args.truth else "")
           + f" in {time.perf_counter() - t0:.1f} s")


def _bar(total, desc, unit, iterable=None):
    """A progress bar of ``total`` steps (over ``iterable``, where given) on a terminal: none under ``-q``, or
    into a file or a pipe."""
    from tqdm import tqdm
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=True if quiet() else None, leave=False)


@contextlib.contextmanager
def _progress(total, desc, unit):
    """:func:`_bar` of ``total`` steps; yields ``step(n)``, which any thread may call."""
    lock = threading.Lock()
    with _bar(total, desc, unit) as bar:
        def step(n):
            with lock:
                bar.update(n)
        yield step


def cmd_reconstruct(args):
    from ..ct import geometry
    from ..ct.backproject import backproject, set_threads
    from ..ct.bands import FilteredRows
    from ..ct.slices import preview, save_volume
    geometry_file = _find_geometry(args)
    g = geometry.load(geometry_file)
    inputs = [geometry_file, *args.projections]
    _check_outputs([("-o", args.output), ("--preview", args.preview)], inputs)
    if args.threads:
        set_threads(limits.number("--threads", args.threads, 1, limits.MAX_THREADS, integer=True))
    t0 = time.perf_counter()
    # (read into the zero-bordered buffer the kernel reads, and filtered there: one copy of the projections)
    rows = FilteredRows.read(args.projections, g, args.i0, args.filter)
    with _progress(g.n_angles, "filtering", "proj") as step:
        padded = rows.all(progress=step)
    with _progress(g.nVoxel[0], "backprojecting", "slice") as step:
        vol = backproject(None, g, padded=padded, progress=step)
    save_volume(vol, args.output, inputs=inputs)
    if args.preview:
        preview(vol, args.preview, inputs=inputs)
    report(f"reconstructed {'x'.join(map(str, vol.shape))} on the CPU in {time.perf_counter() - t0:.1f} s "
           f"-> {args.output}")


def cmd_assemble(args):
    import numpy as np

    from ..ct.slices import assemble, preview, save_tiff
    from ..io.joboutput import read_job_output
    prev = args.preview or os.path.splitext(args.output)[0] + ".png"
    _check_outputs([("-o", args.output), ("--tiff", args.tiff), ("--preview", prev)], args.outputs)
    t0 = time.perf_counter()
    shape = assemble(read_job_output(args.outputs), args.outputs, args.output, inputs=args.outputs)
    vol = np.load(args.output, mmap_mode="r")
    if args.tiff:
        save_tiff(vol, args.tiff, inputs=args.outputs)
    preview(vol, prev, inputs=args.outputs)
    report(f"assembled {shape[0]} slices of {shape[1]}x{shape[2]} into {args.output} in "
           f"{time.perf_counter() - t0:.1f} s; preview {prev}")


def register(sub):
    """Add ``ct`` to the ``gpumr`` parser."""
    from ..ct import FILTERS
    s = sub.add_parser("ct", help="cone-beam CT: geometry, phantom, reconstruct, assemble",
                       description="Cone-beam CT: geometry, phantom projections, reconstruction on this machine, "
                                   "assembling the job's slabs.")
    cs = s.add_subparsers(dest="action", metavar="ACTION")
    cs.required = True
    a = command(cs, "geometry", "write a scanner's geometry as JSON (TIGRE-style fields)", cmd_geometry,
                description="Write a circular cone-beam geometry as JSON: DSO, DSD, nDetector [rows, cols], "
                            "dDetector [row, col] mm,\nnVoxel and dVoxel [z, y, x], offOrigin, offDetector, and "
                            "angles in radians (a file may give nAngles\ninstead: that many over a full turn).")
    a.add_argument("-o", "--output", required=True, metavar="JSON", help="where the geometry goes")
    _geometry_args(a)

    a = command(cs, "phantom", "exact projections of the 3D modified Shepp-Logan phantom", cmd_phantom,
                description="Exact cone-beam projections of the 3D modified Shepp-Logan phantom, one float32 "
                            "TIFF record per angle\n(proj_0000.tif ...), and the geometry beside them as "
                            "<OUT>.geometry.json.")
    a.add_argument("-o", "--output", required=True, metavar="SEQ", help="SequenceFile of projections")
    a.add_argument("--geometry", metavar="JSON", help="a geometry file (else the geometry options below)")
    a.add_argument("--truth", metavar="NPY", help="also write the phantom volume (.npy)")
    a.add_argument("--noise-i0", type=float, default=None, metavar="PHOTONS",
                   help="Poisson noise with this many photons per pixel (default: none)")
    a.add_argument("--mu-scale", type=float, default=0.01,
                   help="attenuation per phantom unit per mm, for the noise (default 0.01)")
    a.add_argument("--seed", type=int, default=0, help="random seed of the noise (default 0)")
    _geometry_args(a)

    a = command(cs, "reconstruct", "FDK on this machine, without mrjob", cmd_reconstruct)
    a.add_argument("projections", nargs="+", metavar="SEQ", help="SequenceFiles of projections")
    a.add_argument("--geometry", metavar="JSON", help="geometry file (default: beside the projections)")
    a.add_argument("--filter", choices=FILTERS, default=FILTERS[0], help=f"ramp filter window (default {FILTERS[0]})")
    a.add_argument("--i0", type=float, default=None, help="projections are raw intensities: use -log(I/I0)")
    a.add_argument("--threads", type=positive, default=None, metavar="N",
                   help="CPU threads of the backprojector (default: all cores)")
    a.add_argument("-o", "--output", required=True, metavar="NPY", help="the volume (.npy)")
    a.add_argument("--preview", metavar="PNG", help="also a PNG of the three central slices")

    a = command(cs, "assemble", "the job's slabs -> one volume .npy (+ TIFF) and a PNG preview", cmd_assemble,
                description="Join the job's slabs into one volume .npy (+ TIFF) and a PNG preview. Each slab is "
                            "checked against the\nproof the job wrote beside its output (size and SHA-256), its "
                            "header against its line (shape,\nfloat32): a slab that is not the one its job wrote "
                            "is refused by name, and nothing is written.")
    a.add_argument("outputs", nargs="+", metavar="OUTPUT", help="job output files or folders")
    a.add_argument("-o", "--output", required=True, metavar="NPY", help="the volume (.npy)")
    a.add_argument("--tiff", metavar="TIF", help="also write a float32 TIFF stack here")
    a.add_argument("--preview", metavar="PNG", help="PNG path (default: beside the .npy)")
