"""The slab backprojector on a GPU (``cuda/backproject.cu``), same function as the CPU one.

Projections are uploaded once per task and device and kept there across the
task's slabs. A call takes a batch of slabs and pipelines them
(:meth:`SlabBackprojector.run`): a slab's copy back into page-locked memory
overlaps the next slab's kernels, through two device buffers and two
page-locked host buffers made once per device and reused by every slab and
call after (grown only for a taller slab), and the slabs land in one host
array per call; each
launch's angles are cut into the parts that fill the device's waves of
blocks (:func:`split_for_waves`; ``bench/gpu_model.py`` predicts the
gain). A slab whose output does not fit the free device memory is cut into
smaller slabs (halving) rather than failing. Before a device is trusted,
2 ZB + 3 slices around the volume's centre (every one of the ZB slices a
kernel thread keeps), in a window of :data:`CHECK_WINDOW` voxels around
the slices' centre, are compared with the CPU backprojector
(:mod:`gpumr.gpu.trust`): the CPU's side is computed when the
backprojector is made, before any GPU is leased, and the window keeps the
check small at any volume size; a mismatch disables the GPU path (slabs
then fall back to the CPU, counted).
"""

import numpy as np

from ..gpu.kernels import defines
from ..gpu.trust import DeviceStates
from .backproject import _axes, _scalars

BLOCK = (32, 8, 1)
#: The self-check's window of each slice, rows x columns around the centre (whole blocks of BLOCK).
CHECK_WINDOW = (32, 64)


def check_tolerance(geometry):
    """The self-check's bound on the device's difference from the CPU, relative to the terms' magnitude.

    Both backprojectors sum ``n_angles`` bilinear samples in float32, in
    different orders: a detector coordinate near ``N`` pixels is exact to
    about ``N * eps`` pixels, so each sample may differ by that fraction of
    its neighbours' difference. Such rounding is bounded by the sum of the
    terms' magnitudes, not by the sum itself, which filtered projections
    cancel almost to nothing on noise (an H200 differed from the CPU by
    2.2e-5 of the sum at 512 and 4.5e-5 at 1024 detector pixels on raw
    noise; two correct CPU backprojectors differ 40-60 times more on
    filtered noise than on raw): the
    check divides the L2 difference by the L2 norm of the backprojection of
    ``|q|`` and allows four times ``N * eps`` (at least 1e-5). An indexing or
    bounds error differs by a fair fraction of the magnitude.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> float(check_tolerance(geometry.simple(1024, 360, n_detector=1024)))  # doctest: +ELLIPSIS
    0.000488...
    """
    eps = float(np.finfo(np.float32).eps)
    return max(1e-5, 4 * eps * max(geometry.nDetector))


