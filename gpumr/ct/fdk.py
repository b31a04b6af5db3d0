"""FDK pre-processing: cosine weighting and ramp filtering of cone-beam projections."""

import numpy as np

from ..errors import GpumrError
from . import FILTERS

#: Bytes of spectrum :func:`filter_projections` holds at a time (it transforms that many angles together).
FILTER_BUFFER = 16 << 20


def window(name, f):
    """The apodisation window ``name`` (one of :data:`FILTERS`) at frequencies ``f`` (cycles per sample, ``|f| <= 1/2``).
    Raises ``GpumrError`` for an unknown filter name (the message lists the known ones).

    Examples
    --------
    >>> window("hann", np.array([0, 0.25]))
    array([1. , 0.5])
    """
    if name == "ram-lak":
        return np.ones_like(f)
    if name == "shepp-logan":
        return np.sinc(f)
    if name == "cosine":
        return np.cos(np.pi * f)
    if name == "hamming":
        return 0.54 + 0.46 * np.cos(2 * np.pi * f)
    if name == "hann":
        return 0.5 + 0.5 * np.cos(2 * np.pi * f)
    raise GpumrError(f"unknown filter {name!r}; choose from {', '.join(FILTERS)}")


def transform_length(n_cols):
    """The ramp's transform length for rows of ``n_cols`` columns: the power of two at least ``2 n_cols`` (zero padding
    against wrap-around).

    Examples
    --------
    >>> transform_length(100), transform_length(1024)
    (256, 2048)
    """
    return 1 << int(np.ceil(np.log2(max(2 * n_cols, 2))))


def ramp(n_cols, tau, name="ram-lak"):
    """Frequency response of the ramp filter windowed by ``name`` (:func:`window`), times ``tau`` (the detector pitch at the
    rotation axis, mm): ``N`` real values in numpy's FFT order, ``N`` the :func:`transform_length`.

    Examples
    --------
    >>> ramp(100, 1.0).shape
    (256,)
    """
    n = transform_length(n_cols)
    k = np.fft.fftfreq(n, d=1.0 / n).astype(int)  # 0, 1, ..., -1 : circular sample offsets
    h = np.zeros(n)
    h[k == 0] = 1 / (4 * tau * tau)
    odd = k % 2 == 1
    h[odd] = -1 / (np.pi * k[odd] * tau) ** 2
    response = np.real(np.fft.fft(h)) * tau
    return response * window(name, np.fft.fftfreq(n))


def angle_weights(angles):
    """Each angle's share of the turn (``d_beta``), for equally or unequally spaced full scans: half the gaps to its two
    neighbours around the circle; they sum to ``2 pi``.

    Examples
    --------
    >>> angle_weights([0, np.pi / 2, np.pi, 3 * np.pi / 2]) * 2 / np.pi
    array([1., 1., 1., 1.])
    """
    a = np.unwrap(np.asarray(angles, dtype=np.float64))
    if len(a) == 1:
        return np.array([2 * np.pi])
    order = np.argsort(a)
    s = a[order]
    gaps = np.diff(np.concatenate([s, [s[0] + 2 * np.pi]]))
    share = (gaps + np.roll(gaps, 1)) / 2
    out = np.empty_like(share)
    out[order] = share
    return out


