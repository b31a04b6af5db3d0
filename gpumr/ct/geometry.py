"""Circular cone-beam geometry with TIGRE-style names, stored as JSON."""

import json
import math
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from .. import limits
from ..errors import GpumrError
from ..io.outputs import write_file
from ..limits import (
    MAX_ANGLE_RAD,
    MAX_ANGLES,
    MAX_DETECTOR_PIXELS,
    MAX_DETECTOR_SIDE,
    MAX_GEOMETRY_BYTES,
    MAX_LENGTH_MM,
    MAX_PROJECTION_SAMPLES,
    MAX_VOXEL_SIDE,
    MAX_VOXELS,
)
from ..log import logger, say_once

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
        """Write the geometry as JSON to ``path`` under gpumr's output rule (:func:`gpumr.io.outputs.write_file`: replaced only
        if gpumr wrote it). Raises ``GpumrError`` if a file of someone else's is in the way."""
        write_file(path, json.dumps(self.to_dict(), indent=1).encode(), "gpumr ct geometry")


def _vec(d, name, n, source, integer=False, most=MAX_LENGTH_MM, signed=False):
    """Field ``name`` of ``d``: a list of ``n`` numbers, each checked against its limits (GpumrError)."""
    v = d[name]
    if not isinstance(v, (list, tuple, np.ndarray)) or len(v) != n:
        raise GpumrError(f"{source}: {name} must be a list of {n} numbers, not {limits.shown(v)}")
    if integer:
        return tuple(limits.number(f"{source}: {name}[{i}]", x, 1, most, integer=True) for i, x in enumerate(v))
    if signed:
        return tuple(float(limits.number(f"{source}: {name}[{i}]", x, -most, most)) for i, x in enumerate(v))
    return tuple(float(limits.number(f"{source}: {name}[{i}]", x, above=0, most=most)) for i, x in enumerate(v))


def _angles(d, source):
    """The projection angles (radians) from ``angles``, or ``nAngles`` over a full turn; checked first."""
    if "angles" in d:
        a = d["angles"]
        listed = isinstance(a, (list, tuple, np.ndarray))
        if not listed or not 1 <= len(a) <= MAX_ANGLES:
            raise GpumrError(f"{source}: angles must be a list of 1 to {MAX_ANGLES:,} numbers (radians), not "
                             + (f"a list of {len(a):,}" if listed else limits.shown(a)))
        return np.array([limits.number(f"{source}: angles[{i}]", x, -MAX_ANGLE_RAD, MAX_ANGLE_RAD)
                         for i, x in enumerate(a)], np.float64)
    if "nAngles" in d:
        n = limits.number(f"{source}: nAngles", d["nAngles"], 1, MAX_ANGLES, integer=True)
        return np.linspace(0, 2 * np.pi, n, endpoint=False)
    raise GpumrError(f"{source}: missing field angles (or nAngles)")


def from_dict(d, source="geometry", warn=True):
    """Build and check a :class:`Geometry`. Raises ``GpumrError`` naming the field: missing, of the wrong
    type or shape, out of its limits, ``DSD <= DSO``, a volume reaching the source, or a detector that misses the
    volume entirely; ``A volume partly outside the field of view is a warning`` or ``said once``.

    Parameters
    ----------
    d : dict
        The fields, as parsed from JSON (:doc:`/reference/geometry`).
    source : str, optional
        What to name in an error (the file).
    warn : bool, optional
        Warn when part of the volume lies outside the field of view; False where the launcher checked the geometry and
        said so already (a task).

    Returns
    -------
    Geometry
        The checked geometry."""
    if not isinstance(d, dict):
        raise GpumrError(f"{source}: a geometry must be a JSON object")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise GpumrError(f"{source}: missing field(s) {', '.join(missing)}")
    dso = float(limits.number(f"{source}: DSO", d["DSO"], above=0, most=MAX_LENGTH_MM))
    dsd = float(limits.number(f"{source}: DSD", d["DSD"], above=0, most=MAX_LENGTH_MM))
    if dsd <= dso:
        raise GpumrError(f"{source}: DSD ({dsd}) must exceed DSO ({dso}): the detector lies beyond the axis")
    n_det = _vec(d, "nDetector", 2, source, integer=True, most=MAX_DETECTOR_SIDE)
    limits.at_most(f"{source}: nDetector {list(n_det)}", n_det[0] * n_det[1], MAX_DETECTOR_PIXELS,
                   "detector pixels")
    d_det = _vec(d, "dDetector", 2, source)
    n_vox = _vec(d, "nVoxel", 3, source, integer=True, most=MAX_VOXEL_SIDE)
    limits.at_most(f"{source}: nVoxel {list(n_vox)}", math.prod(n_vox), MAX_VOXELS, "voxels")
    d_vox = _vec(d, "dVoxel", 3, source)
    off_o = _vec(d, "offOrigin", 3, source, signed=True) if "offOrigin" in d else (0.0, 0.0, 0.0)
    off_d = _vec(d, "offDetector", 2, source, signed=True) if "offDetector" in d else (0.0, 0.0)
    angles = _angles(d, source)
    limits.at_most(f"{source}: {len(angles):,} angles of {n_det[0]}x{n_det[1]} pixels",
                   len(angles) * n_det[0] * n_det[1], MAX_PROJECTION_SAMPLES, "projection samples")
    g = Geometry(dso, dsd, n_det, d_det, n_vox, d_vox, angles, off_o, off_d, source)
    _check_coverage(g, warn)
    return g


