"""Face detection on a GPU (``cuda/haar.cu``): the same faces as OpenCV on the CPU.

Per batch of frames (sent in turns when their integral images would hold
more elements than the kernels' ``int`` offsets reach), in parts of
:data:`PART` frames: the host packs the part's grey frames into one buffer
and sends only those; on the GPU every pyramid level of every frame is
resized from its frame bit for bit as OpenCV's ``INTER_LINEAR_EXACT`` (what
``detectMultiScale`` uses: the ``pyramid`` kernel, from per-level column and
row taps the host computes once per frame size, :func:`resize_taps`, and
sends once per run of parts of the same sizes), then integral images, the
first stage over every window, OpenCV's row-order skip rule and the
remaining stages (in groups, survivors compacted between groups in window
order: per-row counts or pass flags, a prefix sum, ordered writes); the
surviving windows come back as boxes, grouped per frame by OpenCV's
``groupRectangles``. The host packs the next part while the device works on
this one.

Before a device is trusted, a built-in photo is run through it and compared
with :func:`gpumr.faces.reference.detect_reference` (:mod:`gpumr.gpu.trust`);
a mismatch disables the GPU path (every batch then falls back to the CPU,
and is counted).
"""

import functools
import threading
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..gpu.trust import DeviceStates
from .cascade import Cascade
from .cpu import DEFAULTS
from .reference import group, scales

#: The prefix-sum kernel's block and the elements each of its threads sums (``cuda/haar.cu``).
SCAN_THREADS, SCAN_CHUNK = 256, 16
#: Frames per part of a batch: the host packs one part's frames while the device runs the previous part.
PART = 8
#: Stage groups between compactions (the last group runs to the end).
STAGE_GROUPS = (1, 3, 8)
BLOCK = 256
#: Device memory beyond a batch's own arrays: the cascade's (well under 1 MiB for OpenCV's), allocation rounding.
MEMORY_MARGIN = 32 * 1024 * 1024
#: Bytes of one feature at one integral-image row length (``Feature`` in ``cuda/haar.cu``: the
#: rectangles' corner offsets and weights), per distinct level width of the frames sent at once.
FEATURE_BYTES = 64
#: The kernels index a launch's buffers with ``int``: the frames sent at once hold at most this many
#: integral-image elements (their largest buffer; pixels and windows are fewer), else they go in turns.
MAX_ELEMENTS = 2 ** 31 - 1


def levels(shape, window, scale_factor, min_size=None, max_size=None):
    """The pyramid levels the GPU path scans in a frame of ``shape`` ``(height, width)``.

    Those of :func:`gpumr.faces.reference.scales` whose scaled image holds
    the window: ``(scale, (width, height), step, box size, rows)`` each.
    """
    h, w = shape
    return [lv for lv in scales((w, h), window, scale_factor, min_size, max_size)
            if lv[1][0] >= window[0] and lv[1][1] >= window[1]]