def parker_weights(angles, gamma):
    """Parker's short-scan weights [angle, col] for fan angles ``gamma`` of the columns. Raises ``GpumrError`` if the
    scan covers less than ``pi + 2 delta``.

    Parameters
    ----------
    angles : array_like
        Projection angles, radians, covering at least ``pi + 2 delta``.
    gamma : numpy.ndarray
        Each detector column's fan angle, radians (``delta`` is the largest).

    Returns
    -------
    numpy.ndarray
        Weights in [0, 1], shape (angles, columns): each ray measured twice counts once in total."""
    a = np.unwrap(np.asarray(angles, np.float64))
    direction = 1.0 if len(a) < 2 or a[-1] >= a[0] else -1.0
    beta = (a - a[0]) * direction  # angle travelled from the start of the scan
    # Parker's fan angle grows against our column axis (-sin b, cos b) as the source turns.
    gamma = -np.asarray(gamma, np.float64) * direction
    delta = np.abs(gamma).max()
    span = beta.max() + (np.median(np.diff(np.sort(beta))) if len(beta) > 1 else 0)
    if span < np.pi + 2 * delta - 1e-9:
        raise GpumrError(f"short scan of {span:.4f} rad: Parker weighting needs at least pi + 2 x fan half-angle "
                         f"= {np.pi + 2 * delta:.4f} rad")
    b = beta[:, None]
    g = gamma[None, :]
    w = np.ones((len(beta), len(gamma)))
    rise = b < 2 * (delta - g)
    fall = b > np.pi - 2 * g
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(rise, np.sin(np.pi / 4 * b / (delta - g)) ** 2, w)
        w = np.where(fall, np.sin(np.pi / 4 * (np.pi + 2 * delta - b) / (delta + g)) ** 2, w)
    w = np.where(b > np.pi + 2 * delta, 0.0, w)
    return np.nan_to_num(w)


def is_short_scan(angles):
    """Whether ``angles`` (radians) cover less than a full turn (their arc plus one step): such a scan needs Parker's
    weights.

    Examples
    --------
    >>> bool(is_short_scan(np.linspace(0, np.pi, 10))), bool(is_short_scan(np.arange(8) * np.pi / 4))
    (True, False)
    """
    a = np.sort(np.unwrap(np.asarray(angles, np.float64)))
    if len(a) < 2:
        return True
    return (a[-1] - a[0]) + np.median(np.diff(a)) < 2 * np.pi - 1e-6


def factors(geometry, filter_name="ram-lak", rows=None):
    """What FDK multiplies the projections by before and after the ramp (the host's and the device's filter share it).

    Parameters
    ----------
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry.
    filter_name : str, optional
        The ramp's window (:data:`FILTERS`).
    rows : (int, int), optional
        Detector rows [r0, r1) (default: all).

    Returns
    -------
    cosw : numpy.ndarray
        float32 [r1 - r0, col]: the cosine weight ``DSO / sqrt(DSO^2 + u^2 + v^2)`` at the rotation axis.
    weights : numpy.ndarray
        float32 [angle, col]: each angle's share of the turn, halved (Parker's short-scan weights where the scan is
        short).
    response : numpy.ndarray
        float64 [N]: :func:`ramp` at the detector pitch scaled to the rotation axis.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> cosw, weights, response = factors(geometry.simple(8, 4), rows=(2, 5))
    >>> cosw.shape, weights.shape, response.shape
    ((3, 10), (4, 10), (32,))
    """
    nv, nu = geometry.nDetector
    na = geometry.n_angles
    r0, r1 = (0, nv) if rows is None else rows
    dv, du = geometry.dDetector
    ov, ou = geometry.offDetector
    scale = geometry.DSO / geometry.DSD
    u = ((np.arange(nu) - (nu - 1) / 2) * du + ou) * scale
    v = ((np.arange(r0, r1) - (nv - 1) / 2) * dv + ov) * scale
    cosw = (geometry.DSO / np.sqrt(geometry.DSO ** 2 + u[None, :] ** 2 + v[:, None] ** 2)).astype(np.float32)
    if is_short_scan(geometry.angles):
        gamma = np.arctan(((np.arange(nu) - (nu - 1) / 2) * du + ou) / geometry.DSD)
        a = np.unwrap(np.asarray(geometry.angles, np.float64))
        step = np.median(np.abs(np.diff(a))) if na > 1 else 2 * np.pi
        weights = (parker_weights(geometry.angles, gamma) * step).astype(np.float32)
    else:
        weights = np.repeat((angle_weights(geometry.angles) / 2)[:, None], nu, axis=1).astype(np.float32)
    return cosw, weights, ramp(nu, du * scale, filter_name)