def _shadow(g):
    """Detector coordinates (mm, from the detector's centre line) of the volume box's corners at every angle."""
    sz, sy, sx = g.volume_size
    oz, oy, ox = g.offOrigin
    corners = np.array([(ox + i * sx / 2, oy + j * sy / 2, oz + k * sz / 2)
                        for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)])
    b = np.asarray(g.angles, np.float64)[:, None]
    x, y, z = corners[:, 0][None, :], corners[:, 1][None, :], corners[:, 2][None, :]
    t = x * np.cos(b) + y * np.sin(b)
    s = -x * np.sin(b) + y * np.cos(b)
    mag = g.DSD / (g.DSO - t)
    return s * mag, z * mag


def _check_coverage(g, warn=True):
    """Refuse what cannot be reconstructed; warn once when part of the volume is not fully measured."""
    where = g.source or "geometry"
    sz, sy, sx = g.volume_size
    radius = math.hypot(sx / 2 + abs(g.offOrigin[2]), sy / 2 + abs(g.offOrigin[1]))
    if radius >= g.DSO:
        raise GpumrError(f"{where}: the volume (radius {radius:.1f} mm about the axis) reaches the source "
                         f"(DSO {g.DSO} mm)")
    u, v = _shadow(g)
    (rows, cols), (dv, du), (ov, ou) = g.nDetector, g.dDetector, g.offDetector
    u_lo, u_hi = ou - cols * du / 2, ou + cols * du / 2
    v_lo, v_hi = ov - rows * dv / 2, ov + rows * dv / 2
    seen = (u.max(1) > u_lo) & (u.min(1) < u_hi) & (v.max(1) > v_lo) & (v.min(1) < v_hi)
    if not seen.any():
        raise GpumrError(f"{where}: the detector ({cols * du:.1f} x {rows * dv:.1f} mm, offset {ou:g}, {ov:g} mm) "
                         f"misses the volume's shadow at every angle")
    inside = (u.min(1) >= u_lo - 1e-9) & (u.max(1) <= u_hi + 1e-9) & (v.min(1) >= v_lo - 1e-9) & (v.max(1) <= v_hi + 1e-9)
    if warn and not inside.all():
        half = min(-u_lo, u_hi)
        fov = g.DSO * half / math.hypot(g.DSD, half) if half > 0 else 0.0
        say_once(logger(__name__), f"{where}: part of the volume lies outside the field of view at "
                 f"{np.count_nonzero(~inside)} of {g.n_angles} angles (the detector sees a cylinder of radius {fov:.1f} "
                 f"mm about the axis; the volume reaches {radius:.1f} mm): voxels there are not fully measured")


def beside(projections):
    """Where the geometry of the projections file ``projections`` (a path or a URI) lives: ``NAME.geometry.json`` beside it.

    Examples
    --------
    >>> beside("data/scan.seq")
    'data/scan.geometry.json'
    """
    return os.path.splitext(projections)[0] + ".geometry.json"


def load(path, warn=True):
    """Read a geometry JSON file (at most :data:`gpumr.limits.MAX_GEOMETRY_BYTES`). Raises ``GpumrError``: unreadable,
    not a regular file, too large, bad JSON, or an invalid geometry (file named).

    Parameters
    ----------
    path : str
        The file (a regular file; no FIFO or device).
    warn : bool, optional
        Warn about a volume partly outside the field of view (:func:`from_dict`).

    Returns
    -------
    Geometry
        The checked geometry (:func:`from_dict`)."""
    from ..io.remote import kind
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:  # a FIFO is refused, not waited on
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise GpumrError(f"{path}: {kind(st.st_mode)}, not a geometry file")
            if st.st_size > MAX_GEOMETRY_BYTES:
                raise GpumrError(f"{path}: over {MAX_GEOMETRY_BYTES:,} bytes: too large for a geometry file")
            raw = f.read(st.st_size)  # (a read of n bytes sets n aside first: never the cap)
    except OSError as exc:
        raise GpumrError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        d = json.loads(raw)
    except ValueError as exc:
        raise GpumrError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise GpumrError(f"{path}: not JSON a geometry can be: nested too deeply") from None
    return from_dict(d, path, warn)


