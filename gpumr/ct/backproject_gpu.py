"""The slab backprojector on a GPU (``cuda/backproject.cu``), same function as the CPU one."""

import os
import threading
import weakref

import numpy as np

from ..core.processor import reason_of
from ..gpu.kernels import defines
from ..gpu.trust import DeviceStates, settled
from ..log import logger, say_once
from .backproject import _axes, _scalars
from .bands import FilteredRows, row_band, runs

log = logger(__name__)

BLOCK = (32, 8, 1)
#: The self-check's window of each slice, rows x columns around the centre (whole blocks of BLOCK).
CHECK_WINDOW = (32, 64)
#: Rows of the first production slab the self-check also computes (one row of blocks, every column).
STRIP_ROWS = BLOCK[1]
#: The projections go to the device in chunks of about this many bytes (two page-locked staging buffers).
UPLOAD_CHUNK_BYTES = 64 << 20
#: Slabs handed out per device whose page-locked buffers are kept for reuse once let go of.
HOST_SLABS = 12
#: The slab height the self-check's strip takes as production's (the CT workload's default ``--slab``).
PRODUCTION_SLAB = 16
#: The self-check's bound (:func:`check_tolerance`): a multiple of ``N * eps / sqrt(n_angles)``, and at least a
#: number of float32 epsilons.
ROUNDING_SCALE, ROUNDING_FLOOR = 1.5, 8


def check_tolerance(geometry):
    """The self-check's bound on the device's difference from the CPU, relative to the terms' magnitude.

    Examples
    --------
    >>> from gpumr.ct import geometry
    >>> float(check_tolerance(geometry.simple(1024, 360, n_detector=1024)))  # doctest: +ELLIPSIS
    9.6...e-06
    """
    eps = float(np.finfo(np.float32).eps)
    return eps * max(ROUNDING_FLOOR, ROUNDING_SCALE * max(geometry.nDetector) / np.sqrt(geometry.n_angles))


class HostSlabs:
    """Page-locked host buffers that slabs are copied into and handed out as the slabs themselves."""

    def __init__(self, lx, keep=None):
        self.lx, self.keep = lx, HOST_SLABS if keep is None else keep
        self.out = 0
        self._free = []
        self._lock = threading.Lock()

    def take(self, shape):
        """A float32 slab of ``shape`` in page-locked memory (its contents undefined until copied into)."""
        n = int(np.prod(shape))
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if b.size >= n]
            buf = self._free.pop(min(fits, key=lambda i: self._free[i].size)) if fits else None
            self.out += 1
        if buf is None:
            try:
                buf = self.lx.pinned(n, np.float32)
            except BaseException:
                with self._lock:
                    self.out -= 1
                raise
        lent = _Lent(buf[:n].reshape(shape))
        weakref.finalize(lent, self._give_back, buf)
        return np.asarray(lent)

    def _give_back(self, buf):
        with self._lock:
            self.out -= 1
            if len(self._free) < self.keep:
                self._free.append(buf)


class _Lent:
    """A slab lent out of :class:`HostSlabs`: the base of the array the caller gets."""

    def __init__(self, view):
        self.view = view
        self.__array_interface__ = view.__array_interface__


class Lane:
    """One caller's way to a device: a stream for the kernels, one for the copies back, and two device slots (buffers
    of slab height), made once and reused; ``freed[i]``: the event after the last copy out of slot ``i`` (None: none
    queued)."""

    def __init__(self, lx):
        self.compute, self.copy = lx.stream(), lx.stream()
        self.slots, self.freed = [None, None], [None, None]

    def slot(self, lx, i, height, plane):
        """Slot ``i``'s device buffer as ``height`` slices of ``plane`` (rows, columns), made or grown (after the
        last copy out of it landed) where it is smaller; the kernels wait for that copy before they refill it."""
        have = self.slots[i]
        if have is None or have.shape[0] < height:
            lx.wait(self.freed[i])  # (the old buffer is given back only once nothing queued reads it)
            self.slots[i], self.freed[i] = None, None
            self.slots[i] = lx.empty((height,) + tuple(plane), np.float32)
        lx.wait_event(self.compute, self.freed[i])
        return self.slots[i][:height]


