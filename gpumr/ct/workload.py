"""Slab backprojection (FDK) as a gpumr workload: one record = one slab [z0, z1) of slices."""

from .. import limits
from ..core.workload import Option, Workload
from ..errors import GpumrError
from . import FILTERS
from . import geometry as geom
from .backproject import backproject
from .bands import FilteredRows
from .projections import read_set
from .slices import slab_key

#: The geometries this process loaded, by file (device, inode, size, modification time), each with whether its
#: warnings were said: the launcher's check and plan and the tasks of the launcher's own process (the inline
#: runner's, whose side file is a hard link to the same file) load a geometry once.
_LOADED = {}


def load_geometry(path, warn=False):
    """The geometry in file ``path`` (:func:`gpumr.ct.geometry.load`), loaded once per process while the file is
    unchanged; ``warn``: its warnings said (once, on the launcher's side)."""
    import os

    def identity():
        st = os.stat(path)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
    try:
        key = identity()
    except OSError:
        return geom.load(path, warn)  # (which says what is wrong)
    if key in _LOADED and (_LOADED[key][1] or not warn):
        return _LOADED[key][0]
    g = geom.load(path, warn)
    if identity() == key:  # (not replaced while it was read)
        while len(_LOADED) >= 8:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = (g, warn)
    return g


def check_slab(geometry, slices):
    """Refuse ``--slab`` ``slices`` (at most the volume's) holding more than :data:`gpumr.limits.MAX_SLAB_VOXELS`
    voxels. Raises ``GpumrError`` naming the option and the slab's size."""
    nz, ny, nx = geometry.nVoxel
    slices = min(slices, nz)  # a plan's slabs are at most the volume
    limits.at_most(f"--slab: a slab of {slices} slices of {ny}x{nx}", slices * ny * nx, limits.MAX_SLAB_VOXELS,
                   "voxels")


def plan(nz, slab):
    """The slabs ``(z0, z1)`` covering ``nz`` slices, ``slab`` at a time.

    Examples
    --------
    >>> plan(40, 16)
    [(0, 16), (16, 32), (32, 40)]
    """
    return [(z, min(z + slab, nz)) for z in range(0, nz, slab)]


class Backproject(Workload):
    """FDK cone-beam reconstruction, one slab of slices per record; per slab a free GPU or the CPU."""

    name = "backproject"
    summary = "FDK cone-beam reconstruction, one slab of slices per record; per slab a free GPU or the CPU."
    input = "plan"
    decode = "raw"
    gpu_records = 4  # slabs per GPU call: pipelined through two reused device and page-locked buffers
    gpu_owner = True  # (the projections, filtered, on the device: once per node, not per task)
    options = (
        Option("--projections", "SequenceFile of projections, one record per angle (required; shipped to the tasks)",
               metavar="SEQ", side_file=True),
        Option("--geometry", "geometry JSON (default: the .geometry.json beside --projections; shipped)",
               metavar="JSON", side_file=True),
        Option("--slab", "slices per record (default 16)", type=int, default=16, metavar="N", least=1),
        Option("--filter", f"ramp filter window (default {FILTERS[0]})", default=FILTERS[0], choices=FILTERS),
        Option("--i0", "projections are raw intensities: use -log(I/I0) (I0 over 0)", type=float, above=0,
               most=limits.MAX_I0, metavar="I0"),
        Option("--cpu-threads", "threads of the CPU backprojector per task (default: all cores)", type=int,
               metavar="N", least=1, most=limits.MAX_THREADS),
    )

    # -- once per job --------------------------------------------------------------------------------
    def resolve(self, options):
        from ..io.inputs import is_file
        if options.projections and not options.geometry and is_file(geom.beside(options.projections)):
            options.geometry = geom.beside(options.projections)

    def check(self, options):
        import os

        from ..io.inputs import describe_file, looks_like_sequencefile
        if not options.projections:
            raise GpumrError("--projections is required: the SequenceFile of projections (gpumr ct phantom makes one)")
        if not os.path.isfile(options.projections):
            raise GpumrError(f"--projections {options.projections}: no such file")
        if not looks_like_sequencefile(options.projections):
            raise GpumrError(f"--projections {options.projections}: {describe_file(options.projections)}")
        if not options.geometry:
            raise GpumrError(f"--geometry is required: no {geom.beside(options.projections)} beside the projections")
        g = load_geometry(options.geometry, warn=True)
        check_slab(g, options.slab)
        # Every projection is read once here, one at a time, and checked as the tasks will load them
        # (count, sizes, no NaN or infinity), so that a bad one is refused before any task starts.
        read_set([options.projections], g, options.i0, keep=False)

    def plan(self, options):
        """The slab records of the volume, ``options.slab`` slices each (as :meth:`check` allowed):
        ``(key, [z0, z1])``."""
        g = load_geometry(options.geometry)  # (the one check loaded)
        return [(slab_key(z0), [z0, z1]) for z0, z1 in plan(g.nVoxel[0], options.slab)]

    def task_threads(self, options):
        import os
        return options.cpu_threads or os.cpu_count() or 1  # (the backprojector's threads: every core unless told)

    # -- in each task --------------------------------------------------------------------------------
    def setup(self, options):
        if options.cpu_threads:
            from .backproject import set_threads
            set_threads(options.cpu_threads)
        self.geometry = load_geometry(options.geometry)  # (the launcher's check said what there is to say)
        self._rows, self._read = None, ([options.projections], self.geometry, options.i0, options.filter)
        self._gpu = None

    @property
    def rows(self):
        """The projections, read when a slab first needs them (a task whose slabs all go to the GPU owner reads
        none), filtered a band at a time (:class:`gpumr.ct.bands.FilteredRows`); a read that failed is not tried
        again."""
        if self._rows is None:
            if isinstance(self._read, BaseException):
                raise self._read  # (read once: every slab of the task is told the same reason)
            try:
                self._rows = FilteredRows.read(*self._read)
            except Exception as exc:
                self._read = exc
                raise
        return self._rows

    def load(self, key, value, options):
        z0, z1 = value  # (planned and checked by the launcher)
        return z0, z1

    def cpu(self, key, slab, options):
        return self._result(slab, backproject(None, self.geometry, slab[0], slab[1], padded=self.rows.need(*slab)))

    def _result(self, slab, volume):
        return {"z": list(slab), "nz": int(self.geometry.nVoxel[0]), "slab": volume}

    def gpu_ready(self, options, simulated):
        from ..gpu.launch import available
        ok, why = available(simulated)
        if not ok:
            return why
        from .backproject_gpu import SlabBackprojector
        # CuPy before PyCUDA: its FFT filters the projections on the device (PyCUDA has none)
        self._gpu = SlabBackprojector(self.rows, self.geometry, prefer="cupy")
        return None

    def gpu_batch(self, records, options, device):
        slabs = [slab for _, slab in records]
        return [self._result(slab, v) for slab, v in zip(slabs, self._gpu.run(slabs, device.gpu))]

    def gpu_memory(self, slabs, options):
        nz, ny, nx = self.geometry.nVoxel
        nv, nu = self.geometry.nDetector
        from .fdk_gpu import device_bytes
        padded = self.geometry.n_angles * (nv + 2) * (nu + 2) * 4
        return padded + 64 * ny * nx * 4 + device_bytes(self.geometry)  # projections, a 64-slice slab, the filter