def _triple(v, n):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise GpumrError(f"expected 1 or {n} values, got {len(v)}: {list(v)}")
    return v


def build(n_voxel=128, voxel=1.0, n_angles=180, dso=None, dsd=None, n_detector=None, pitch=None,
          off_detector=(0.0, 0.0), off_origin=(0.0, 0.0, 0.0), arc=2 * math.pi, start=0.0, short_scan=False,
          source="geometry"):
    """A scanner's geometry from its parameters, with defaults that make a detector covering the volume.

    Parameters
    ----------
    n_voxel, voxel : int / float, or [z, y, x]
        Voxels per side (or per axis) and their size in mm.
    n_angles : int
        Projections, equally spaced over ``arc`` from ``start`` (radians), the end excluded.
    dso, dsd : float, optional
        Source to axis and source to detector, mm (default 4 x the volume's largest side, and 1.5 x DSO).
    n_detector, pitch : int / float, or [rows, cols], optional
        Detector pixels and their pitch in mm (default: enough to see the whole volume, 15% more pixels than voxels
        across).
    off_detector : [row, col]
        Detector centre shift, mm. ``off_origin`` [z, y, x]: volume centre shift, mm.
    short_scan : bool
        Make ``arc`` the shortest that Parker's weights allow: pi plus twice the half fan angle.
    source : str, optional
        What a warning or an error names: the file the geometry is written to."""
    nz, ny, nx = (limits.number("--voxels", n, 1, MAX_VOXEL_SIDE, integer=True) for n in _triple(n_voxel, 3))
    dz, dy, dx = (float(limits.number("--voxel-size", d, above=0, most=MAX_LENGTH_MM)) for d in _triple(voxel, 3))
    n_angles = limits.number("--angles", n_angles, 1, MAX_ANGLES, integer=True)
    arc, start = float(limits.number("--arc", arc)), float(limits.number("--start", start))
    for name, value in (("--dso", dso), ("--dsd", dsd)):
        if value is not None:
            limits.number(name, value, above=0, most=MAX_LENGTH_MM)
    for name, values in (("--off-detector", off_detector), ("--off-origin", off_origin)):
        for v in values:
            limits.number(name, v, -MAX_LENGTH_MM, MAX_LENGTH_MM)
    size = max(nz * dz, ny * dy, nx * dx)
    dso = dso or 4 * size
    dsd = dsd or 1.5 * dso
    radius = math.hypot(nx * dx / 2, ny * dy / 2)
    mag = dsd / max(dso - radius, 1e-9)
    if n_detector is None:
        n_detector = int(math.ceil(max(nz, ny, nx) * 1.15))
    rows, cols = (limits.number("--detector", n, 1, MAX_DETECTOR_SIDE, integer=True) for n in _triple(n_detector, 2))
    if pitch is None:  # square pixels, enough for the volume's shadow both ways
        pitch = max(nz * dz / rows, 2 * radius / cols) * mag * 1.02
    pv, pu = (float(limits.number("--pitch", p, above=0, most=MAX_LENGTH_MM)) for p in _triple(pitch, 2))
    if short_scan:
        half = max(abs(off_detector[1] - cols * pu / 2), abs(off_detector[1] + cols * pu / 2))
        arc = math.pi + 2 * math.atan(half / dsd) + 1e-6
    angles = start + np.arange(n_angles) * (arc / n_angles)
    return from_dict(dict(DSO=dso, DSD=dsd, nDetector=[rows, cols], dDetector=[pv, pu], nVoxel=[nz, ny, nx],
                          dVoxel=[dz, dy, dx], offOrigin=list(off_origin), offDetector=list(off_detector),
                          angles=list(angles)), source)


def simple(n_voxel=128, n_angles=180, n_detector=None, voxel=1.0, dso=None, dsd=None):
    """A checked cubic volume of ``n_voxel``^3 voxels of ``voxel`` mm, ``n_angles`` projections over a full turn, a square
    detector that covers it (by default 15% more pixels than voxels across; ``dso`` 4 times the volume's side, ``dsd``
    1.5 times ``dso``).

    Examples
    --------
    >>> g = simple(64, 90)
    >>> g.nDetector, g.DSO, g.DSD, len(g.angles)
    ((74, 74), 256.0, 384.0, 90)
    """
    return build(n_voxel, voxel, n_angles, dso, dsd, n_detector)
