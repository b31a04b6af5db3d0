"""``gpumr ct``: geometry, phantom, plan, reconstruct, assemble."""

import os

from .errors import GpumrError


def cmd_geometry(args):
    from .ct.geometry import simple
    g = simple(args.voxels, args.angles, args.detector, args.voxel_size)
    g.save(args.output)
    print(f"wrote {args.output}: {args.voxels}^3 voxels of {args.voxel_size} mm, {args.angles} angles, "
          f"detector {g.nDetector[0]}x{g.nDetector[1]} of {g.dDetector[0]:.3f} mm")


def cmd_phantom(args):
    import time
    from tqdm import tqdm
    from .ct import geometry, phantom
    from .ct.projections import encode_tiff
    from .ct.slices import save_volume
    from seqfile import Writer
    g = geometry.load(args.geometry)
    t0 = time.perf_counter()
    with Writer(args.output) as w:
        import numpy as np
        rng_seed = 0
        for i, angle in enumerate(tqdm(g.angles, desc="projections", unit="proj", disable=None, leave=False)):
            p = phantom.project(g, angle)
            if args.noise_i0:
                rng = np.random.default_rng(rng_seed + i)
                counts = rng.poisson(args.noise_i0 * np.exp(-args.mu_scale * p.astype(np.float64)))
                p = (-np.log(np.maximum(counts, 1) / args.noise_i0) / args.mu_scale).astype(np.float32)
            w.append(f"proj_{i:04d}.tif", encode_tiff(p))
    geo_out = os.path.splitext(args.output)[0] + ".geometry.json"
    g.save(geo_out)
    if args.truth:
        save_volume(phantom.volume(g), args.truth)
    print(f"wrote {g.n_angles} projections {g.nDetector[0]}x{g.nDetector[1]} to {args.output} and the geometry "
          f"to {geo_out}" + (f", ground truth to {args.truth}" if args.truth else "")
          + f" in {time.perf_counter() - t0:.1f} s")


def cmd_plan(args):
    from .ct import geometry
    from .ct.workload import plan
    g = geometry.load(args.geometry)
    lines = plan(g.nVoxel[0], args.slab)
    parts = max(1, min(args.parts, len(lines)))
    if os.path.exists(args.output):
        raise GpumrError(f"{args.output}: already exists")
    os.makedirs(args.output)
    for p in range(parts):
        with open(os.path.join(args.output, f"part-{p:05d}.txt"), "w") as f:
            f.write("".join(line + "\n" for line in lines[p::parts]))
    print(f"wrote {len(lines)} slabs of {args.slab} slices in {parts} plan file(s) to {args.output}")


def cmd_reconstruct(args):
    import time
    from .ct import geometry
    from .ct.backproject import backproject
    from .ct.fdk import filter_projections
    from .ct.projections import read_set
    from .ct.slices import preview, save_volume
    g = geometry.load(args.geometry)
    t0 = time.perf_counter()
    vol = backproject(filter_projections(read_set(args.projections, g, args.i0), g, args.filter), g)
    save_volume(vol, args.output)
    if args.preview:
        preview(vol, args.preview)
    print(f"reconstructed {'x'.join(map(str, vol.shape))} on the CPU in {time.perf_counter() - t0:.1f} s "
          f"-> {args.output}")


def cmd_assemble(args):
    from .ct.slices import assemble, preview, read_records, save_volume
    vol = assemble(read_records(args.outputs))
    save_volume(vol, args.output, args.tiff)
    prev = args.preview or os.path.splitext(args.output)[0] + ".png"
    preview(vol, prev)
    print(f"assembled {vol.shape[0]} slices of {vol.shape[1]}x{vol.shape[2]} into {args.output}; preview {prev}")


def register(sub):
    """Add ``ct`` to the ``gpumr`` parser."""
    from .ct.fdk import FILTERS
    s = sub.add_parser("ct", help="cone-beam CT: geometry, phantom, plan, reconstruct, assemble")
    cs = s.add_subparsers(dest="action", metavar="ACTION")
    cs.required = True
    a = cs.add_parser("geometry", help="write a simple geometry JSON for a cubic volume")
    a.add_argument("-o", "--output", required=True)
    a.add_argument("--voxels", type=int, default=128)
    a.add_argument("--angles", type=int, default=180)
    a.add_argument("--detector", type=int, default=None, help="detector pixels per side")
    a.add_argument("--voxel-size", type=float, default=1.0, help="mm")
    a.set_defaults(func=cmd_geometry)

    a = cs.add_parser("phantom", help="exact projections of the 3D modified Shepp-Logan phantom")
    a.add_argument("--geometry", required=True)
    a.add_argument("-o", "--output", required=True, help="SequenceFile of projections (proj_0000.tif ...)")
    a.add_argument("--truth", help="also write the phantom volume (.npy)")
    a.add_argument("--noise-i0", type=float, default=None, help="Poisson noise with this many photons")
    a.add_argument("--mu-scale", type=float, default=0.01, help="attenuation per phantom unit per mm (for noise)")
    a.set_defaults(func=cmd_phantom)

    a = cs.add_parser("plan", help="slab lines for the backprojection job, split into plan files")
    a.add_argument("--geometry", required=True)
    a.add_argument("--slab", type=int, default=16, help="slices per record")
    a.add_argument("--parts", type=int, default=2, help="plan files (one per map task)")
    a.add_argument("-o", "--output", required=True, help="directory for the plan files")
    a.set_defaults(func=cmd_plan)

    a = cs.add_parser("reconstruct", help="FDK on this machine, without mrjob")
    a.add_argument("projections", nargs="+")
    a.add_argument("--geometry", required=True)
    a.add_argument("--filter", choices=FILTERS, default="ram-lak")
    a.add_argument("--i0", type=float, default=None)
    a.add_argument("-o", "--output", required=True)
    a.add_argument("--preview")
    a.set_defaults(func=cmd_reconstruct)

    a = cs.add_parser("assemble", help="job output slices -> volume .npy (+ TIFF) and a PNG preview")
    a.add_argument("outputs", nargs="+", metavar="OUTPUT")
    a.add_argument("-o", "--output", required=True)
    a.add_argument("--tiff", help="also write a float32 TIFF stack here")
    a.add_argument("--preview", help="PNG path (default: beside the .npy)")
    a.set_defaults(func=cmd_assemble)
