"""Voxel-driven cone-beam backprojection of a slab of slices, on the CPU."""

import os

import numpy as np

#: Slices per call of the kernel. A thread accumulates a row of voxels over every angle for each slice of a
#: call: for 16 slices those sums and the band of detector rows they reach stay in the processor's caches, where a
#: whole volume in one call thrashes them (docs/lab-notes/code-figures.rst).
Z_BLOCK = 16


def _scalars(geometry):
    nv, nu = geometry.nDetector
    dv, du = geometry.dDetector
    ov, ou = geometry.offDetector
    return dict(dso=geometry.DSO, dsd=geometry.DSD, nu=nu, nv=nv,
                cu=(nu - 1) / 2 - ou / du, cv=(nv - 1) / 2 - ov / dv, inv_du=1 / du, inv_dv=1 / dv)


def _axes(geometry):
    nz, ny, nx = geometry.nVoxel
    dz, dy, dx = geometry.dVoxel
    oz, oy, ox = geometry.offOrigin
    return ((np.arange(nz) - (nz - 1) / 2) * dz + oz, (np.arange(ny) - (ny - 1) / 2) * dy + oy,
            (np.arange(nx) - (nx - 1) / 2) * dx + ox)


def backproject_reference(filtered, geometry, z0=0, z1=None):
    """Plain numpy backprojection of slices [z0, z1) in float64 maths: the obviously correct statement.

    Parameters
    ----------
    filtered : numpy.ndarray
        Filtered projections [angle, row, col] (:func:`gpumr.ct.fdk.filter_projections`).
    geometry : Geometry
        The scan's geometry.
    z0, z1 : int, optional
        The slab's first slice and the one after its last (default: the whole volume).

    Returns
    -------
    numpy.ndarray
        float32 [z, y, x], ``z1 - z0`` slices."""
    z1 = geometry.nVoxel[0] if z1 is None else z1
    k = _scalars(geometry)
    zs, ys, xs = _axes(geometry)
    z, y, x = np.meshgrid(zs[z0:z1], ys, xs, indexing="ij")
    vol = np.zeros(z.shape)
    nv, nu = k["nv"], k["nu"]
    for q, b in zip(filtered, geometry.angles):
        t = x * np.cos(b) + y * np.sin(b)
        s = -x * np.sin(b) + y * np.cos(b)
        L = k["dso"] - t
        col = s * k["dsd"] / L * k["inv_du"] + k["cu"]
        row = z * k["dsd"] / L * k["inv_dv"] + k["cv"]
        c0, r0 = np.floor(col).astype(int), np.floor(row).astype(int)
        fc, fr = col - c0, row - r0
        val = np.zeros(z.shape)
        for dr, wr in ((0, 1 - fr), (1, fr)):
            for dc, wc in ((0, 1 - fc), (1, fc)):
                rr, cc = r0 + dr, c0 + dc
                inside = (rr >= 0) & (rr < nv) & (cc >= 0) & (cc < nu)
                val += np.where(inside, q[np.clip(rr, 0, nv - 1), np.clip(cc, 0, nu - 1)], 0.0) * wr * wc
        vol += (k["dso"] / L) ** 2 * val
    return vol.astype(np.float32)


def pad(filtered):
    """Filtered projections [angle, row, col] with a one-pixel zero border (float32), so that clamped coordinates read zero
    outside the detector.

    Examples
    --------
    >>> pad(np.ones((2, 3, 4), np.float32)).shape
    (2, 5, 6)
    """
    na, nv, nu = filtered.shape
    out = np.zeros((na, nv + 2, nu + 2), np.float32)
    out[:, 1:-1, 1:-1] = filtered
    return out


_kernel = None


