"""Slab backprojection as a gpumr workload: one record = one slab [z0, z1) of slices.

Each task loads the geometry and the projections once, filters (FDK weighting
and ramp) only the detector rows its slabs reach, each row once
(:class:`gpumr.ct.bands.FilteredRows`), and then backprojects the slabs it is given on
the CPU or a GPU; every slice of a slab becomes an output record.
"""

from .. import limits
from ..core import BadRecord, Workload
from ..core.declare import Declaration, Option
from ..errors import GpumrError
from . import geometry as geom
from .backproject import backproject
from .bands import FilteredRows
from .fdk import FILTERS
from .projections import read_set
from .slices import encode_slice, slice_key


def check_slab(geometry, slices, name="--slab"):
    """Refuse slabs of ``slices`` slices (at most the volume's) holding more than
    :data:`gpumr.limits.MAX_SLAB_VOXELS` voxels.

    Raises
    ------
    GpumrError
        Naming ``name`` (the option, or the plan line) and the slab's size.
    """
    nz, ny, nx = geometry.nVoxel
    slices = min(slices, nz)  # a plan's slabs are at most the volume
    limits.at_most(f"{name}: a slab of {slices} slices of {ny}x{nx}", slices * ny * nx, limits.MAX_SLAB_VOXELS,
                   "voxels")


def parse_slab(text, geometry):
    """``(z0, z1)`` from a plan line ``"z0 z1"``; BadRecord if it is not a slab of the volume or is too large."""
    nz = geometry.nVoxel[0]
    parts = str(text).split()
    try:
        z0, z1 = (int(p) for p in parts)
    except ValueError:
        raise BadRecord(f"not a slab line 'z0 z1': {text!r}") from None
    if not 0 <= z0 < z1 <= nz:
        raise BadRecord(f"slab {z0} {z1} is not within the volume's {nz} slices")
    try:
        check_slab(geometry, z1 - z0, f"slab {z0} {z1}")
    except GpumrError as exc:
        raise BadRecord(str(exc)) from None
    return z0, z1


def plan(nz, slab):
    """Slab lines covering ``nz`` slices, ``slab`` at a time."""
    return [f"{z} {min(z + slab, nz)}" for z in range(0, nz, slab)]


def write_plan(folder, lines, parts):
    """Write slab ``lines`` into ``parts`` plan files ``part-NNNNN.txt`` in ``folder`` (one map task each);
    returns how many files were written (at most one per line)."""
    import os

    from seqfile.atomic import write_bytes
    parts = max(1, min(parts, len(lines)))
    for p in range(parts):
        write_bytes(os.path.join(folder, f"part-{p:05d}.txt"), "".join(ln + "\n" for ln in lines[p::parts]).encode())
    return parts


class Backprojection(Workload):
    """FDK slab reconstruction.

    Parameters
    ----------
    projections : list of str
        SequenceFiles of projections (one record per angle, sorted by key).
    geometry : str
        Geometry JSON file.
    filter_name : str
    i0 : float, optional
        Convert raw intensities with ``-log(I / I0)``.
    """

    name = "backprojection"
    gpu_batch = 4  # slabs per GPU call: pipelined through two reused device and page-locked buffers

    def __init__(self, projections, geometry, filter_name=FILTERS[0], i0=None):
        self.geometry = geom.load(geometry)
        # rows filtered when a slab first needs them (gpumr.ct.bands): a task filters its slabs' bands only
        self.rows = FilteredRows(read_set(projections, self.geometry, i0), self.geometry, filter_name)
        self.padded = self.rows.padded
        nz, ny, nx = self.geometry.nVoxel
        self.gpu_memory = self.padded.nbytes + 64 * ny * nx * 4  # projections + a 64-slice slab

    def decode(self, key, value):
        return parse_slab(value, self.geometry)

    def run_cpu(self, slab):
        return backproject(None, self.geometry, slab[0], slab[1], padded=self.rows.need(*slab))

    def outputs(self, key, slab, volume, device):
        nz = self.geometry.nVoxel[0]
        return [(slice_key(z), encode_slice(z, nz, volume[i], device)) for i, z in enumerate(range(*slab))]

    def gpu_backend(self, simulated=False):
        from ..gpu.launch import available
        ok, _ = available(simulated)
        if not ok:
            return None
        from .backproject_gpu import SlabBackprojector
        return SlabBackprojector(self.rows.all(), self.geometry)


class Backproject(Declaration):
    """FDK backprojection, declared once for every engine (:mod:`gpumr.core.declare`).

    Its records are slab lines ``z0 z1``: engines that plan their own input
    (Spark, Dask, ``gpumr run``) make them from :attr:`launcher_options`
    (:meth:`plan`); the mrjob job reads plan files (``gpumr ct plan``).
    """

    name = "backproject"
    summary = "FDK cone-beam reconstruction, one slab of slices per record; per slab a free GPU or the CPU."
    input = "slabs"
    options = (
        Option("--projections", "SequenceFile of projections, one record per angle (required; shipped to the tasks)",
               metavar="SEQ", side_file=True),
        Option("--geometry", "geometry JSON (default: the .geometry.json beside --projections; shipped)",
               metavar="JSON", side_file=True),
        Option("--filter", f"ramp filter window (default {FILTERS[0]})", default=FILTERS[0], choices=FILTERS),
        Option("--i0", "projections are raw intensities: use -log(I/I0) (I0 over 0)", type=float, above=0,
               most=limits.MAX_I0),
        Option("--cpu-threads", "threads of the CPU backprojector per task (default: all cores)", type=int,
               metavar="N", least=1, most=limits.MAX_THREADS, integer=True),
    )
    #: Options of the engines that make the slab plan themselves.
    launcher_options = (
        Option("--slab", "slices per record (default 16)", type=int, default=16, metavar="N", least=1,
               integer=True),
    )

    def prepare(self, values):
        from ..io.inputs import is_file
        projections = values.get("--projections")
        if projections and not values.get("--geometry") and is_file(geom.beside(projections)):
            return {"--geometry": geom.beside(projections)}
        return {}

    def check(self, o):
        import os

        from ..io.inputs import describe_file, looks_like_sequencefile
        from .projections import read_set
        super().check(o)
        if not o.projections:
            raise GpumrError("--projections is required: the SequenceFile of projections (gpumr ct phantom makes one)")
        if not os.path.isfile(o.projections):
            raise GpumrError(f"--projections {o.projections}: no such file")
        if not looks_like_sequencefile(o.projections):
            raise GpumrError(f"--projections {o.projections}: {describe_file(o.projections)}")
        if not o.geometry:
            raise GpumrError(f"--geometry is required: no {geom.beside(o.projections)} beside the projections")
        # Every projection is read once here, one at a time, and checked as the tasks will load them
        # (count, sizes, no NaN or infinity), so that a bad one is refused before any task starts.
        read_set([o.projections], geom.load(o.geometry), o.i0, keep=False)

    def plan(self, o):
        """The slab lines of the volume, ``o.slab`` slices each (checked against the slab limit)."""
        for option in self.launcher_options:
            option.check(getattr(o, option.dest))
        g = geom.load(o.geometry)
        check_slab(g, o.slab)
        return plan(g.nVoxel[0], o.slab)

    def make(self, o):
        if o.cpu_threads:
            from .backproject import set_threads
            set_threads(o.cpu_threads)
        return Backprojection([o.projections], o.geometry, o.filter, o.i0)


#: The declaration of backprojection.
DECLARATION = Backproject()
