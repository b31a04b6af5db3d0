"""Face detection on a GPU (``cuda/haar.cu``): the same faces as OpenCV on the CPU."""

import collections
import functools
import threading
from collections import namedtuple

import numpy as np

from ..gpu.trust import DeviceStates, settled
from .cascade import Cascade
from .cpu import DEFAULTS
from .reference import group, scales

#: Frames per part of a batch: the host copies one part's frames while the device runs the previous part.
PART = 8
#: Stage groups, each appending its survivors to the next list (the last group runs to the end).
STAGE_GROUPS = (1, 3, 8)
BLOCK = 256
#: Threads per integral row (``integral_rows`` in ``cuda/haar.cu``: a warp each).
ROW_WARP = 32
#: Device memory beyond a batch's own arrays: the cascade's (well under 1 MiB for OpenCV's), allocation rounding;
#: a lane keeps a device buffer up to half of it larger than a batch needs.
MEMORY_MARGIN = 32 * 1024 * 1024
#: Bytes of one feature at one integral-image row length (``Feature`` in ``cuda/haar.cu``: the
#: rectangles' corner offsets and weights), per distinct level width of the frames sent at once.
FEATURE_BYTES = 64
#: The kernels index a launch's buffers with ``int``: the frames sent at once hold at most this many
#: integral-image elements (their largest buffer; pixels and windows are fewer), else they go in turns.
MAX_ELEMENTS = 2 ** 31 - 1
#: Parts in flight per lane: each has a slot (its upload and last list on the device, its page-locked upload and
#: read-back on the host); the device's scratch arrays are shared, in the stream's order.
SLOTS = 2
#: Counters read back before the last list: the first stage's survivors, then each stage group's (int32).
HEAD = 8
#: Surviving windows a part's one read-back brings (with the counters); more take a second copy.
RESULT_WINDOWS = 8192
#: Alignment (bytes) of each array in a lane's buffers.
ALIGN = 256


def levels(shape, window, scale_factor, min_size=None, max_size=None):
    """The pyramid levels the GPU path scans in a frame of ``shape`` ``(height, width)``."""
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
    """Device memory (bytes) :class:`FaceGPU` needs for a batch of frames of these ``(height, width)`` shapes."""
    runs = [shapes[a:a + PART] for a in range(max(1, len(shapes) - PART + 1))]
    slot = scratch = 0
    for run in runs:
        lay = layout(part_counts([(s, levels(s, window, scale_factor, min_size, max_size)) for s in run], window),
                     features)
        slot, scratch = max(slot, lay.slot_bytes), max(scratch, lay.scratch_bytes)
    return MEMORY_MARGIN + SLOTS * slot + scratch


def part_counts(frame_levels, window):
    """What one part's arrays hold, from its frames' ``[(shape, levels), ...]`` (:func:`levels`): a dict."""
    n = dict(levels=0, taps=0, irows=0, icols=0, grows=0, pix=0, int=0, win=0, frame_bytes=0)
    widths, sizes = set(), set()
    for shape, lvs in frame_levels:
        n["frame_bytes"] += int(shape[0]) * int(shape[1])
        first = shape not in sizes
        sizes.add(shape)
        for lv in lvs:
            (sw, sh), (_, _, gx, gy) = lv[1], window_grid(lv, window)
            n["levels"] += 1
            n["taps"] += (sw + sh) if first else 0
            n["irows"] += sh + 1
            n["icols"] += sw + 1
            n["grows"] += gy
            n["pix"] += sw * sh
            n["int"] += (sw + 1) * (sh + 1)
            n["win"] += gx * gy
            widths.add(sw + 1)
    n["widths"] = len(widths)
    return n


