"""The 3D modified Shepp-Logan phantom and its exact cone-beam projections."""

import numpy as np

from ..docstrings import shared

# Parameter text several functions here share (gpumr.docstrings.shared formats it into their docstrings).
_SHARED = {
    "geometry": "geometry : Geometry\n    The scan's geometry (the volume's size and place, the detector).",
    "table": "table : sequence, optional\n    Rows of ``A, a, b, c, x0, y0, z0, phi, theta, psi``, sizes relative to "
             "the volume's half side\n    (default: the 3D modified Shepp-Logan phantom).",
    "angle": "angle : float\n    The source's angle, radians.",
    "noise": "noise_i0 : float, optional\n    Incident photon count per ray for Poisson noise (:func:`add_noise`); "
             "None: exact.\nmu_scale : float, optional\n    Line integrals are scaled by this before the noise is "
             "drawn.\nseed : int, optional\n    The noise's random seed.",
}

#: A, a, b, c, x0, y0, z0, phi, theta, psi
MODIFIED_SHEPP_LOGAN = np.array([
    [1.0, .6900, .920, .810, 0, 0, 0, 0, 0, 0],
    [-.8, .6624, .874, .780, 0, -.0184, 0, 0, 0, 0],
    [-.2, .1100, .310, .220, .22, 0, 0, -18, 0, 10],
    [-.2, .1600, .410, .280, -.22, 0, 0, 18, 0, 10],
    [.1, .2100, .250, .410, 0, .35, -.15, 0, 0, 0],
    [.1, .0460, .046, .050, 0, .1, .25, 0, 0, 0],
    [.1, .0460, .046, .050, 0, -.1, .25, 0, 0, 0],
    [.1, .0460, .023, .050, -.08, -.605, 0, 0, 0, 0],
    [.1, .0230, .023, .020, 0, -.606, 0, 0, 0, 0],
    [.1, .0230, .046, .020, .06, -.605, 0, 0, 0, 0],
])


def _rotation(phi, theta, psi):
    def rz(a):
        c, s = np.cos(a), np.sin(a)
        return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])

    def rx(a):
        c, s = np.cos(a), np.sin(a)
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return rz(np.radians(phi)) @ rx(np.radians(theta)) @ rz(np.radians(psi))


@shared(**_SHARED)
def ellipsoids(geometry, table=MODIFIED_SHEPP_LOGAN):
    """Each ellipsoid of ``table`` scaled to the volume, in mm: ``(A, centre[x, y, z], semi-axes[x, y, z], rotation)``.

    Parameters
    ----------
    {geometry}
    {table}
    """
    sz, sy, sx = geometry.volume_size
    half = np.array([sx, sy, sz]) / 2
    origin = np.array(geometry.offOrigin[::-1], dtype=float)
    out = []
    for A, a, b, c, x0, y0, z0, phi, theta, psi in table:
        out.append((A, origin + np.array([x0, y0, z0]) * half, np.array([a, b, c]) * half,
                    _rotation(phi, theta, psi)))
    return out


@shared(**_SHARED)
def voxel_centres(geometry, z0=0, z1=None):
    """World coordinates x, y and z (mm, each of shape (nz, ny, nx)) of the voxel centres of slices [z0, z1).

    Parameters
    ----------
    {geometry}
    z0, z1 : int, optional
        The first slice and the one after the last (default: all).
    """
    nz, ny, nx = geometry.nVoxel
    dz, dy, dx = geometry.dVoxel
    oz, oy, ox = geometry.offOrigin
    z1 = nz if z1 is None else z1
    zs = (np.arange(z0, z1) - (nz - 1) / 2) * dz + oz
    ys = (np.arange(ny) - (ny - 1) / 2) * dy + oy
    xs = (np.arange(nx) - (nx - 1) / 2) * dx + ox
    z, y, x = np.meshgrid(zs, ys, xs, indexing="ij")
    return x, y, z