class SlabBackprojector:
    """``run([(z0, z1), ...], gpu)`` -> the slabs, float32 [z, y, x] each.

    Parameters
    ----------
    padded : ndarray [angle, rows + 2, cols + 2] or gpumr.ct.bands.FilteredRows
        Filtered projections with their zero border (:func:`gpumr.ct.backproject.pad`), or a task's projections, which
        each device filters itself after their upload where its launcher has an FFT (the rows the host has not
        filtered yet), else filtered on the host first.
    geometry : gpumr.ct.geometry.Geometry
    prefer : str, optional
        ``"cupy"`` to try CuPy before PyCUDA.
    slab : int, optional
        The slab height production runs (the self-check's strip is launched as one of these is)."""

    def __init__(self, padded, geometry, prefer=None, slab=PRODUCTION_SLAB):
        self.rows = padded if isinstance(padded, FilteredRows) else None
        self.padded = padded.padded if self.rows is not None else np.ascontiguousarray(padded, np.float32)
        self.geometry = geometry
        self.prefer = prefer
        self.slab = max(1, min(int(slab), geometry.nVoxel[0]))
        self._devices = DeviceStates("GPU backprojection", self._setup, self._self_check, self._check_case)

    # -- set-up ------------------------------------------------------------------------------------
    def _setup(self, gpu):
        from ..gpu.launch import launcher
        lx = launcher(gpu, self.prefer)
        constants = defines("backproject")  # slices per thread, angles per launch
        with lx.active(), settled(lx, gpu):
            mod = lx.module("backproject")
            fn = lx.function(mod, "backproject_slab")
            zs, ys, xs = (a.astype(np.float32) for a in _axes(self.geometry))
            b = np.asarray(self.geometry.angles, np.float64)
            trig = np.stack([np.cos(b), np.sin(b)], axis=1).astype(np.float32)
            st = dict(lx=lx, mod=mod, fn=fn, zb=constants["ZB"], max_angles=constants["MAX_ANGLES"],
                      wave=lx.resident_blocks(fn, BLOCK[0] * BLOCK[1] * BLOCK[2]), lanes=[],
                      lanes_lock=threading.Lock(), host=HostSlabs(lx))
            # (each upload held by the state as it is made: a failure keeps them until it is settled)
            st["proj"] = self._upload(lx, gpu)
            for name, host in (("trig", trig), ("zs", zs), ("ys", ys), ("xs", xs)):
                st[name] = lx.to_device(host)
            lx.synchronize()  # every upload landed: the lanes' streams are not ordered after the legacy stream's
        return st

    def _upload(self, lx, gpu):
        """The projections on the device, filtered: uploaded as :meth:`_copy_up` copies them, then the rows not
        filtered on the host filtered on the device (:func:`gpumr.ct.fdk_gpu.filter_on_device`), or, where the
        launcher has no FFT, filtered on the host first."""
        if self.rows is None:
            return self._copy_up(lx)[0]
        if not lx.fft:
            self.rows.all()
        with self.rows.unfiltered() as todo:
            dev, stream = self._copy_up(lx)  # (the host's buffer is read by the time it returns)
        if not todo.any():
            return dev
        from .fdk_gpu import filter_on_device
        try:
            filter_on_device(lx, dev, self.geometry, self.rows.filter_name, todo, stream)
        except Exception as exc:
            if lx.is_device_error(exc):
                raise  # (the device is lost: set-up fails, and the device is not trusted)
            # an FFT that cannot run here (CuPy without cuFFT's library): the host filters, the rows go up again
            say_once(log, f"FDK filter on gpu:{gpu.index} failed ({reason_of(exc)}): the host filters the projections")
            lx.synchronize()  # (nothing queued writes into the projections any more)
            self.rows.all()
            return self._copy_up(lx)[0]
        for a, b in runs(todo):
            log.debug("projections filtered on gpu:%d: detector rows %d-%d of %d (process %d)", gpu.index, a, b,
                      len(todo), os.getpid())
        return dev

    def _copy_up(self, lx):
        """The projections copied to the device as they are, and the stream the copies are queued on: chunks of
        angles through two page-locked staging buffers, the host filling one while the other's copy runs (waited for
        before it is refilled)."""
        na = self.padded.shape[0]
        plane = self.padded[0].nbytes
        chunk = max(1, min(na, UPLOAD_CHUNK_BYTES // max(plane, 1)))
        dev = lx.empty(self.padded.shape, np.float32)
        stream = lx.stream()
        staging = [lx.pinned((chunk,) + self.padded.shape[1:], np.float32) for _ in range(min(2, -(-na // chunk)))]
        copied = [None] * len(staging)
        for i, a0 in enumerate(range(0, na, chunk)):
            a1, k = min(a0 + chunk, na), i % len(staging)
            lx.wait(copied[k])  # this buffer's last copy has landed
            buf = staging[k][:a1 - a0]
            np.copyto(buf, self.padded[a0:a1])
            lx.to_device_async(buf, dev[a0:a1], stream)
            copied[k] = lx.record(stream)
        return dev, stream

    # -- self-check --------------------------------------------------------------------------------
    def _check_window(self):
        """The self-check's slices ``(z0, z1)`` and window ``(y0, y1, x0, x1)`` (see :data:`CHECK_WINDOW`)."""
        nz, ny, nx = self.geometry.nVoxel
        zb = defines("backproject")["ZB"]
        n = min(2 * zb + 3, nz)
        z0 = max(0, min(nz // 2 - n // 2, nz - n))
        h, w = min(CHECK_WINDOW[0], ny), min(CHECK_WINDOW[1], nx)
        y0, x0 = (ny - h) // 2, (nx - w) // 2
        return (z0, z0 + n), (y0, y0 + h, x0, x0 + w)

    def _check_strip(self):
        """The strip's slices ``(0, slab)`` and window ``(0, STRIP_ROWS, 0, nx)``: the first production slab's
        first rows, every column."""
        _, ny, nx = self.geometry.nVoxel
        return (0, self.slab), (0, min(STRIP_ROWS, ny), 0, nx)

    def _check_case(self):
        """The CPU's side of the self-check: the window's and the strip's voxels backprojected on the CPU, each with
        the L2 norm of the backprojection of the projections' magnitudes there (:func:`check_tolerance`)."""
        from .backproject import backproject
        g = self.geometry
        cases = []
        for (z0, z1), window in (self._check_window(), self._check_strip()):
            r0, r1 = row_band(g, z0, z1)
            if r1 == r0:  # (the slices see no detector row: nothing but the zero border is read)
                r0 = min(r0, g.nDetector[0] - 1)
                r1 = r0 + 1
                band = np.zeros((g.n_angles, 1, g.nDetector[1]), np.float32)
            else:  # (filtered on the host, not taken from what the device filters)
                band = self.padded[:, r0 + 1:r1 + 1, 1:-1] if self.rows is None else self.rows.band(r0, r1)
            cpu = backproject(band, g, z0, z1, row0=r0, window=window)
            magnitude = backproject(np.abs(band), g, z0, z1, row0=r0, window=window)
            cases.append((cpu, max(float(np.linalg.norm(magnitude)), 1e-30)))
        return cases

    def _self_check(self, st, case):
        """The window and the strip on the device against the CPU's (see the module's text): the strip through a lane,
        its angles cut as production cuts a slab's; the window with the other of the kernel's paths (atomic where the
        strip's is plain, plain where the strip's is atomic)."""
        (window_cpu, window_mag), (strip_cpu, strip_mag) = case
        lx = st["lx"]
        (z0, z1), (y0, y1, x0, x1) = self._check_window()
        (s0, s1), (r0, r1, c0, c1) = self._check_strip()
        _, ny, nx = self.geometry.nVoxel
        strip_split = self._splits(st, s1 - s0, ny, nx)
        with lx.active():
            lane = Lane(lx)
            out = lx.empty((s1 - s0, r1 - r0, c1 - c0), np.float32)
            lx.zero_async(out, lane.compute)
            self.launch(st, s0, s1, out, lane.compute, st["ys"][r0:r1], st["xs"][c0:c1], splits=strip_split)
            strip = lx.pinned(out.shape, np.float32)
            lx.wait(lx.to_host_async(out, strip, lane.copy, after=lane.compute))
            other = [2 if s == 1 else 1 for s in strip_split]
            window = self._slab(st, z0, z1, st["ys"][y0:y1], st["xs"][x0:x1], splits=other)
        bound = check_tolerance(self.geometry)
        for what, got, cpu, mag in ((f"slices {z0}-{z1 - 1}", window, window_cpu, window_mag),
                                    (f"the first slab's rows {r0}-{r1 - 1} (slices {s0}-{s1 - 1})", strip, strip_cpu,
                                     strip_mag)):
            err = float(np.linalg.norm(got - cpu)) / mag
            if not err < bound:  # (NaN fails too)
                return f"{what} differ from the CPU backprojector ({err:.2e} of the terms' magnitude, over " \
                       f"{bound:.1e})"
        return True

    def state(self, gpu):
        """``gpu``'s state (launcher, kernel, uploads), set up and self-checked on first use. Raises ``RuntimeError``
        if the device is not trusted (the reason given)."""
        return self._devices.get(gpu)

    # -- slabs ----------------------------------------------------------------------------------------
    def run(self, slabs, gpu):
        """The slabs ``[(z0, z1), ...]`` backprojected on ``gpu``, in order: page-locked arrays lent to the caller
        (:class:`HostSlabs`), each reused once the caller lets go of it (copies, where the caller holds more than the
        buffers kept)."""
        st = self.state(gpu)
        lx = st["lx"]
        plane = (st["ys"].shape[0], st["xs"].shape[0])
        lane = self._take_lane(st)
        out, flight = [], []
        with lx.active(), settled(lx, gpu):
            for i, (z0, z1) in enumerate(slabs):
                try:
                    dev = lane.slot(lx, i % 2, z1 - z0, plane)
                except lx.out_of_memory:
                    out.append(self._slab(st, z0, z1))
                    continue
                host = st["host"].take((z1 - z0,) + plane)
                lx.zero_async(dev, lane.compute)
                self.launch(st, z0, z1, dev, lane.compute)
                flight.append(lx.to_host_async(dev, host, lane.copy, after=lane.compute))
                lane.freed[i % 2] = lx.record(lane.copy)
                out.append(host)
            for token in flight:
                lx.wait(token)
        if st["host"].out > st["host"].keep:  # the caller holds many: these as copies, their buffers back
            out = [np.array(s) for s in out]
        with st["lanes_lock"]:
            st["lanes"].append(lane)
        return out

    @staticmethod
    def _take_lane(st):
        with st["lanes_lock"]:
            if st["lanes"]:
                return st["lanes"].pop()
        with st["lx"].active():
            return Lane(st["lx"])

    def _slab(self, st, z0, z1, ys=None, xs=None, splits=None):
        """Slab [z0, z1) alone on the legacy default stream (rows ``ys``, columns ``xs`` of each slice: device
        arrays, default all), cut in halves where its output does not fit the device."""
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
            return np.concatenate([self._slab(st, z0, mid, ys, xs, splits), self._slab(st, mid, z1, ys, xs, splits)])
        self.launch(st, z0, z1, out, None, ys, xs, splits)
        return lx.to_host(out)  # (a copy on the legacy stream: after its launches)

    def _parts(self, st):
        """The launches' angle ranges ``[(a0, a1), ...]``: at most ``MAX_ANGLES`` each, and few enough that the
        kernel's 32-bit element indices reach them."""
        na, plane = self.padded.shape[0], self.padded.shape[1] * self.padded.shape[2]
        step = max(1, min(st["max_angles"], (2 ** 31 - 1) // plane - 1))
        return [(a0, min(a0 + step, na)) for a0 in range(0, na, step)]

    def _splits(self, st, nz, ny, nx):
        """Each launch's cut of its angles for a slab of ``nz`` x ``ny`` x ``nx`` voxels (:func:`split_for_waves`)."""
        blocks = -(-nx // BLOCK[0]) * -(-ny // BLOCK[1]) * -(-nz // st["zb"])
        return [split_for_waves(blocks, st["wave"], a1 - a0) for a0, a1 in self._parts(st)]

    def launch(self, st, z0, z1, out, stream=None, ys=None, xs=None, splits=None):
        """Queue the kernel launches for slab [z0, z1) into zeroed device array ``out`` on ``stream``."""
        lx, k = st["lx"], _scalars(self.geometry)
        ys = st["ys"] if ys is None else ys
        xs = st["xs"] if xs is None else xs
        nz, ny, nx = out.shape
        grid = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1], (nz + st["zb"] - 1) // st["zb"])
        f32, i32 = np.float32, np.int32
        zs = st["zs"][z0:z1]
        splits = self._splits(st, nz, ny, nx) if splits is None else splits
        for (a0, a1), split in zip(self._parts(st), splits):
            lx.launch_on(stream, st["fn"], grid[:2] + (grid[2] * split,), BLOCK, st["proj"][a0:a1], st["trig"][a0:a1],
                         i32(a1 - a0), i32(k["nv"]), i32(k["nu"]), zs, ys, xs, i32(nz), i32(ny), i32(nx),
                         f32(k["dso"]), f32(k["dsd"]), f32(k["cu"]), f32(k["cv"]), f32(k["inv_du"]),
                         f32(k["inv_dv"]), i32(split), out)


#: The most parts a launch's angles are cut into, and the fewest angles a part keeps.
MAX_SPLIT, MIN_PART_ANGLES = 8, 16


def split_for_waves(blocks, wave, angles):
    """Into how many parts to cut a launch's ``angles`` so that its ``blocks`` (per part) fill whole waves."""
    if not wave:
        return 1

    def fill(s):
        return blocks * s / (-(-blocks * s // wave) * wave)
    best = 1
    for s in range(2, MAX_SPLIT + 1):
        if angles // s >= MIN_PART_ANGLES and fill(s) > fill(best) + 0.02:
            best = s
    return best
