"""The detector rows a slab of slices needs, and projections filtered only where slabs need them."""

import contextlib
import os
import threading

import numpy as np

from ..log import logger
from .backproject import _axes, threads
from .fdk import filter_projections

log = logger(__name__)

#: Rows added on each side of the exact band: the kernels compute rows in float32, this in float64.
MARGIN = 1


def row_band(geometry, z0, z1):
    """Detector rows [r0, r1) the voxels of slices [z0, z1) read over all angles (bilinear, both rows).

    Parameters
    ----------
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry.
    z0, z1 : int
        The slab's first slice and the one after its last (``z0 < z1``).

    Returns
    -------
    (int, int)
        ``0 <= r0 <= r1 <= rows``; ``r0 == r1`` where the slab sees no row of the detector.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> g = geometry.simple(64, 90, n_detector=64)
    >>> r0, r1 = row_band(g, 0, 8)
    >>> 0 <= r0 < r1 < 32
    True
    """
    nv = geometry.nDetector[0]
    zs, ys, xs = _axes(geometry)
    b = np.asarray(geometry.angles, np.float64)
    corners = np.array([(x, y) for x in (xs[0], xs[-1]) for y in (ys[0], ys[-1])])
    t = corners[:, :1] * np.cos(b)[None, :] + corners[:, 1:] * np.sin(b)[None, :]
    dv = geometry.dDetector[0]
    cv = (nv - 1) / 2 - geometry.offDetector[0] / dv
    mags = geometry.DSD / (geometry.DSO - np.array([t.min(), t.max()])) / dv
    rows = np.outer([zs[z0], zs[z1 - 1]], mags).ravel() + cv
    r0 = int(np.floor(rows.min())) - MARGIN
    r1 = int(np.floor(rows.max())) + 2 + MARGIN
    r0, r1 = min(max(r0, 0), nv), min(max(r1, 0), nv)
    return r0, max(r0, r1)


class FilteredRows:
    """A task's projections, filtered in place a band of rows at a time, when a slab first needs them.

    Parameters
    ----------
    raw : numpy.ndarray or None
        Line integrals [angle, row, col] of the geometry's shape, copied into the buffer; None: the caller reads them
        into ``padded[:, 1:-1, 1:-1]`` (as :meth:`read` does).
    geometry : gpumr.ct.geometry.Geometry
        The scan's geometry.
    filter_name : str, optional
        The ramp's window.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> g = geometry.simple(16, 8, n_detector=16)
    >>> rows = FilteredRows(np.ones((8, 16, 16), np.float32), g)
    >>> rows.need(0, 4).shape, int(rows.filtered)
    ((8, 18, 18), 7)
    """

    def __init__(self, raw, geometry, filter_name="ram-lak"):
        self.geometry = geometry
        self.filter_name = filter_name
        nv, nu = geometry.nDetector
        self.padded = np.zeros((geometry.n_angles, nv + 2, nu + 2), np.float32)
        if raw is not None:
            self.padded[:, 1:-1, 1:-1] = raw
        self._done = np.zeros(nv, bool)
        self._lock = threading.Lock()

    @classmethod
    def read(cls, paths, geometry, i0=None, filter_name="ram-lak"):
        """The projections of the SequenceFiles ``paths`` read into the buffer
        (:func:`gpumr.ct.projections.read_set`).

        Examples
        --------
        >>> import os, tempfile
        >>> from gpumr.ct import geometry
        >>> from gpumr.ct.projections import write_set
        >>> g = geometry.simple(16, 8, n_detector=16)
        >>> seq = os.path.join(tempfile.mkdtemp(), "p.seq")
        >>> write_set(seq, np.ones((8, 16, 16), np.float32))
        >>> rows = FilteredRows.read([seq], g)
        >>> bool(np.array_equal(rows.all(), FilteredRows(np.ones((8, 16, 16), np.float32), g).all()))
        True
        """
        from .projections import read_set
        made = cls(None, geometry, filter_name)
        read_set(paths, geometry, i0, out=made.padded[:, 1:-1, 1:-1])
        log.debug("projections read: %d of %dx%d from %s (process %d)", geometry.n_angles, *geometry.nDetector,
                  ", ".join(paths), os.getpid())
        return made

    @property
    def filtered(self):
        """How many detector rows are filtered so far."""
        return int(self._done.sum())

    def need(self, z0, z1):
        """:attr:`padded`, with every row slices [z0, z1) read filtered.

        Returns
        -------
        numpy.ndarray
            float32 [angle, rows + 2, cols + 2], the zero border included."""
        return self.rows(*row_band(self.geometry, z0, z1))

    def rows(self, r0, r1, progress=None):
        """:attr:`padded`, with detector rows [r0, r1) filtered (``progress``: as
        :func:`gpumr.ct.fdk.filter_projections`'s, once per run of rows still to filter)."""
        with self._lock:
            inside = self.padded[:, 1:-1, 1:-1]
            for a, b in runs(~self._done[r0:r1], r0):  # in place
                filter_projections(inside, self.geometry, self.filter_name, rows=(a, b), threads=threads(),
                                   out=inside[:, a:b], progress=progress)
                self._done[a:b] = True
                log.debug("projections filtered: detector rows %d-%d of %d (process %d)", a, b, len(self._done),
                          os.getpid())
        return self.padded

    def band(self, r0, r1):
        """Detector rows [r0, r1) filtered, as a new float32 array [angle, r1 - r0, col], whether or not they are
        filtered in place yet; :attr:`padded` and :attr:`filtered` stay as they are (the CPU's side of a GPU's
        self-check, beside a device that filters the rows itself)."""
        with self._lock:
            inside = self.padded[:, 1:-1, 1:-1]
            out = np.array(inside[:, r0:r1])
            for a, b in runs(~self._done[r0:r1], r0):
                filter_projections(inside, self.geometry, self.filter_name, rows=(a, b), threads=threads(),
                                   out=out[:, a - r0:b - r0])
        return out

    @contextlib.contextmanager
    def unfiltered(self):
        """Within it, the detector rows not filtered yet (a mask of the rows, a copy) stay unfiltered and :attr:`padded`
        does not change (a device's upload of the projections it filters itself)."""
        with self._lock:
            yield ~self._done

    def all(self, progress=None):
        """:attr:`padded` with every row filtered (what a GPU, given the whole projections, needs, and
        ``gpumr ct reconstruct``); ``progress`` hears the angles filtered, as in :meth:`rows`."""
        return self.rows(0, len(self._done), progress)


def runs(mask, offset=0):
    """The runs of consecutive True in ``mask``, as ``[(a, b), ...]`` counted from ``offset``.

    Examples
    --------
    >>> runs(np.array([True, True, False, True]), 10)
    [(10, 12), (13, 14)]
    """
    todo = np.flatnonzero(mask) + offset
    if not len(todo):
        return []
    cuts = np.flatnonzero(np.diff(todo) > 1) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(todo, cuts)]
