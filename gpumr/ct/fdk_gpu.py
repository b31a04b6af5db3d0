"""FDK pre-processing on a GPU (``cuda/fdk.cu`` around the launcher's FFT): what
:func:`gpumr.ct.fdk.filter_projections` computes, on projections already on the device."""

import numpy as np

from .fdk import factors, transform_length

#: Bytes of transform rows filtered at a time (the FFT takes about as much again for its spectrum).
CHUNK_BYTES = 128 << 20
#: Threads per block of the weighing and storing kernels (one thread per column).
BLOCK = 256


def chunk_angles(geometry):
    """Angles weighed, transformed and stored per round (:data:`CHUNK_BYTES` of transform rows, at least one).

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> chunk_angles(geometry.simple(1024, 360, n_detector=1024))
    16
    """
    nv, nu = geometry.nDetector
    n = transform_length(nu)
    return max(1, min(geometry.n_angles, CHUNK_BYTES // (nv * n * 4)))


def device_bytes(geometry):
    """Device memory the filter takes beside the projections, at most: a round's transform rows, and about as much
    again twice for the transforms' spectrum and output.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> device_bytes(geometry.simple(1024, 360, n_detector=1024)) >> 20
    384
    """
    nv, nu = geometry.nDetector
    return 3 * chunk_angles(geometry) * nv * transform_length(nu) * 4


def filter_on_device(lx, q, geometry, filter_name="ram-lak", todo=None, stream=None):
    """Weigh, ramp-filter and scale the padded projections ``q`` on the device, in place, on ``stream``; returns once
    the work is done (its buffers are then given back).

    Parameters
    ----------
    lx : gpumr.gpu.interface.Launcher
        The device's launcher; its :attr:`~gpumr.gpu.interface.Launcher.fft` must be True.
    q : device array
        float32 [angle, rows + 2, cols + 2], the zero border included (as the backprojection kernel reads them).
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry.
    filter_name : str, optional
        The ramp's window.
    todo : numpy.ndarray, optional
        bool [rows]: the detector rows to filter (default all); the others are left as they are.
    stream : optional
        The launcher's stream to queue on (work queued on it before is done first); None: the legacy default stream.

    Returns
    -------
    int
        The number of detector rows filtered.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> from gpumr.ct.fdk import filter_projections
    >>> from gpumr.gpu.emulate import EmulatedLauncher
    >>> g = geometry.simple(8, 4)
    >>> raw = np.random.default_rng(0).random((4, *g.nDetector), dtype=np.float32)
    >>> lx = EmulatedLauncher(0, 1 << 30)
    >>> q = lx.to_device(np.pad(raw, ((0, 0), (1, 1), (1, 1))))
    >>> filter_on_device(lx, q, g)  # (every detector row)
    10
    >>> bool(np.allclose(lx.to_host(q)[:, 1:-1, 1:-1], filter_projections(raw, g), atol=1e-6))
    True
    """
    na = geometry.n_angles
    nv, nu = geometry.nDetector
    todo = np.ones(nv, bool) if todo is None else np.asarray(todo, bool)
    if not todo.any():
        return 0
    cosw, weights, response = factors(geometry, filter_name)
    n = len(response)
    mod = lx.module("fdk")
    weigh, store = lx.function(mod, "fdk_weigh"), lx.function(mod, "fdk_store")
    d_cosw, d_weights, d_todo = (lx.to_device(a) for a in (cosw, weights, todo.astype(np.uint8)))
    if stream is not None:
        lx.wait_event(stream, lx.record(None))  # (those uploads are on the legacy stream)
    chunk = chunk_angles(geometry)
    rows = lx.empty((chunk * nv, n), np.float32)
    half = response[: n // 2 + 1].astype(np.float32)
    i32 = np.int32
    for a0 in range(0, na, chunk):
        k = min(na, a0 + chunk) - a0
        part, angles = rows[:k * nv], q[a0:a0 + k]
        lx.launch_on(stream, weigh, (-(-n // BLOCK), nv, k), (BLOCK, 1, 1), angles, d_cosw, d_weights[a0:a0 + k],
                     d_todo, i32(k), i32(nv), i32(nu), i32(n), part)
        lx.filter_rows(part, half, stream)
        lx.launch_on(stream, store, (-(-nu // BLOCK), nv, k), (BLOCK, 1, 1), part, d_todo, i32(k), i32(nv), i32(nu),
                     i32(n), angles)
    lx.wait(lx.record(stream))  # (the buffers above are given back when this returns)
    return int(todo.sum())
