"""OpenCV's Haar detection procedure restated: the CPU reference of the GPU kernel."""

import functools
import itertools

import numpy as np

from ..docstrings import shared
from ..errors import GpumrError
from ..limits import MAX_PYRAMID_LEVELS
from .cpu import DEFAULTS, DETECTION

GROUP_EPS = 0.2


def scales(image_size, window, scale_factor, min_size=None, max_size=None):
    """The scales detectMultiScale visits for an image of ``image_size`` ``(W, H)`` and a cascade ``window`` (24 x 24
    for OpenCV's frontal-face cascades): ``(scale, scaled size, step, box size, rows)`` each. Raises ``GpumrError``
    when more than :data:`gpumr.limits.MAX_PYRAMID_LEVELS` windows fit (those below ``min_size`` included): the walk
    is bounded whatever the scale factor.

    Examples
    --------
    >>> [(float(s), size) for s, size, *_ in scales((64, 48), (24, 24), 1.25)][:2]
    [(1.0, (64, 48)), (1.25, (51, 38))]
    """
    return _scales(tuple(image_size), tuple(window), scale_factor, min_size, max_size)


#: How many walks :func:`scales` keeps (each at most MAX_PYRAMID_LEVELS short tuples).
SCALES_KEPT = 64


@functools.lru_cache(maxsize=SCALES_KEPT)
def _scales(image_size, window, scale_factor, min_size, max_size):
    w, h = image_size
    max_w, max_h = (max_size, max_size) if max_size else (w, h)
    out = []
    factor = 1.0
    for level in itertools.count():
        win = (int(np.rint(window[0] * factor)), int(np.rint(window[1] * factor)))
        if win[0] > max_w or win[1] > max_h or win[0] > w or win[1] > h:
            break
        if level == MAX_PYRAMID_LEVELS:
            raise GpumrError(f"--scale-factor {scale_factor:g}: more than {MAX_PYRAMID_LEVELS} scales from the "
                             f"{window[0]}x{window[1]} window to {min(w, max_w)}x{min(h, max_h)} pixels")
        if not (min_size and (win[0] < min_size or win[1] < min_size)):
            s = np.float32(factor)
            size = (int(np.rint(np.float32(w) / s)), int(np.rint(np.float32(h) / s)))
            box = (int(np.rint(np.float32(window[0]) * s)), int(np.rint(np.float32(window[1]) * s)))
            out.append([s, size, 1 if s >= 2 else 2, box])
        factor *= scale_factor
    if out:
        nstripes = -(-max(out[0][1][0] + 1 - window[0], 0) // 32)
        for scale in out:
            (_, sh), step = scale[1], scale[2]
            height = max(sh + 1 - window[1], 0)
            scale.append(min(height, nstripes * max((height // step + nstripes - 1) // max(nstripes, 1), 1) * step))
    return tuple(tuple(scale) for scale in out)


def integrals(img):
    """The sum and squared-sum integral images (int64, each (H + 1, W + 1): a row and a column of zeros first) of the
    grey image ``img``.

    Examples
    --------
    >>> integrals(np.ones((2, 3)))[0].tolist()
    [[0, 0, 0, 0], [0, 1, 2, 3], [0, 2, 4, 6]]
    """
    i = np.asarray(img, np.int64)
    s = np.zeros((i.shape[0] + 1, i.shape[1] + 1), np.int64)
    q = np.zeros_like(s)
    s[1:, 1:] = i.cumsum(0).cumsum(1)
    q[1:, 1:] = (i * i).cumsum(0).cumsum(1)
    return s, q


_scan = None


def _compile():
    global _scan
    if _scan is not None:
        return _scan
    from numba import njit

    @njit(cache=True)
    def scan(s, q, ww, wh, step, ny, stages, st_thr, trees, nodes, node_thr, leaves, rects, weights):
        # Every window position OpenCV visits at one scale (rows y < ny), and which pass.
        hits = []
        nx = s.shape[1] - ww  # positions 0 .. scaled width - window width
        area = (ww - 2) * (wh - 2)
        for y in range(0, ny, step):
            x = 0
            while x < nx:
                # variance over the inner window (1, 1, ww - 2, wh - 2)
                x0, y0, x1, y1 = x + 1, y + 1, x + ww - 1, y + wh - 1
                vs = s[y1, x1] - s[y0, x1] - s[y1, x0] + s[y0, x0]
                vq = q[y1, x1] - q[y0, x1] - q[y1, x0] + q[y0, x0]
                nf = np.float64(area) * vq - np.float64(vs) * vs
                result = -1
                if nf > 0:
                    inv = np.float32(1.0 / np.sqrt(nf))
                    if area * inv < 0.1:
                        result = 1
                        for si in range(stages.shape[0]):
                            acc = np.float64(0)  # leaves summed in double, as OpenCV does
                            first, count = stages[si, 0], stages[si, 1]
                            for t in range(first, first + count):
                                idx = 0
                                while True:
                                    node = trees[t, 0] + idx
                                    f = nodes[node, 0]
                                    val = np.float32(0)
                                    for r in range(3):
                                        wt = weights[f, r]
                                        if wt != 0:
                                            rx, ry = x + rects[f, r, 0], y + rects[f, r, 1]
                                            rw, rh = rects[f, r, 2], rects[f, r, 3]
                                            rs = s[ry + rh, rx + rw] - s[ry, rx + rw] - s[ry + rh, rx] + s[ry, rx]
                                            val += wt * np.float32(rs)
                                    idx = nodes[node, 1] if val * inv < node_thr[node] else nodes[node, 2]
                                    if idx <= 0:
                                        break
                                acc += leaves[trees[t, 1] - idx]
                            if acc < st_thr[si]:
                                result = -si
                                break
                if result > 0:
                    hits.append((x, y))
                if result == 0:
                    x += step
                x += step
        return hits
    _scan = scan
    return scan


def candidates(cascade, gray, scale_factor=DEFAULTS["scale_factor"], min_size=None, max_size=None, interpolation=None):
    """All windows that pass the cascade, as boxes in image pixels (before grouping).

    Parameters
    ----------
    cascade : Cascade
        The cascade as arrays.
    gray : numpy.ndarray
        A grey image, uint8 [y, x].
    scale_factor : float, optional
        Pyramid step between scales.
    min_size, max_size : int, optional
        Smallest and largest face side in pixels.
    interpolation : int, optional
        OpenCV's resize interpolation (default ``INTER_LINEAR_EXACT``).

    Returns
    -------
    list of tuple
        ``(x, y, w, h)`` of every window that passed every stage."""
    import cv2
    interpolation = cv2.INTER_LINEAR_EXACT if interpolation is None else interpolation
    h, w = gray.shape
    scan = _compile()
    boxes = []
    for s, size, step, win, rows in scales((w, h), cascade.window, scale_factor, min_size, max_size):
        if size[0] < cascade.window[0] or size[1] < cascade.window[1]:
            continue
        scaled = cv2.resize(gray, size, interpolation=interpolation)
        si, qi = integrals(scaled)
        for x, y in scan(si, qi, cascade.window[0], cascade.window[1], step, rows, *cascade.arrays()):
            boxes.append((int(np.rint(np.float32(x) * s)), int(np.rint(np.float32(y) * s)), win[0], win[1]))
    return boxes


def group(boxes, min_neighbors, image_size):
    """What detectMultiScale does last: the ``(x, y, w, h)`` candidates grouped (a group of fewer than
    ``min_neighbors`` is dropped), then clipped to the image's ``(W, H)``: the faces, ``[[x, y, w, h], ...]``.

    Examples
    --------
    >>> group([(10, 10, 24, 24), (11, 10, 24, 24), (10, 11, 24, 24), (100, 100, 24, 24)], 2, (64, 64))
    [[10, 10, 24, 24]]
    """
    import cv2
    if min_neighbors > 0 and boxes:
        boxes, _ = cv2.groupRectangles([list(b) for b in boxes], min_neighbors, GROUP_EPS)
    w, h = image_size
    out = []
    for x, y, bw, bh in boxes:
        x0, y0, x1, y1 = max(int(x), 0), max(int(y), 0), min(int(x + bw), w), min(int(y + bh), h)
        if x1 > x0 and y1 > y0:
            out.append([x0, y0, x1 - x0, y1 - y0])
    return out


@shared(detection=DETECTION)
def detect_reference(cascade, gray, scale_factor=DEFAULTS["scale_factor"], min_neighbors=DEFAULTS["min_neighbors"],
                     min_size=DEFAULTS["min_size"], max_size=DEFAULTS["max_size"], interpolation=None):
    """Faces by the restated OpenCV procedure: the CPU reference of the GPU kernel.

    Parameters
    ----------
    cascade : Cascade
        The cascade as arrays (:class:`gpumr.faces.cascade.Cascade`).
    {detection}
    interpolation : int, optional
        OpenCV's resize interpolation (default ``INTER_LINEAR_EXACT``, as ``detectMultiScale``).

    Returns
    -------
    list of list of int
        ``[[x, y, w, h], ...]`` in image pixels, equal to :func:`gpumr.faces.cpu.detect`'s."""
    return group(candidates(cascade, gray, scale_factor, min_size, max_size, interpolation), min_neighbors,
                 gray.shape[::-1])