def window_grid(level, window):
    """``(nx, ny, gx, gy)`` of a pyramid ``level`` (as :func:`levels` gives it): the window columns and rows
    scanned, and the kernels' grid of windows, one per ``step`` of each."""
    _, (sw, _), step, _, rows = level
    nx = sw + 1 - window[0]
    return nx, rows, -(-nx // step), -(-rows // step)


def batch_memory(shapes, window, scale_factor, min_size=None, max_size=None, features=0):
    """Device memory (bytes) :class:`FaceGPU` needs for a batch of frames of these ``(height, width)`` shapes.

    What :meth:`FaceGPU._detect` allocates, all of it counted as if held at
    once: per frame its grey pixels (1 byte each, the only image sent); per
    level the table row and its feature table's index (44 bytes) and its
    source row (16 bytes), its column and row taps (8 bytes each,
    :func:`resize_taps`; kept on the device for the next part of the same
    frame sizes, so counted as if every frame had its own), the pyramid's
    pixels (1 byte each), the sum and squared-sum integrals (8 bytes per
    element), the row, column and window-row lists (8 bytes each) and the
    window rows' offsets (4 bytes); per window its first-stage code (1
    byte), two survivor lists and the pass flags (4 bytes each); summed over
    the largest run of :data:`PART` consecutive frames (what the device
    holds at once), with the feature tables of the run's distinct level
    widths (:data:`FEATURE_BYTES` per feature of the cascade's ``features``,
    and 4 bytes per level); plus :data:`MEMORY_MARGIN` (which holds the
    prefix sums' block totals, one per 4096 elements).
    """
    per_frame, widths = [], []
    for shape in shapes:
        frame, seen = shape[0] * shape[1], set()
        for lv in levels(shape, window, scale_factor, min_size, max_size):
            (sw, sh), (_, _, gx, gy) = lv[1], window_grid(lv, window)
            frame += (44 + 16 + 8 * (sw + sh) + sw * sh + 8 * (sw + 1) * (sh + 1) + 8 * (sw + sh + 2 + gy)
                      + 4 * (gy + 1) + 13 * gx * gy)
            seen.add(sw)
        per_frame.append(frame)
        widths.append(seen)
    # The device holds one part of at most PART consecutive frames at a time: the largest such run.
    return MEMORY_MARGIN + max((sum(per_frame[a:a + PART]) + FEATURE_BYTES * features * len(set().union(
        *widths[a:a + PART])) for a in range(max(1, len(per_frame) - PART + 1))), default=0)


@functools.lru_cache(maxsize=16)
def cascade_features(path):
    """The feature count of the cascade at ``path`` (what :func:`batch_memory` takes), or 0 where the GPU
    path cannot run it."""
    from ..errors import GpumrError
    try:
        return len(Cascade(path).rects)
    except GpumrError:
        return 0


def resize_taps(src, dst):
    """One axis of OpenCV's 8-bit ``INTER_LINEAR_EXACT`` resize from ``src`` to ``dst`` pixels: int32 [dst, 2].

    Per destination pixel ``d``: the first source index ``i`` and the weight
    ``c1`` (in 1/256) of source pixel ``i + 1``; source pixel ``i`` weighs
    ``256 - c1``. As OpenCV computes them (``interpolationLinear`` in
    ``resize.cpp``, its coefficients ``ufixedpoint16``, 8 fractional bits):
    ``f = (d + 0.5) * (1 / (dst / src)) - 0.5`` in double (IEEE, as its
    ``softdouble``), ``i = floor(f)``, ``c1 = round(256 * (f - i))`` half to
    even; where ``i < 0`` (or the source is one pixel) the first pixel is
    taken alone, where ``i >= src - 1`` the last (``c1 = 0``). The
    ``pyramid`` kernel (``cuda/haar.cu``) then does only integer arithmetic.
    Also what OpenCV's shortcuts give: an equal size is a copy (``c1 = 0``)
    and an exact halving its 2x2 area mean ((a + b + c + d + 2) >> 2).
    Not cached here: a detector keeps each frame size's taps, all levels
    together (:meth:`FaceGPU._shape_taps`), the one cache of them.
    """
    scale = 1.0 / (dst / src)
    f = scale * (np.arange(dst, dtype=np.float64) + 0.5) - 0.5
    first = np.floor(f)
    c1 = np.rint((f - first) * 256.0)
    left = (first < 0) | (src == 1)
    right = ~left & (first >= src - 1)
    out = np.empty((dst, 2), np.int32)
    out[:, 0] = np.where(left, 0, np.where(right, src - 1, first))
    out[:, 1] = np.where(left | right, 0, c1)
    return out


def turns(frame_levels, limit):
    """Cut a batch into runs of frames sent to the device at once: ``(first, end)`` each.

    ``frame_levels`` holds each frame's :func:`levels`. Each run's integral
    images hold at most ``limit`` elements (:data:`MAX_ELEMENTS`: every
    offset the kernels take then fits an ``int``); a frame over it alone,
    which the face workload's pyramid limit rules out, is a run of its own.
    """
    first, held = 0, 0
    for i, lvs in enumerate(frame_levels):
        n = sum((sw + 1) * (sh + 1) for _, (sw, sh), *_ in lvs)
        if held + n > limit and i > first:
            yield first, i
            first, held = i, 0
        held += n
    if first < len(frame_levels):
        yield first, len(frame_levels)


def per_level(counts):
    """``(level, i)`` for ``i`` in ``range(counts[level])``, level after level: int32 [sum(counts), 2].

    The kernels' one-thread-per-item lists (integral rows and columns, window
    rows), built without a loop over levels (a frame has dozens).
    """
    counts = np.asarray(counts, np.int64)
    level = np.repeat(np.arange(len(counts)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.stack([level, np.arange(len(level)) - starts], 1).astype(np.int32)


#: Frame sizes whose levels and resize taps a detector keeps (a job's frames are mostly of one or a few sizes).
SHAPES_KEPT = 16

#: One part of a batch as the host prepares it (:meth:`FaceGPU.pyramid`): ``n_pix``, ``n_int`` and ``n_win`` are
#: the pyramid's pixels, integral-image elements and windows.
Part = namedtuple("Part", "table sources sizes taps frames meta n_pix n_int n_win")


def _grid(n):
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _at_least_one(a):
    """``a``, or one zero row of its kind where it is empty (a device array of no elements is refused)."""
    return a if len(a) else np.zeros((1,) + a.shape[1:], a.dtype)


class FaceGPU:
    """``run(grey frames, gpu)`` -> faces per frame, as ``FaceDetection.run_cpu`` gives them.

    The cascade's stages and nodes go to constant memory where they fit
    (OpenCV's frontal-face cascades do; ``haarcascade_frontalface_alt_tree``
    does not) and are read from global memory otherwise, or when
    ``constant`` is False.
    """

    def __init__(self, cascade_file, scale_factor=DEFAULTS["scale_factor"], min_neighbors=DEFAULTS["min_neighbors"],
                 min_size=DEFAULTS["min_size"], max_size=DEFAULTS["max_size"], prefer=None, constant=True):
        self.cascade = Cascade(cascade_file)
        self.constant = constant
        self.params = dict(scale_factor=scale_factor, min_neighbors=min_neighbors, min_size=min_size,
                           max_size=max_size)
        self.prefer = prefer
        self._devices = DeviceStates("GPU face detection", self._setup, self._self_check)
        self._ahead = ThreadPoolExecutor(max_workers=1)  # the next part packed, beside the device's work
        self._shapes = {}  # frame size -> its levels and resize taps (_shape_taps)
        self._shapes_lock = threading.Lock()

    # -- host side: one part's frames and tables ---------------------------
    def _levels(self, shape):
        """The levels scanned in a frame of ``shape`` with this detector's parameters (:func:`levels`)."""
        p = self.params
        return levels(shape, self.cascade.window, p["scale_factor"], p["min_size"], p["max_size"])

    def _shape_taps(self, shape):
        """A frame size's levels and resize taps: ``(levels, taps int32 [n, 2], (column, row) tap offsets per
        level)``, computed once per size (kept for the last :data:`SHAPES_KEPT` sizes)."""
        with self._shapes_lock:
            hit = self._shapes.get(shape)
        if hit is not None:
            return hit
        h, w = shape
        lvs = self._levels(shape)
        parts, offsets, n = [], [], 0
        for _, (sw, sh), *_ in lvs:
            parts += [resize_taps(w, sw), resize_taps(h, sh)]
            offsets.append((n, n + sw))
            n += sw + sh
        taps = np.concatenate(parts) if parts else np.zeros((0, 2), np.int32)
        hit = (lvs, taps, offsets)
        with self._shapes_lock:
            if len(self._shapes) >= SHAPES_KEPT:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[shape] = hit
        return hit

    def pyramid(self, grays):
        """What the host prepares for one part of frames ``grays``: a :class:`Part`.

        The levels table (int32 [n, 10]: pixel, integral and window offsets,
        sizes and grids), each level's source row (int32 [n, 4]: its frame's
        offset and row length in the packed frames, its first column and row
        tap), the taps of the part's frame sizes (their key: the sizes in order
        of first appearance), the frames packed into one uint8 buffer (the only
        image data sent), and per level (frame, scale, window).
        """
        c = self.cascade
        sizes = list(dict.fromkeys(g.shape for g in grays))
        tap_base, taps = {}, []
        n_taps = 0
        for shape in sizes:
            _, t, _ = self._shape_taps(shape)
            tap_base[shape] = n_taps
            taps.append(t)
            n_taps += len(t)
        rows, sources, meta = [], [], []
        img_off = int_off = win_off = src_off = 0
        for i, g in enumerate(grays):
            lvs, _, offsets = self._shape_taps(g.shape)
            base = tap_base[g.shape]
            for lv, (xt, yt) in zip(lvs, offsets):
                s, (w, h), step, win, _ = lv
                nx, ny, gx, gy = window_grid(lv, c.window)
                rows.append((img_off, int_off, w, h, nx, ny, step, gx, gy, win_off))
                sources.append((src_off, g.shape[1], base + xt, base + yt))
                meta.append((i, s, win))
                img_off += w * h
                int_off += (w + 1) * (h + 1)
                win_off += gx * gy
            src_off += g.size
        table = np.array(rows, np.int32).reshape(-1, 10)
        frames = (np.concatenate([np.ascontiguousarray(g, np.uint8).ravel() for g in grays]) if grays
                  else np.zeros(0, np.uint8))
        return Part(table, np.array(sources, np.int32).reshape(-1, 4), tuple(sizes),
                    np.concatenate(taps) if taps else np.zeros((0, 2), np.int32), frames, meta, img_off, int_off,
                    win_off)

    # -- device state ----------------------------------------------------
    def _setup(self, gpu):
        from ..gpu.kernels import defines
        from ..gpu.launch import launcher
        lx = launcher(gpu, self.prefer)
        c = self.cascade
        layout = defines("haar")
        stages, nodes = c.packed(layout)
        constant = bool(self.constant) and len(stages) <= layout["CONST_STAGES"] and \
            len(nodes) <= layout["CONST_NODES"]
        kind = "" if constant else "_global"
        with lx.active():
            mod = lx.module("haar")
            fns = {n: lx.function(mod, n) for n in ("pyramid", "integral_rows", "integral_cols", "feature_offsets",
                                                     "row_count", "row_write", "scan_blocks", "add_block_offsets",
                                                     "compact")}
            fns.update({n: lx.function(mod, n + kind) for n in ("first_stage", "run_stages")})
            st = dict(lx=lx, fns=fns, mod=mod, taps=[None, None], constant=(stages, nodes) if constant else None,
                      n_features=len(c.rects),
                      rects=lx.to_device(_at_least_one(c.rects.reshape(-1, 4))),
                      weights=lx.to_device(_at_least_one(c.weights.reshape(-1))),
                      cascade=[np.int32(c.window[0]), np.int32(c.window[1]), lx.to_device(_at_least_one(stages)),
                               lx.to_device(_at_least_one(nodes))])
            self._constants(st)
        return st

    @staticmethod
    def _constants(st):
        """Copy the cascade to the module's constant memory, if this detector keeps it there."""
        if st["constant"] is not None:
            stages, nodes = st["constant"]
            st["lx"].set_constant(st["mod"], "c_stages", stages)
            st["lx"].set_constant(st["mod"], "c_nodes", nodes)

    def _self_check(self, st):
        import cv2
        from skimage import data
        from .reference import detect_reference
        photo = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
        got = sorted(self._run(st, [photo])[0])
        want = sorted(detect_reference(self.cascade, photo, **self.params))
        return True if got == want else f"self-check on a built-in photo gave {got}, the CPU reference {want}"

    # -- detection -------------------------------------------------------
    def run(self, grays, gpu):
        """Faces per frame (``[[x, y, w, h], ...]`` each) in the grey frames ``grays``, on ``gpu``.

        Raises
        ------
        RuntimeError
            If ``gpu`` is not trusted (set-up or self-check failed; the reason given).
        """
        return self._run(self._devices.get(gpu), grays)

    def _run(self, st, grays):
        """Faces per frame, the frames sent in turns that keep the kernels' offsets within ``int`` (:func:`turns`).

        Turns go in parts of at most :data:`PART` frames, double-buffered: the
        next part's frames are packed and its tables built on the host (its
        own thread, :meth:`pyramid`) while the device runs this part's kernels.
        """
        parts = [(a, min(a + PART, end)) for first, end in turns([self._levels(g.shape) for g in grays], MAX_ELEMENTS)
                 for a in range(first, end, PART)]
        out = []
        ahead = self._ahead.submit(self.pyramid, grays[parts[0][0]:parts[0][1]]) if parts else None
        for i, (a, b) in enumerate(parts):
            pyramid = ahead.result()
            if i + 1 < len(parts):
                ahead = self._ahead.submit(self.pyramid, grays[parts[i + 1][0]:parts[i + 1][1]])
            out.extend(self._run_turn(st, grays[a:b], pyramid))
        return out

    def _run_turn(self, st, grays, pyramid):
        table, meta = pyramid.table, pyramid.meta
        faces = [[] for _ in grays]
        if not len(table):
            return faces
        with st["lx"].active():
            windows = self._detect(st, pyramid)
        win_off = table[:, 9]
        level = np.searchsorted(win_off, windows, side="right") - 1
        boxes = [[] for _ in grays]
        for w, lv in sorted(zip(windows.tolist(), level.tolist())):
            k = w - win_off[lv]
            gx, step = table[lv, 7], table[lv, 6]
            frame, s, win = meta[lv]
            x, y = (k % gx) * step, (k // gx) * step
            boxes[frame].append((int(np.rint(np.float32(x) * s)), int(np.rint(np.float32(y) * s)), win[0], win[1]))
        return [group(b, self.params["min_neighbors"], g.shape[::-1]) for b, g in zip(boxes, grays)]

    @staticmethod
    def _scan(lx, f, data, n):
        """Exclusive prefix sums of device array ``data``'s first ``n`` int32 in place; returns the last
        element's prefix (with a zero there, the total of the others)."""
        per = SCAN_THREADS * SCAN_CHUNK
        blocks = -(-n // per)
        sums = lx.zeros(blocks + 1, np.int32)
        lx.launch(f["scan_blocks"], (blocks, 1, 1), (SCAN_THREADS, 1, 1), data, np.int32(n), sums)
        if blocks > 1:
            FaceGPU._scan(lx, f, sums, blocks)
            lx.launch(f["add_block_offsets"], _grid(n), (BLOCK, 1, 1), data, np.int32(n), sums)
        return int(lx.to_host(data[n - 1:n])[0])

    @staticmethod
    def _taps(st, part):
        """The part's resize taps on the device: sent once per run of parts with the same frame sizes."""
        lx = st["lx"]
        key, dev = st["taps"]
        if key != part.sizes:
            dev = lx.to_device(part.taps)
            st["taps"] = [part.sizes, dev]
        return dev

    @staticmethod
    def _features(st, table):
        """The feature tables of a turn's levels: ``[feats, level_feats]``, the stage kernels' last cascade
        arguments (one table per distinct level width, made on the device by ``feature_offsets``)."""
        lx, nf = st["lx"], st["n_features"]
        widths, which = np.unique(table[:, 2] + 1, return_inverse=True)
        feats = lx.empty(max(len(widths) * nf, 1) * (FEATURE_BYTES // 4), np.int32)
        if nf:
            lx.launch(st["fns"]["feature_offsets"], _grid(len(widths) * nf), (BLOCK, 1, 1), st["rects"],
                      st["weights"], np.int32(nf), lx.to_device(widths.astype(np.int32)), np.int32(len(widths)), feats)
        return [feats, lx.to_device((which.reshape(-1) * nf).astype(np.int32))]

    def _detect(self, st, part):
        lx, f = st["lx"], st["fns"]
        casc = st["cascade"] + self._features(st, part.table)
        i32 = np.int32
        table, n_int, n_win = part.table, part.n_int, part.n_win
        levels = lx.to_device(table)
        frames = lx.to_device(part.frames)
        img = lx.empty(max(part.n_pix, 1), np.uint8)
        lx.launch(f["pyramid"], _grid(part.n_pix), (BLOCK, 1, 1), frames, levels, lx.to_device(part.sources),
                  i32(len(table)), i32(part.n_pix), self._taps(st, part), img)
        del frames
        total = lx.zeros(n_int, np.uint32)
        sq = lx.zeros(n_int, np.uint32)
        rows = per_level(table[:, 3] + 1)
        cols = per_level(table[:, 2] + 1)
        lx.launch(f["integral_rows"], _grid(len(rows)), (BLOCK, 1, 1), img, levels, lx.to_device(rows),
                  i32(len(rows)), total, sq)
        lx.launch(f["integral_cols"], _grid(len(cols)), (BLOCK, 1, 1), levels, lx.to_device(cols), i32(len(cols)),
                  total, sq)
        codes = lx.zeros(n_win, np.int8)
        lx.launch(f["first_stage"], _grid(n_win), (BLOCK, 1, 1), *casc, levels, i32(len(table)), i32(n_win),
                  total, sq, codes)
        grid_rows = per_level(table[:, 8])
        n_rows = len(grid_rows)
        grid_rows = lx.to_device(grid_rows)
        offsets = lx.zeros(n_rows + 1, np.int32)  # the last, zero, becomes the total
        lx.launch(f["row_count"], _grid(n_rows), (BLOCK, 1, 1), levels, grid_rows, i32(n_rows), codes, offsets)
        n = self._scan(lx, f, offsets, n_rows + 1)
        survivors = lx.empty(max(n, 1), np.int32)
        lx.launch(f["row_write"], _grid(n_rows), (BLOCK, 1, 1), levels, grid_rows, i32(n_rows), codes, offsets,
                  survivors)
        n_stages = len(self.cascade.stages)
        bounds = [b for b in STAGE_GROUPS if b < n_stages] + [n_stages]
        for first, last in zip(bounds[:-1], bounds[1:]):
            if n == 0:
                break
            passed = lx.zeros(n + 1, np.int32)
            lx.launch(f["run_stages"], _grid(n), (BLOCK, 1, 1), *casc, levels, i32(len(table)), total, sq,
                      survivors, i32(n), i32(first), i32(last), passed)
            kept = self._scan(lx, f, passed, n + 1)
            out = lx.empty(max(kept, 1), np.int32)
            lx.launch(f["compact"], _grid(n), (BLOCK, 1, 1), survivors, passed, i32(n), out)
            survivors, n = out, kept
        return np.sort(lx.to_host(survivors)[:n]) if n else np.zeros(0, np.int64)
