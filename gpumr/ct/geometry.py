"""Circular cone-beam geometry with TIGRE-style names, stored as JSON.

Fields: ``DSO`` (source to rotation axis), ``DSD`` (source to detector),
``nDetector`` [rows, cols], ``dDetector`` [row pitch, col pitch],
``nVoxel`` [z, y, x], ``dVoxel`` [z, y, x]; optional ``offOrigin`` [z, y, x]
(volume centre), ``offDetector`` [row, col] (detector centre shift) and
``angles`` (radians; default: ``nAngles`` equally spaced over a full turn).
"""

import json
import math
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..errors import GpumrError

_REQUIRED = ("DSO", "DSD", "nDetector", "dDetector", "nVoxel", "dVoxel")


@dataclass
class Geometry:
    """A validated cone-beam geometry (see the module docstring for the fields)."""

    DSO: float
    DSD: float
    nDetector: tuple
    dDetector: tuple
    nVoxel: tuple
    dVoxel: tuple
    angles: np.ndarray
    offOrigin: tuple = (0.0, 0.0, 0.0)
    offDetector: tuple = (0.0, 0.0)
    source: str = field(default="", compare=False)

    @property
    def n_angles(self):
        return len(self.angles)

    @property
    def volume_size(self):
        """Physical size of the volume [z, y, x] in mm."""
        return tuple(n * d for n, d in zip(self.nVoxel, self.dVoxel))

    def to_dict(self):
        return dict(DSO=self.DSO, DSD=self.DSD, nDetector=list(self.nDetector), dDetector=list(self.dDetector),
                    nVoxel=list(self.nVoxel), dVoxel=list(self.dVoxel), offOrigin=list(self.offOrigin),
                    offDetector=list(self.offDetector), angles=[float(a) for a in self.angles])

    def save(self, path):
        """Write the geometry as JSON, atomically."""
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".geometry.", dir=folder)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


def _vec(d, name, n, source, kind=float, positive=True):
    v = d[name]
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise GpumrError(f"{source}: {name} must be a list of {n} numbers, got {v!r}")
    try:
        v = tuple(kind(x) for x in v)
    except (TypeError, ValueError):
        raise GpumrError(f"{source}: {name} must hold numbers, got {d[name]!r}") from None
    if positive and any(x <= 0 for x in v):
        raise GpumrError(f"{source}: {name} must be positive, got {list(v)}")
    return v


def from_dict(d, source="geometry"):
    """Build and check a :class:`Geometry`.

    Raises
    ------
    GpumrError
        Missing fields, non-positive sizes or distances, ``DSD <= DSO``, or a
        detector too small to see the whole volume.
    """
    if not isinstance(d, dict):
        raise GpumrError(f"{source}: a geometry must be a JSON object")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise GpumrError(f"{source}: missing field(s) {', '.join(missing)}")
    try:
        dso, dsd = float(d["DSO"]), float(d["DSD"])
    except (TypeError, ValueError):
        raise GpumrError(f"{source}: DSO and DSD must be numbers") from None
    if dso <= 0 or dsd <= 0:
        raise GpumrError(f"{source}: DSO and DSD must be positive (DSO={dso}, DSD={dsd})")
    if dsd <= dso:
        raise GpumrError(f"{source}: DSD ({dsd}) must exceed DSO ({dso}): the detector lies beyond the axis")
    n_det = _vec(d, "nDetector", 2, source, int)
    d_det = _vec(d, "dDetector", 2, source)
    n_vox = _vec(d, "nVoxel", 3, source, int)
    d_vox = _vec(d, "dVoxel", 3, source)
    off_o = _vec(d, "offOrigin", 3, source, positive=False) if "offOrigin" in d else (0.0, 0.0, 0.0)
    off_d = _vec(d, "offDetector", 2, source, positive=False) if "offDetector" in d else (0.0, 0.0)
    if "angles" in d:
        angles = np.asarray(d["angles"], dtype=np.float64)
        if angles.ndim != 1 or len(angles) == 0 or not np.all(np.isfinite(angles)):
            raise GpumrError(f"{source}: angles must be a non-empty list of finite numbers")
    elif "nAngles" in d:
        n = int(d["nAngles"])
        if n <= 0:
            raise GpumrError(f"{source}: nAngles must be positive")
        angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
    else:
        raise GpumrError(f"{source}: missing field angles (or nAngles)")
    g = Geometry(dso, dsd, n_det, d_det, n_vox, d_vox, angles, off_o, off_d, source)
    _check_coverage(g)
    return g


def _check_coverage(g):
    """The detector must see the whole volume from every angle."""
    sz, sy, sx = g.volume_size
    radius = math.hypot(sx / 2 + abs(g.offOrigin[2]), sy / 2 + abs(g.offOrigin[1]))
    if radius >= g.DSO:
        raise GpumrError(f"{g.source or 'geometry'}: the volume (radius {radius:.1f} mm) reaches the source "
                         f"(DSO {g.DSO} mm)")
    mag = g.DSD / (g.DSO - radius)  # largest magnification, at the voxel nearest the source
    need_u = 2 * radius * mag
    need_v = (sz + 2 * abs(g.offOrigin[0])) * mag
    have_v, have_u = (n * d for n, d in zip(g.nDetector, g.dDetector))
    if need_u > have_u * 1.0001 or need_v > have_v * 1.0001:
        raise GpumrError(f"{g.source or 'geometry'}: detector too small for the volume: it spans "
                         f"{have_u:.1f} x {have_v:.1f} mm (cols x rows), the volume's shadow needs up to "
                         f"{need_u:.1f} x {need_v:.1f} mm")


def load(path):
    """Read a geometry JSON file.

    Raises
    ------
    GpumrError
        Unreadable file, bad JSON, or an invalid geometry (file named).
    """
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as exc:
        raise GpumrError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise GpumrError(f"{path}: not JSON: {exc}") from None
    return from_dict(d, path)


def simple(n_voxel=128, n_angles=180, n_detector=None, voxel=1.0, dso=None, dsd=None):
    """A cubic volume of ``n_voxel``^3 voxels of ``voxel`` mm with a detector that covers it."""
    size = n_voxel * voxel
    dso = dso or 4 * size
    dsd = dsd or 1.5 * dso
    radius = size / math.sqrt(2)
    mag = dsd / (dso - radius)
    n_det = n_detector or int(math.ceil(n_voxel * 1.15))
    pitch = max(2 * radius, size) * mag / n_det * 1.02
    return from_dict(dict(DSO=dso, DSD=dsd, nDetector=[n_det, n_det], dDetector=[pitch, pitch],
                          nVoxel=[n_voxel] * 3, dVoxel=[voxel] * 3, nAngles=n_angles))