class Layout:
    """Where one part's arrays lie in a lane's buffers: ``slot`` and ``scratch`` map a name to ``(byte offset, count,
    dtype)``."""

    def __init__(self, slot, scratch):
        self.slot, self.scratch = self._place(slot), self._place(scratch)
        off, n, _ = self.slot["head"]
        self.upload = off + 4 * n
        self.slot_bytes = self._end(self.slot)
        self.scratch_bytes = self._end(self.scratch)

    @staticmethod
    def _place(spec):
        out, at = {}, 0
        for name, count, dtype, align in spec:
            dtype = np.dtype(dtype)
            at = -(-at // align) * align
            out[name] = (at, count, dtype)
            at += count * dtype.itemsize
        return out

    @staticmethod
    def _end(regions):
        end = max(off + n * dt.itemsize for off, n, dt in regions.values())
        return -(-end // ALIGN) * ALIGN


def layout(n, features):
    """The :class:`Layout` of a part holding ``n`` (:func:`part_counts`), for a cascade of ``features`` features."""
    i4, u1 = np.int32, np.uint8
    lv = max(n["levels"], 1)
    slot = [("table", 10 * lv, i4, ALIGN), ("sources", 4 * lv, i4, ALIGN), ("taps", 2 * max(n["taps"], 1), i4, ALIGN),
            ("irows", 2 * max(n["irows"], 1), i4, ALIGN), ("icols", 2 * max(n["icols"], 1), i4, ALIGN),
            ("grows", 2 * max(n["grows"], 1), i4, ALIGN), ("widths", max(n["widths"], 1), i4, ALIGN),
            ("level_feats", lv, i4, ALIGN), ("frames", max(n["frame_bytes"], 1), u1, ALIGN),
            ("head", HEAD, i4, ALIGN), ("last", max(n["win"], 1), i4, 4)]
    win = max(n["win"], 1)
    scratch = [("img", max(n["pix"], 1), u1, ALIGN), ("sum", max(n["int"], 1), np.uint32, ALIGN),
               ("sq", max(n["int"], 1), np.uint32, ALIGN), ("codes", win, np.int8, ALIGN), ("list_a", win, i4, ALIGN),
               ("list_b", win, i4, ALIGN),
               ("feats", max(n["widths"] * features, 1) * (FEATURE_BYTES // 4), i4, ALIGN)]
    return Layout(slot, scratch)


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
    """One axis of OpenCV's 8-bit ``INTER_LINEAR_EXACT`` resize from ``src`` to ``dst`` pixels: int32 [dst, 2]."""
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
    """Cut a batch into runs of frames sent to the device at once: ``(first, end)`` each."""
    return cut([integral_elements(lvs) for lvs in frame_levels], limit)


def integral_elements(lvs):
    """The integral-image elements of a frame's levels ``lvs`` (:func:`levels`)."""
    return sum((sw + 1) * (sh + 1) for _, (sw, sh), *_ in lvs)


def cut(counts, limit):
    """:func:`turns` from each frame's integral-image elements ``counts``."""
    first, held = 0, 0
    for i, n in enumerate(counts):
        if held + n > limit and i > first:
            yield first, i
            first, held = i, 0
        held += n
    if first < len(counts):
        yield first, len(counts)


def per_level(counts):
    """``(level, i)`` for ``i`` in ``range(counts[level])``, level after level: int32 [sum(counts), 2]."""
    counts = np.asarray(counts, np.int64)
    level = np.repeat(np.arange(len(counts)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.stack([level, np.arange(len(level)) - starts], 1).astype(np.int32)

#: Frame sizes whose levels and resize taps a detector keeps, and runs of part shapes whose plans it keeps
#: (a job's frames are mostly of one or a few sizes).
SHAPES_KEPT = 16

#: One part's tables as :meth:`FaceGPU.pyramid` gives them (with the frames packed): ``n_pix``, ``n_int`` and
#: ``n_win`` are the pyramid's pixels, integral-image elements and windows.
Part = namedtuple("Part", "table sources sizes taps frames meta n_pix n_int n_win")


def _grid(n):
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _at_least_one(a):
    """``a``, or one zero row of its kind where it is empty (a device array of no elements is refused)."""
    return a if len(a) else np.zeros((1,) + a.shape[1:], a.dtype)


class Plan:
    """What the host makes once for a run of parts whose frames have the same shapes (:meth:`FaceGPU.plan`).

    Attributes
    ----------
    shapes : tuple of (int, int)
        The part's frames' ``(height, width)``, in order.
    counts : dict
        :func:`part_counts`.
    layout : Layout
    tables : numpy.ndarray of uint8
        The upload's bytes before the frames (the layout's slot, up to ``frames``).
    table, sources, taps : numpy.ndarray of int32
        The level table ``[n, 10]``, the levels' sources ``[n, 4]``, the resize taps ``[n, 2]``.
    sizes : tuple
        The distinct frame sizes, in order of first appearance (the taps' order).
    meta : list of tuple
        Per level: ``(frame, scale, window)``.
    frame_windows : numpy.ndarray of int64
        Each frame's first window id, and the part's window count last."""

    def __init__(self, shapes, **kw):
        self.shapes = shapes
        self.__dict__.update(kw)
        levels = len(self.meta)
        self.level_frame = np.array([m[0] for m in self.meta], np.int64).reshape(levels)
        self.level_scale = np.array([m[1] for m in self.meta], np.float32).reshape(levels)
        self.level_box = np.array([m[2] for m in self.meta], np.int64).reshape(levels, 2)


class Found:
    """The windows of one frame that passed every stage, as the device leaves them; boxes and faces are made from them
    on the host, after the GPU is released (:meth:`faces`).

    Attributes
    ----------
    windows : numpy.ndarray of int32
        Window ids of the part (sorted), this frame's only.
    plan : Plan
        The part's plan.
    frame : int
        The frame's index in its part."""

    __slots__ = ("windows", "plan", "frame")

    def __init__(self, windows, plan, frame):
        self.windows, self.plan, self.frame = windows, plan, frame

    @property
    def shape(self):
        """The frame's ``(height, width)``."""
        return self.plan.shapes[self.frame]

    def boxes(self):
        """The windows as boxes ``(x, y, w, h)`` in the frame's pixels, in window order, as OpenCV scales them: a
        window's corner ``x``, ``y`` on its level times the level's float scale, rounded (``cvRound(x *
        scalingFactor)``), and the level's box size."""
        p, w = self.plan, self.windows.astype(np.int64)
        win_off = p.table[:, 9]
        lv = np.searchsorted(win_off, w, side="right") - 1
        k = w - win_off[lv]
        gx, step = p.table[lv, 7].astype(np.int64), p.table[lv, 6].astype(np.int64)
        s = p.level_scale[lv]
        x = np.rint(((k % gx) * step).astype(np.float32) * s).astype(np.int64)
        y = np.rint(((k // gx) * step).astype(np.float32) * s).astype(np.int64)
        box = p.level_box[lv]
        return list(zip(x.tolist(), y.tolist(), box[:, 0].tolist(), box[:, 1].tolist()))

    def faces(self, min_neighbors):
        """The faces ``[[x, y, w, h], ...]``: :meth:`boxes` grouped by OpenCV's ``groupRectangles`` and clipped
        to the frame (:func:`gpumr.faces.reference.group`), as ``detectMultiScale`` gives them."""
        return group(self.boxes(), min_neighbors, self.shape[::-1])


class Lane:
    """One caller's way to a device: a stream for the kernels and the copies back, one for the uploads (a part's upload
    runs beside the part before's kernels), a device buffer and page-locked buffers, made once and reused."""

    def __init__(self, lx):
        self.stream, self.uploads = lx.stream(), lx.stream()
        self.dev, self.held, self.stride = None, 0, 0
        self.up = [None] * SLOTS
        self.back = [lx.pinned(HEAD + RESULT_WINDOWS, np.int32) for _ in range(SLOTS)]
        self.programs = {}  # (plan, slot, read-back windows) -> what queues such a part here (FaceGPU._program)
        self.loaded = [None] * SLOTS  # the plan whose tables each device slot holds

    def fit(self, lx, slot_bytes, scratch_bytes, upload):
        """Make the buffers hold parts of up to these sizes (nothing of this lane may be in flight)."""
        need = SLOTS * slot_bytes + scratch_bytes
        if self.dev is None or self.held < need or self.held > need + MEMORY_MARGIN // 2:
            self.programs.clear()
            self.loaded = [None] * SLOTS
            self.dev = None  # the old buffer given back before the new one is made
            self.dev, self.held = lx.empty(need, np.uint8), need
        if self.stride != slot_bytes:
            self.programs.clear()
            self.loaded = [None] * SLOTS
        self.stride = slot_bytes
        for i in range(SLOTS):
            if self.up[i] is None or len(self.up[i]) < upload:
                self.up[i] = lx.pinned(upload, np.uint8)

    def at(self, lx, lay, where, name, slot=0, skip=0, count=None):
        """A view of array ``name`` of layout ``lay``'s ``where`` ("slot", in slot ``slot``, or "scratch"),
        from its element ``skip``, ``count`` elements (default: the rest)."""
        off, n, dtype = getattr(lay, where)[name]
        base = slot * self.stride if where == "slot" else SLOTS * self.stride
        return lx.view(self.dev, base + off + skip * dtype.itemsize, n - skip if count is None else count, dtype)


class FaceGPU:
    """``run(grey frames, gpu)`` -> faces per frame, as the CPU path (``detectMultiScale``) gives them."""

    def __init__(self, cascade_file, scale_factor=DEFAULTS["scale_factor"], min_neighbors=DEFAULTS["min_neighbors"],
                 min_size=DEFAULTS["min_size"], max_size=DEFAULTS["max_size"], prefer=None, constant=True):
        self.cascade = Cascade(cascade_file)
        self.constant = constant
        self.params = dict(scale_factor=scale_factor, min_neighbors=min_neighbors, min_size=min_size,
                           max_size=max_size)
        self.prefer = prefer
        n_stages = len(self.cascade.stages)
        bounds = [b for b in STAGE_GROUPS if b < n_stages] + [n_stages]
        #: ``(first, last)`` stages of each group after the first stage (at least one: the last list is its output).
        self.groups = list(zip(bounds[:-1], bounds[1:])) or [(n_stages, n_stages)]
        self.cascade_file = cascade_file
        self._devices = DeviceStates("GPU face detection", self._setup, self._self_check, self._check_case)
        self._shapes = collections.OrderedDict()  # frame size -> its levels and resize taps (_shape_taps)
        self._sizes = collections.OrderedDict()  # frame size -> its integral-image elements (_elements)
        self._plans = collections.OrderedDict()  # a part's frame shapes -> its Plan
        self._lock = threading.Lock()

    # -- host side: one part's tables ----------------------------------------
    def _levels(self, shape):
        """The levels scanned in a frame of ``shape`` with this detector's parameters (:func:`levels`)."""
        p = self.params
        return levels(shape, self.cascade.window, p["scale_factor"], p["min_size"], p["max_size"])

    def _kept(self, cache, key, make):
        """``cache[key]``, made by ``make()`` on a miss; the last :data:`SHAPES_KEPT` keys kept."""
        with self._lock:
            hit = cache.get(key)
        if hit is not None:
            return hit
        hit = make()
        with self._lock:
            if len(cache) >= SHAPES_KEPT:
                cache.popitem(last=False)
            cache[key] = hit
        return hit

    def _elements(self, shape):
        """The integral-image elements of a frame of ``shape`` (:func:`integral_elements`), once per size."""
        shape = (int(shape[0]), int(shape[1]))
        return self._kept(self._sizes, shape, lambda: integral_elements(self._shape_taps(shape)[0]))

    def _shape_taps(self, shape):
        """A frame size's levels and resize taps: ``(levels, taps int32 [n, 2], (column, row) tap offsets per
        level)``, computed once per size (the one cache of resize taps; plans are made from it)."""
        def make():
            h, w = shape
            lvs = self._levels(shape)
            parts, offsets, n = [], [], 0
            for _, (sw, sh), *_ in lvs:
                parts += [resize_taps(w, sw), resize_taps(h, sh)]
                offsets.append((n, n + sw))
                n += sw + sh
            taps = np.concatenate(parts) if parts else np.zeros((0, 2), np.int32)
            return lvs, taps, offsets
        return self._kept(self._shapes, shape, make)

    def plan(self, shapes):
        """The :class:`Plan` of a part whose frames have these ``(height, width)`` shapes, made once per run of the
        same shapes: the level table (int32 [n, 10]: pixel, integral and window offsets, sizes and grids), each
        level's source (int32 [n, 4]: its frame's offset and row length in the packed frames, its first column and row
        tap), the taps of the part's frame sizes (in order of first appearance), the kernels' lists, and the upload's
        bytes before the frames."""
        shapes = tuple(tuple(int(v) for v in s) for s in shapes)
        return self._kept(self._plans, shapes, lambda: self._make_plan(shapes))

    def _make_plan(self, shapes):
        c = self.cascade
        sizes = list(dict.fromkeys(shapes))
        tap_base, taps, n_taps = {}, [], 0
        for shape in sizes:
            _, t, _ = self._shape_taps(shape)
            tap_base[shape] = n_taps
            taps.append(t)
            n_taps += len(t)
        rows, sources, meta, firsts = [], [], [], []
        img_off = int_off = win_off = src_off = 0
        for i, shape in enumerate(shapes):
            lvs, _, offsets = self._shape_taps(shape)
            base = tap_base[shape]
            firsts.append(win_off)
            for lv, (xt, yt) in zip(lvs, offsets):
                s, (w, h), step, win, _ = lv
                nx, ny, gx, gy = window_grid(lv, c.window)
                rows.append((img_off, int_off, w, h, nx, ny, step, gx, gy, win_off))
                sources.append((src_off, shape[1], base + xt, base + yt))
                meta.append((i, s, win))
                img_off += w * h
                int_off += (w + 1) * (h + 1)
                win_off += gx * gy
            src_off += shape[0] * shape[1]
        table = np.array(rows, np.int32).reshape(-1, 10)
        widths, which = np.unique(table[:, 2] + 1, return_inverse=True)
        arrays = dict(table=table, sources=np.array(sources, np.int32).reshape(-1, 4),
                      taps=np.concatenate(taps) if taps else np.zeros((0, 2), np.int32),
                      irows=per_level(table[:, 3] + 1), icols=per_level(table[:, 2] + 1), grows=per_level(table[:, 8]),
                      widths=widths.astype(np.int32), level_feats=(which.reshape(-1) * len(c.rects)).astype(np.int32))
        counts = part_counts([(s, self._shape_taps(s)[0]) for s in shapes], c.window)
        lay = layout(counts, len(c.rects))
        tables = np.zeros(lay.slot["frames"][0], np.uint8)
        for name, a in arrays.items():
            off = lay.slot[name][0]
            tables[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
        return Plan(shapes, counts=counts, layout=lay, tables=tables, sizes=tuple(sizes), meta=meta,
                    frame_windows=np.array(firsts + [win_off], np.int64), n_pix=img_off, n_int=int_off, n_win=win_off,
                    **arrays)

    def pyramid(self, grays):
        """One part's tables and its frames packed into one uint8 buffer (what its upload holds): a :class:`Part`."""
        p = self.plan([g.shape for g in grays])
        frames = (np.concatenate([np.ascontiguousarray(g, np.uint8).ravel() for g in grays]) if grays
                  else np.zeros(0, np.uint8))
        return Part(p.table, p.sources, p.sizes, p.taps, frames, p.meta, p.n_pix, p.n_int, p.n_win)

    # -- device state ----------------------------------------------------
    def _setup(self, gpu):
        from ..gpu.kernels import defines
        from ..gpu.launch import launcher
        lx = launcher(gpu, self.prefer)
        c = self.cascade
        layout_ = defines("haar")
        if layout_["APPEND_THREADS"] != BLOCK or layout_["ROW_WARP"] != ROW_WARP or len(self.groups) + 1 > HEAD:
            raise RuntimeError(f"haar.cu appends in blocks of {layout_['APPEND_THREADS']} threads and sums rows with "
                               f"{layout_['ROW_WARP']}, the driver launches {BLOCK} and {ROW_WARP}; or "
                               f"{len(self.groups)} stage groups leave no room for their counters")
        stages, nodes = c.packed(layout_)
        constant = bool(self.constant) and len(stages) <= layout_["CONST_STAGES"] and \
            len(nodes) <= layout_["CONST_NODES"]
        kind = "" if constant else "_global"
        with lx.active(), settled(lx, gpu):
            mod = lx.module("haar")
            fns = {n: lx.function(mod, n) for n in ("pyramid", "integral_rows", "integral_cols", "feature_offsets",
                                                     "first_survivors")}
            fns.update({n: lx.function(mod, n + kind) for n in ("first_stage", "run_stages")})
            st = dict(lx=lx, fns=fns, mod=mod, constant=(stages, nodes) if constant else None,
                      run_blocks=lx.resident_blocks(fns["run_stages"], BLOCK) or 4096, lanes=[],
                      lanes_lock=threading.Lock(),
                      rects=lx.to_device(_at_least_one(c.rects.reshape(-1, 4))),
                      weights=lx.to_device(_at_least_one(c.weights.reshape(-1))),
                      cascade=[np.int32(c.window[0]), np.int32(c.window[1]), lx.to_device(_at_least_one(stages)),
                               lx.to_device(_at_least_one(nodes))])
            self._constants(st)
            lx.synchronize()  # the uploads and constants landed: the lanes' streams are not ordered after them
        return st

    @staticmethod
    def _constants(st):
        """Copy the cascade to the module's constant memory, if this detector keeps it there."""
        if st["constant"] is not None:
            stages, nodes = st["constant"]
            st["lx"].set_constant(st["mod"], "c_stages", stages)
            st["lx"].set_constant(st["mod"], "c_nodes", nodes)

    def _check_case(self):
        """The CPU's side of the self-check: a built-in photo and OpenCV's faces in it (``detectMultiScale``,
        what the GPU path must equal), computed once when the detector is made, outside any GPU lease."""
        import cv2
        from skimage import data

        from .cpu import detect, load_cascade
        photo = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
        return photo, sorted(detect(load_cascade(self.cascade_file), photo, **self.params))

    def _self_check(self, st, case):
        photo, want = case
        got = sorted(self._found(st, [photo])[0].faces(self.params["min_neighbors"]))
        return True if got == want else f"self-check on a built-in photo gave {got}, the CPU reference {want}"

    # -- detection -------------------------------------------------------
    def run(self, grays, gpu):
        """Faces per frame (``[[x, y, w, h], ...]`` each) in the grey frames ``grays``, on ``gpu``. Raises
        ``RuntimeError`` if ``gpu`` is not trusted (set-up or self-check failed; the reason given)."""
        return [f.faces(self.params["min_neighbors"]) for f in self.found(grays, gpu)]

    def found(self, grays, gpu):
        """What the device finds in each of the grey frames ``grays``, on ``gpu``: a :class:`Found` per frame, which
        makes the frame's faces without the device (:meth:`Found.faces`). Raises ``RuntimeError`` if ``gpu`` is not
        trusted (set-up or self-check failed; the reason given)."""
        return self._found(self._devices.get(gpu), grays, gpu)

    def _found(self, st, grays, gpu=None):
        """A :class:`Found` per frame; the frames sent in parts of at most :data:`PART`, in turns that keep the
        kernels' offsets within ``int`` (:func:`turns`)."""
        parts = [(a, min(a + PART, end)) for first, end in cut([self._elements(g.shape) for g in grays], MAX_ELEMENTS)
                 for a in range(first, end, PART)]
        if not parts:
            return []
        plans = [self.plan([g.shape for g in grays[a:b]]) for a, b in parts]
        lx = st["lx"]
        lane = self._take_lane(st)
        out, pending = [], collections.deque()
        with lx.active(), settled(lx, gpu):
            lane.fit(lx, max(p.layout.slot_bytes for p in plans), max(p.layout.scratch_bytes for p in plans),
                     max(p.layout.upload for p in plans))
            for i, ((a, b), plan) in enumerate(zip(parts, plans)):
                slot = i % SLOTS
                pending.append((slot, plan, self._queue(st, lane, slot, plan, grays[a:b])))
                if len(pending) == SLOTS:
                    out.extend(self._collect(st, lane, *pending.popleft()))
            while pending:
                out.extend(self._collect(st, lane, *pending.popleft()))
        self._give_lane(st, lane)  # (not after a failure: settled, the lane is let go of)
        return out

    @staticmethod
    def _take_lane(st):
        with st["lanes_lock"]:
            if st["lanes"]:
                return st["lanes"].pop()
        with st["lx"].active():
            return Lane(st["lx"])

    @staticmethod
    def _give_lane(st, lane):
        with st["lanes_lock"]:
            st["lanes"].append(lane)

    @staticmethod
    def fill(buffer, plan, grays, tables=True):
        """Write a part's upload into ``buffer`` (uint8, page-locked, at least ``plan.layout.upload`` bytes): its
        tables (unless ``tables`` is False: the device's slot holds them already), its frames, zeroed counters.
        Returns the upload (a view of ``buffer``): the host's only copy of the frames on their way to the device."""
        lay = plan.layout
        up = buffer[:lay.upload]
        if tables:
            up[:len(plan.tables)] = plan.tables
        at = lay.slot["frames"][0]
        for g in grays:
            up[at:at + g.size].reshape(g.shape)[...] = g
            at += g.size
        up[lay.slot["head"][0]:] = 0  # the counters
        return up

    def _queue(self, st, lane, slot, plan, grays):
        """Queue one part: its upload on the lane's upload stream, then, on its kernel stream once the upload landed,
        every kernel and the copy back of its counters and last list; returns what :meth:`_collect` waits for. No call
        here waits for the device. (The slot's last part was collected before: nothing queued still reads it.)"""
        lx, s = st["lx"], lane.stream
        upload, frames, launches, back = self._program(st, lane, slot, plan)
        fresh = lane.loaded[slot] is not plan  # (else the slot holds this plan's tables: the frames go alone)
        up = self.fill(lane.up[slot], plan, grays, tables=fresh)
        lane.loaded[slot] = None
        if fresh:
            lx.to_device_async(up, upload, lane.uploads)
        else:
            lx.to_device_async(up[plan.layout.slot["frames"][0]:], frames, lane.uploads)
        lane.loaded[slot] = plan
        lx.wait_event(s, lx.record(lane.uploads))
        for fn, grid, args in launches:
            lx.launch_on(s, fn, grid, (BLOCK, 1, 1), *args)
        return lx.to_host_async(back, lane.back[slot][:back.shape[0]], s)

    def _program(self, st, lane, slot, plan):
        """What queues a part of ``plan`` in ``slot`` of ``lane``: ``(upload, frames, [(kernel, grid, args), ...],
        back)``, the device views its upload fills (all of it, or from its frames on) and its copy back reads, and its
        launches; made once per lane, plan and slot, and kept while the lane's buffers stay (:meth:`Lane.fit`)."""
        key = (plan, slot, RESULT_WINDOWS)
        got = lane.programs.get(key)
        if got is not None:
            return got
        lx, f, lay = st["lx"], st["fns"], plan.layout
        i32 = np.int32

        def slot_(name, **kw):
            return lane.at(lx, lay, "slot", name, slot, **kw)

        def scratch(name):
            return lane.at(lx, lay, "scratch", name)
        upload = lx.view(lane.dev, slot * lane.stride, lay.upload, np.uint8)
        at = lay.slot["frames"][0]
        frames = lx.view(lane.dev, slot * lane.stride + at, lay.upload - at, np.uint8)
        table = plan.table
        n_lv, n_pix, n_win, nf = len(table), plan.n_pix, plan.n_win, len(self.cascade.rects)
        levels, img, total, sq, codes = slot_("table"), scratch("img"), scratch("sum"), scratch("sq"), scratch("codes")
        n_rows, n_cols = len(plan.irows), len(plan.icols)
        launches = [(f["pyramid"], _grid(n_pix), (slot_("frames"), levels, slot_("sources"), i32(n_lv), i32(n_pix),
                                                 slot_("taps"), img)),
                    (f["integral_rows"], _grid(n_rows * ROW_WARP), (img, levels, slot_("irows"), i32(n_rows), total,
                                                                   sq)),
                    (f["integral_cols"], _grid(n_cols), (levels, slot_("icols"), i32(n_cols), total, sq))]
        feats, n_w = scratch("feats"), len(plan.widths)
        if nf:
            launches.append((f["feature_offsets"], _grid(n_w * nf), (st["rects"], st["weights"], i32(nf),
                                                                      slot_("widths"), i32(n_w), feats)))
        casc = st["cascade"] + [feats, slot_("level_feats")]
        launches.append((f["first_stage"], _grid(n_win), (*casc, levels, i32(n_lv), i32(n_win), total, sq, codes)))
        # lists[g] holds group g's input (lists[0]: the first stage's survivors), its length head[g]; the last
        # group writes the slot's last list, right after the counters
        n_groups = len(self.groups)
        lists = [None] * n_groups + [slot_("last")]
        for g in range(n_groups - 1, -1, -1):
            lists[g] = scratch("list_a" if (n_groups - 1 - g) % 2 == 0 else "list_b")
        head = [slot_("head", skip=g, count=1) for g in range(n_groups + 1)]
        n_grows = len(plan.grows)
        launches.append((f["first_survivors"], _grid(n_grows), (levels, slot_("grows"), i32(n_grows), codes, lists[0],
                                                                head[0])))
        blocks = (min(st["run_blocks"], -(-n_win // BLOCK)), 1, 1)  # as many as the device holds at once
        for g, (first, last) in enumerate(self.groups):
            launches.append((f["run_stages"], blocks, (*casc, levels, i32(n_lv), total, sq, lists[g], head[g],
                                                       i32(first), i32(last), lists[g + 1], head[g + 1])))
        n_back = HEAD + min(RESULT_WINDOWS, lay.slot["last"][1])
        back = lx.view(lane.dev, slot * lane.stride + lay.slot["head"][0], n_back, np.int32)
        if len(lane.programs) >= SHAPES_KEPT * SLOTS:
            lane.programs.clear()
        lane.programs[key] = got = (upload, frames, launches, back)
        return got

    def _collect(self, st, lane, slot, plan, token):
        """Wait for a part's copy back; its windows (sorted), split by frame: a :class:`Found` per frame."""
        lx = st["lx"]
        lx.wait(token)
        got = lane.back[slot]
        n = int(got[len(self.groups)])
        windows = np.array(got[HEAD:HEAD + min(n, RESULT_WINDOWS)])
        if n > RESULT_WINDOWS:
            rest = lx.to_host(lane.at(lx, plan.layout, "slot", "last", slot, skip=RESULT_WINDOWS,
                                      count=n - RESULT_WINDOWS))
            windows = np.concatenate([windows, rest])
        windows.sort()
        cut = np.searchsorted(windows, plan.frame_windows)
        return [Found(windows[cut[i]:cut[i + 1]], plan, i) for i in range(len(plan.shapes))]