class SlabBackprojector:
    """``run([(z0, z1), ...], gpu)`` -> the slabs, float32 [z, y, x] each.

    Parameters
    ----------
    padded : ndarray [angle, rows + 2, cols + 2]
        Filtered projections with their zero border (:func:`gpumr.ct.backproject.pad`).
    geometry : gpumr.ct.geometry.Geometry
    """

    def __init__(self, padded, geometry, prefer=None):
        self.padded = np.ascontiguousarray(padded, np.float32)
        self.geometry = geometry
        self.prefer = prefer
        self._devices = DeviceStates("GPU backprojection", self._setup, self._self_check, self._check_case)

    def _setup(self, gpu):
        from ..gpu.launch import launcher
        lx = launcher(gpu, self.prefer)
        constants = defines("backproject")  # slices per thread, angles per launch (constant memory)
        with lx.active():
            mod = lx.module("backproject")
            zs, ys, xs = (a.astype(np.float32) for a in _axes(self.geometry))
            b = np.asarray(self.geometry.angles, np.float64)
            trig = np.stack([np.cos(b), np.sin(b)], axis=1).astype(np.float32)
            return dict(lx=lx, mod=mod, fn=lx.function(mod, "backproject_slab"), proj=lx.to_device(self.padded),
                        trig=trig, zs=lx.to_device(zs), ys=lx.to_device(ys), xs=lx.to_device(xs),
                        zb=constants["ZB"], max_angles=constants["MAX_ANGLES"], streams=(lx.stream(), lx.stream()),
                        slots=[None, None])

    def _check_window(self):
        """The self-check's slices ``(z0, z1)`` and window ``(y0, y1, x0, x1)`` (see :data:`CHECK_WINDOW`)."""
        nz, ny, nx = self.geometry.nVoxel
        zb = defines("backproject")["ZB"]
        n = min(2 * zb + 3, nz)
        z0 = max(0, min(nz // 2 - n // 2, nz - n))
        h, w = min(CHECK_WINDOW[0], ny), min(CHECK_WINDOW[1], nx)
        y0, x0 = (ny - h) // 2, (nx - w) // 2
        return (z0, z0 + n), (y0, y0 + h, x0, x0 + w)

    def _check_case(self):
        """The CPU's side of the self-check: its window of slices, backprojected on the CPU, and the L2 norm
        of the backprojection of the projections' magnitudes there (:func:`check_tolerance`).

        Computed once when the backprojector is made (:class:`gpumr.gpu.trust.DeviceStates` starts it
        then), so that no GPU lease waits for it.
        """
        from .backproject import backproject
        from .bands import row_band
        g = self.geometry
        (z0, z1), window = self._check_window()
        cpu = backproject(None, g, z0, z1, padded=self.padded, window=window)
        r0, r1 = row_band(g, z0, z1)
        magnitude = backproject(np.abs(self.padded[:, r0 + 1:r1 + 1, 1:-1]), g, z0, z1, row0=r0, window=window) \
            if r1 > r0 else cpu
        return cpu, max(float(np.linalg.norm(magnitude)), 1e-30)

    def _self_check(self, st, case):
        """The check's window of slices on the device against the CPU's: two whole ZB-slice blocks and 3 more.

        Each thread of the kernel keeps ZB slices; the check covers every one
        of a thread's slices, and a block that the volume's end cuts short.
        """
        cpu_slab, magnitude = case
        (z0, z1), (y0, y1, x0, x1) = self._check_window()
        with st["lx"].active():
            gpu_slab = self._slab(st, z0, z1, st["ys"][y0:y1], st["xs"][x0:x1])
        err, bound = float(np.linalg.norm(gpu_slab - cpu_slab)) / magnitude, check_tolerance(self.geometry)
        return True if err < bound else \
            f"slices {z0}-{z1 - 1} differ from the CPU backprojector ({err:.2e} of the terms' magnitude, over " \
            f"{bound:.1e})"

    def state(self, gpu):
        """``gpu``'s state (launcher, kernel, uploads), set up and self-checked on first use.

        Raises
        ------
        RuntimeError
            If the device is not trusted (the reason given).
        """
        return self._devices.get(gpu)

    def run(self, slabs, gpu):
        """The slabs ``[(z0, z1), ...]`` backprojected on ``gpu``, in order: views of one host array.

        Pipelined: each slab's launches go on one stream, its copy back into
        page-locked host memory on another, after them; the next slab's
        launches are queued before the host waits for that copy, so copies
        (and the host's receiving of each slab) overlap the kernels. At most
        two slabs are in flight, each in one of the device's two slots (a
        device buffer and a page-locked host buffer, made once and reused by
        every later slab and call); a slab that does not fit beside them runs
        alone, cut in halves if need be (:meth:`_slab`).
        """
        st = self.state(gpu)
        lx = st["lx"]
        ny, nx = self.geometry.nVoxel[1], self.geometry.nVoxel[2]
        heights = [z1 - z0 for z0, z1 in slabs]
        result = np.empty((sum(heights), ny, nx), np.float32)
        views = np.split(result, np.cumsum(heights)[:-1]) if slabs else []
        with lx.active():
            compute, copy = st["streams"]
            flight = []
            for i, ((z0, z1), view) in enumerate(zip(slabs, views)):
                try:
                    dev, host = self._slot(st, i % 2, z1 - z0)
                except lx.out_of_memory:
                    self._land(lx, flight, len(flight))
                    lx.synchronize()
                    view[:] = self._slab(st, z0, z1)
                    continue
                lx.zero_async(dev, compute)
                self.launch(st, z0, z1, dev, compute)
                flight.append((host, view, lx.to_host_async(dev, host, copy, after=compute)))
                self._land(lx, flight, len(flight) - 1)
            self._land(lx, flight, len(flight))
        return views

    @staticmethod
    def _slot(st, i, height):
        """Slot ``i``'s device buffer and page-locked host buffer, as ``height`` slices of the volume.

        Made on first use and kept (for every later slab and call); remade
        only for a taller slab. A slot is reused only after its last copy
        landed (:meth:`run` keeps at most two slabs in flight).
        """
        lx = st["lx"]
        have = st["slots"][i]
        if have is None or have[0].shape[0] < height:
            st["slots"][i] = None  # the old buffers go before the new are made
            shape = (height,) + tuple(st["ys"].shape) + tuple(st["xs"].shape)
            have = st["slots"][i] = (lx.empty(shape, np.float32), lx.pinned(shape, np.float32))
        dev, host = have
        return dev[:height], host[:height]

    @staticmethod
    def _land(lx, flight, n):
        """The first ``n`` slabs in flight received: their copies waited for, copied into their views."""
        for _ in range(n):
            host, view, token = flight.pop(0)
            lx.wait(token)
            view[:] = host

    def _slab(self, st, z0, z1, ys=None, xs=None):
        """Slab [z0, z1) alone (rows ``ys``, columns ``xs`` of each slice: device arrays, default all), cut in
        halves where its output does not fit the device."""
        lx = st["lx"]
        ys = st["ys"] if ys is None else ys
        xs = st["xs"] if xs is None else xs
        nz, ny, nx = z1 - z0, ys.shape[0], xs.shape[0]
        try:
            out = lx.zeros((nz, ny, nx), np.float32)
        except lx.out_of_memory:
            if nz == 1:
                raise
            mid = (z0 + z1) // 2
            return np.concatenate([self._slab(st, z0, mid, ys, xs), self._slab(st, mid, z1, ys, xs)])
        self.launch(st, z0, z1, out, ys=ys, xs=xs)
        lx.synchronize()
        return lx.to_host(out)

    def launch(self, st, z0, z1, out, stream=None, ys=None, xs=None):
        """Queue the kernel launches for slab [z0, z1) into zeroed device array ``out`` on ``stream``.

        Angles go in launches of at most ``MAX_ANGLES`` (constant memory), and
        each launch's angles in the parts that fill its waves best
        (:func:`split_for_waves`). ``ys``, ``xs``: the voxel rows and columns
        to compute (device arrays; default: all of them).
        """
        lx, k = st["lx"], _scalars(self.geometry)
        ys = st["ys"] if ys is None else ys
        xs = st["xs"] if xs is None else xs
        nz, ny, nx = out.shape
        na, plane = self.padded.shape[0], self.padded.shape[1] * self.padded.shape[2]
        step = max(1, min(st["max_angles"], (2 ** 31 - 1) // plane - 1))  # the kernel's 32-bit element indices
        grid = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1], (nz + st["zb"] - 1) // st["zb"])
        f32, i32 = np.float32, np.int32
        zs = st["zs"][z0:z1]
        wave = lx.resident_blocks(st["fn"], BLOCK[0] * BLOCK[1] * BLOCK[2])
        for a0 in range(0, na, step):
            a1 = min(a0 + step, na)
            split = split_for_waves(grid[0] * grid[1] * grid[2], wave, a1 - a0)
            if st.get("trig_at") != a0:  # constant memory holds another part's angles: replace them once idle
                lx.synchronize()
                lx.set_constant(st["mod"], "c_trig", st["trig"][a0:a1])
                st["trig_at"] = a0
            lx.launch_on(stream, st["fn"], grid[:2] + (grid[2] * split,), BLOCK, st["proj"][a0:a1], i32(a1 - a0),
                         i32(k["nv"]), i32(k["nu"]), zs, ys, xs, i32(nz), i32(ny), i32(nx),
                         f32(k["dso"]), f32(k["dsd"]), f32(k["cu"]), f32(k["cv"]), f32(k["inv_du"]),
                         f32(k["inv_dv"]), i32(split), out)


#: The most parts a launch's angles are cut into, and the fewest angles a part keeps.
MAX_SPLIT, MIN_PART_ANGLES = 8, 16


def split_for_waves(blocks, wave, angles):
    """Into how many parts to cut a launch's ``angles`` so that its ``blocks`` (per part) fill whole waves.

    ``wave``: blocks the device runs at once (None: unknown, no cut). The
    part count that leaves the smallest idle tail wins; a cut must win more
    than 2% of the waves, and every part keeps at least
    :data:`MIN_PART_ANGLES` angles.
    """
    if not wave:
        return 1

    def fill(s):
        return blocks * s / (-(-blocks * s // wave) * wave)
    best = 1
    for s in range(2, MAX_SPLIT + 1):
        if angles // s >= MIN_PART_ANGLES and fill(s) > fill(best) + 0.02:
            best = s
    return best