def _compile():
    global _kernel
    if _kernel is not None:
        return _kernel
    from numba import njit, prange

    from .jit_cache import cached

    @cached
    @njit(parallel=True, fastmath=True, nogil=True, boundscheck=False)
    def kernel(flat, width, height, row0, cosb, sinb, zs, ys, xs, dso, dsd, cu, cv, inv_du, inv_dv, nv, nu, out):
        # One thread per row of voxels (fixed y). Per angle, everything that depends on x alone
        # (the division, the column, the weight) is computed once and reused for every slice of the
        # slab. Per slice, three loops over the row: the rows and flat indices (vectorised), the
        # four-pixel gathers and the horizontal interpolations (scalar loads: a gather of AVX2 is
        # slower than scalar loads on the CPUs measured), the vertical interpolation and the
        # accumulation (vectorised). ``flat`` holds padded rows [row0, row0 + height) of each
        # projection; a band's reads stay within it (gpumr.ct.bands), and the clamp keeps any other
        # read inside the array.
        na = flat.shape[0]
        nzs, ny, nx = out.shape
        one, zero = np.float32(1.0), np.float32(0.0)
        col_max, row_max = np.float32(nu + 1), np.float32(nv + 1)
        last = np.int32(height - 2)
        for iy in prange(ny):
            y = ys[iy]
            acc = np.zeros((nzs, nx), np.float32)
            base = np.empty(nx, np.int32)
            fc = np.empty(nx, np.float32)
            w2 = np.empty(nx, np.float32)
            rmag = np.empty(nx, np.float32)
            at = np.empty(nx, np.int32)
            fr = np.empty(nx, np.float32)
            top = np.empty(nx, np.float32)
            bot = np.empty(nx, np.float32)
            for a in range(na):
                c = cosb[a]
                s = sinb[a]
                p = flat[a]
                for ix in range(nx):
                    x = xs[ix]
                    inv = one / (dso - (x * c + y * s))
                    mag = dsd * inv
                    col = min(max((-x * s + y * c) * mag * inv_du + cu + one, zero), col_max)
                    i = min(np.int32(col), np.int32(nu))
                    base[ix] = i
                    fc[ix] = col - np.float32(i)
                    w = dso * inv
                    w2[ix] = w * w
                    rmag[ix] = mag * inv_dv
                for iz in range(nzs):
                    z = zs[iz]
                    for ix in range(nx):
                        row = min(max(z * rmag[ix] + cv + one, zero), row_max)
                        ir = min(np.int32(row), np.int32(nv))
                        fr[ix] = row - np.float32(ir)
                        at[ix] = min(max(ir - row0, np.int32(0)), last) * width + base[ix]
                    for ix in range(nx):
                        k = at[ix]
                        f = fc[ix]
                        p00 = p[k]
                        p01 = p[k + 1]
                        p10 = p[k + width]
                        p11 = p[k + width + 1]
                        top[ix] = p00 + f * (p01 - p00)
                        bot[ix] = p10 + f * (p11 - p10)
                    for ix in range(nx):
                        t = top[ix]
                        acc[iz, ix] += w2[ix] * (t + fr[ix] * (bot[ix] - t))
            for iz in range(nzs):
                out[iz, iy, :] = acc[iz]
    _kernel = kernel
    return kernel


#: Threads :func:`backproject` uses (:func:`set_threads`); None: every core this process may run on.
_threads = None


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads():
    """The CPU threads :func:`backproject` uses (:func:`set_threads`, else every core this process may run on).

    Examples
    --------
    >>> threads() >= 1
    True
    """
    return _threads or _cores()


def set_threads(n):
    """Use ``n`` CPU threads in :func:`backproject` (``--cpu-threads``), at most the cores this process may run on; returns
    the number set."""
    global _threads
    _threads = max(1, min(int(n), _cores()))
    if _native() is None:
        import numba
        _threads = min(_threads, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(_threads)
    return _threads


def _native():
    from .native import kernel
    return kernel()


def backproject(filtered, geometry, z0=0, z1=None, padded=None, out=None, row0=0, window=None, progress=None):
    """Fast CPU backprojection of slices [z0, z1), float32 [z, y, x].

    Parameters
    ----------
    filtered : ndarray [angle, row, col] or None
        Output of :func:`gpumr.ct.fdk.filter_projections` (None when ``padded`` is given): every detector row, or the
        band of rows from ``row0`` that the slab reaches (:func:`gpumr.ct.bands.row_band`).
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry.
    z0, z1 : int, optional
        The slab's first slice and the one after its last (default: the whole volume).
    padded : ndarray, optional
        ``pad(filtered)``, reused across slabs.
    out : ndarray, optional
        float32 [z1 - z0, y, x] to write into.
    row0 : int, optional
        The detector row the projections given start at (0: all rows).
    window : (int, int, int, int), optional
        Only voxel rows [y0, y1) and columns [x0, x1) of each slice (the GPU's self-check).
    progress : callable, optional
        Called with the number of slices just finished, after each block of :data:`Z_BLOCK` (``gpumr ct
        reconstruct``'s progress bar).

    Returns
    -------
    numpy.ndarray
        The slab (``out`` when given).

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> g = geometry.simple(8, 4)
    >>> backproject(np.zeros((4, *g.nDetector), np.float32), g, 2, 5).shape
    (3, 8, 8)
    """
    z1 = geometry.nVoxel[0] if z1 is None else z1
    if padded is None:
        padded = pad(filtered)
    na, height, width = padded.shape
    k = _scalars(geometry)
    zs, ys, xs = (a.astype(np.float32) for a in _axes(geometry))
    if window is not None:
        ys, xs = ys[window[0]:window[1]], xs[window[2]:window[3]]
    b = np.asarray(geometry.angles, dtype=np.float64)
    if out is None:
        out = np.empty((z1 - z0, len(ys), len(xs)), np.float32)
    f32, i32 = np.float32, np.int32
    fixed = (padded.reshape(na, height * width), i32(width), i32(height), i32(row0), np.cos(b).astype(f32),
             np.sin(b).astype(f32))
    scalars = (f32(k["dso"]), f32(k["dsd"]), f32(k["cu"]), f32(k["cv"]), f32(k["inv_du"]), f32(k["inv_dv"]),
               i32(k["nv"]), i32(k["nu"]))
    native = _native()
    kernel = (lambda *args: native(*args, _threads or _cores())) if native is not None else _compile()
    for za in range(z0, z1, Z_BLOCK):  # (each voxel's sum is the same whatever the blocks: only the order of work)
        zb = min(za + Z_BLOCK, z1)
        kernel(*fixed, zs[za:zb], ys, xs, *scalars, out[za - z0:zb - z0])
        if progress is not None:
            progress(zb - za)
    return out