def filter_projections(proj, geometry, filter_name="ram-lak", rows=None, threads=1, out=None, progress=None):
    """Cosine-weighted, ramp-filtered and scaled projections, float32 [angle, row, col]. Raises ``GpumrError`` if the
    projections' shape is not the geometry's, or ``rows`` is not a band of the detector.

    Parameters
    ----------
    proj : ndarray [angle, row, col]
        Line integrals, every detector row.
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry (its detector and angle count must match ``proj``).
    filter_name : str, optional
        The ramp's window (:data:`FILTERS`).
    rows : (int, int), optional
        Filter only detector rows [r0, r1) (default: all).
    threads : int, optional
        Threads that filter the angles, a share each (numpy's transforms let go of the interpreter's lock); the result
        is the same for any number, bit for bit.
    out : numpy.ndarray, optional
        float32 [angle, r1 - r0, col] to write the result into (a view of a larger array, or of ``proj``'s own rows)
        instead of a new array.
    progress : callable, optional
        Called with the number of angles just filtered, after each block of them, from the filtering threads (``gpumr
        ct reconstruct``'s progress bar).

    Returns
    -------
    numpy.ndarray
        float32 [angle, rows, col]: all rows, or the ``r1 - r0`` rows asked for (``out``, where given).

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> g = geometry.simple(8, 4)
    >>> q = np.ones((4, *g.nDetector), np.float32)
    >>> bool(np.array_equal(filter_projections(q, g, rows=(2, 5)), filter_projections(q, g)[:, 2:5]))
    True
    >>> p = q.copy()
    >>> _ = filter_projections(p, g, rows=(2, 5), out=p[:, 2:5])  # (in place)
    >>> bool(np.array_equal(p[:, 2:5], filter_projections(q, g)[:, 2:5]) and np.array_equal(p[:, 5:], q[:, 5:]))
    True
    """
    proj = np.asarray(proj, dtype=np.float32)
    na, nv, nu = proj.shape
    if (nv, nu) != tuple(geometry.nDetector) or na != geometry.n_angles:
        raise GpumrError(f"projections are {na}x{nv}x{nu} (angles x rows x cols), the geometry says "
                         f"{geometry.n_angles}x{geometry.nDetector[0]}x{geometry.nDetector[1]}")
    r0, r1 = (0, nv) if rows is None else (int(rows[0]), int(rows[1]))
    if not 0 <= r0 <= r1 <= nv:
        raise GpumrError(f"rows {r0}-{r1} are not a band of the detector's {nv} rows")
    cosw, weights, H = factors(geometry, filter_name, (r0, r1))
    n = len(H)
    if out is None:
        out = np.empty((na, r1 - r0, nu), np.float32)
    elif out.shape != (na, r1 - r0, nu) or out.dtype != np.float32:
        raise ValueError(f"out is {out.dtype} {out.shape}, not float32 {(na, r1 - r0, nu)}")
    if r1 == r0:
        return out
    # A few angles at a time (a bounded buffer, one transform over all their rows), in float32: the
    # projections' precision (float64 moved no value by more than 5e-7 of the largest, and took longer).
    step = max(1, FILTER_BUFFER // ((r1 - r0) * (n // 2 + 1) * 8))
    response = H[: n // 2 + 1].astype(np.float32)

    def angles(a0, a1):
        for i0 in range(a0, a1, step):
            i1 = min(a1, i0 + step)
            rows_ = proj[i0:i1, r0:r1] * cosw[None]
            rows_ *= weights[i0:i1, None, :]
            spectrum = np.fft.rfft(rows_, n=n, axis=2)
            spectrum *= response
            out[i0:i1] = np.fft.irfft(spectrum, n=n, axis=2)[..., :nu]
            if progress is not None:
                progress(i1 - i0)

    threads = max(1, min(int(threads), na))
    if threads == 1:
        angles(0, na)
        return out
    from concurrent.futures import ThreadPoolExecutor
    cuts = np.linspace(0, na, threads + 1).astype(int)
    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(angles, a0, a1) for a0, a1 in zip(cuts[:-1], cuts[1:])]:
            done.result()
    return out