@shared(**_SHARED)
def volume(geometry, table=MODIFIED_SHEPP_LOGAN):
    """The phantom sampled at the voxel centres, float32 [z, y, x].

    Parameters
    ----------
    {geometry}
    {table}
    """
    shapes = ellipsoids(geometry, table)
    vol = np.zeros(tuple(geometry.nVoxel), np.float32)
    for z in range(geometry.nVoxel[0]):
        pts = np.stack(voxel_centres(geometry, z, z + 1), axis=-1)[0]
        for A, centre, axes, rot in shapes:
            q = (pts - centre) @ rot / axes  # rot.T applied to row vectors
            vol[z][np.einsum("...i,...i->...", q, q) <= 1] += A
    return vol


@shared(**_SHARED)
def detector_pixels(geometry, angle):
    """World coordinates of every detector pixel centre at ``angle``, mm, shape (rows, cols, 3).

    Parameters
    ----------
    {geometry}
    {angle}
    """
    nv, nu = geometry.nDetector
    dv, du = geometry.dDetector
    ov, ou = geometry.offDetector
    c, s = np.cos(angle), np.sin(angle)
    centre = -(geometry.DSD - geometry.DSO) * np.array([c, s, 0.0])
    u = (np.arange(nu) - (nu - 1) / 2) * du + ou
    v = (np.arange(nv) - (nv - 1) / 2) * dv + ov
    uu, vv = np.meshgrid(u, v)
    return centre + uu[..., None] * np.array([-s, c, 0.0]) + vv[..., None] * np.array([0.0, 0.0, 1.0])


@shared(**_SHARED)
def project(geometry, angle, table=MODIFIED_SHEPP_LOGAN):
    """Exact line integrals through the phantom for one angle, float32 [rows, cols].

    Parameters
    ----------
    {geometry}
    {angle}
    {table}
    """
    source = geometry.DSO * np.array([np.cos(angle), np.sin(angle), 0.0])
    d = detector_pixels(geometry, angle) - source
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    out = np.zeros(d.shape[:2])
    for A, centre, axes, rot in ellipsoids(geometry, table):
        q0 = ((source - centre) @ rot) / axes
        e = (d @ rot) / axes
        ee = np.einsum("...i,...i->...", e, e)
        qe = e @ q0
        disc = qe * qe - ee * (q0 @ q0 - 1)
        out += A * 2 * np.sqrt(np.maximum(disc, 0)) / ee
    return out.astype(np.float32)


def add_noise(projection, i0, mu_scale=0.01, rng=None):
    """Poisson noise on the line integrals ``projection`` (phantom units times mm), float32: counts ``Poisson(i0
    exp(-mu_scale p))`` (``i0`` photons per pixel without the object, ``mu_scale`` the attenuation per phantom unit
    per mm) back to ``-log(counts / i0) / mu_scale``. One generator ``rng`` used over the angles in order gives the
    same noise whether projections are made one at a time or all at once."""
    counts = rng.poisson(i0 * np.exp(-mu_scale * np.asarray(projection, np.float64)))
    return (-np.log(np.maximum(counts, 1) / i0) / mu_scale).astype(np.float32)


@shared(**_SHARED)
def projections(geometry, noise_i0=None, mu_scale=0.01, seed=0, table=MODIFIED_SHEPP_LOGAN):
    """All projections of the phantom, float32 [angle, row, col], with optional Poisson noise.

    Parameters
    ----------
    {geometry}
    {noise}
    {table}
    """
    return np.stack(list(iter_projections(geometry, noise_i0, mu_scale, seed, table)))


@shared(**_SHARED)
def iter_projections(geometry, noise_i0=None, mu_scale=0.01, seed=0, table=MODIFIED_SHEPP_LOGAN):
    """The projections one angle at a time, float32 [row, col] in angle order, so that memory holds one: optional
    Poisson noise.

    Parameters
    ----------
    {geometry}
    {noise}
    {table}
    """
    rng = np.random.default_rng(seed) if noise_i0 else None
    for angle in geometry.angles:
        p = project(geometry, angle, table)
        yield add_noise(p, noise_i0, mu_scale, rng) if noise_i0 else p
