"""Slab backprojection as a gpumr workload: one record = one slab [z0, z1) of slices.

Each task loads the geometry and the projections once, filters them once
(FDK weighting and ramp), and then backprojects the slabs it is given on
the CPU or a GPU; every slice of a slab becomes an output record.
"""

from .. import limits
from ..core import BadRecord, Workload
from ..errors import GpumrError
from . import geometry as geom
from .backproject import backproject, pad
from .fdk import FILTERS, filter_projections
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
    gpu_batch = 1

    def __init__(self, projections, geometry, filter_name=FILTERS[0], i0=None):
        self.geometry = geom.load(geometry)
        self.padded = pad(filter_projections(read_set(projections, self.geometry, i0), self.geometry, filter_name))
        nz, ny, nx = self.geometry.nVoxel
        self.gpu_memory = self.padded.nbytes + 64 * ny * nx * 4  # projections + a 64-slice slab

    def decode(self, key, value):
        return parse_slab(value, self.geometry)

    def run_cpu(self, slab):
        return backproject(None, self.geometry, slab[0], slab[1], padded=self.padded)

    def outputs(self, key, slab, volume, device):
        nz = self.geometry.nVoxel[0]
        return [(slice_key(z), encode_slice(z, nz, volume[i], device)) for i, z in enumerate(range(*slab))]

    def gpu_backend(self, simulated=False):
        from ..gpu.launch import available
        ok, _ = available(simulated)
        if not ok:
            return None
        from .backproject_gpu import SlabBackprojector
        return SlabBackprojector(self.padded, self.geometry)
