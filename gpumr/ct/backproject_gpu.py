"""The slab backprojector on a GPU (``cuda/backproject.cu``), same function as the CPU one.

Projections are uploaded once per task and device and kept there across the
task's slabs. Slabs are pipelined (:meth:`SlabBackprojector.run`): a slab's
copy back into page-locked memory overlaps the next slab's kernels; each
launch's angles are cut into the parts that fill the device's waves of
blocks (:func:`split_for_waves`; ``bench/gpu_model.py`` predicts the
gain). A slab whose output does not fit the free device memory is cut into
smaller slabs (halving) rather than failing. Before a device is trusted,
2 ZB + 3 slices around the volume's centre (every one of the ZB slices a
kernel thread keeps) are compared with the CPU backprojector
(:mod:`gpumr.gpu.trust`); a mismatch disables the GPU path (slabs then fall
back to the CPU, counted).
"""

import numpy as np

from ..gpu.kernels import defines
from ..gpu.trust import DeviceStates
from .backproject import _axes, _scalars

BLOCK = (32, 8, 1)


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
        self._devices = DeviceStates("GPU backprojection", self._setup, self._self_check)

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
                        zb=constants["ZB"], max_angles=constants["MAX_ANGLES"])

    def _self_check(self, st):
        """Slices around the centre against the CPU: two whole ZB-slice blocks and 3 more.

        Each thread of the kernel keeps ZB slices; the check covers every one
        of a thread's slices, and a block that the volume's end cuts short.
        """
        from .backproject import backproject
        nz = self.geometry.nVoxel[0]
        n = min(2 * st["zb"] + 3, nz)
        z0 = max(0, min(nz // 2 - n // 2, nz - n))
        with st["lx"].active():
            gpu_slab = self._slab(st, z0, z0 + n)
        cpu_slab = backproject(None, self.geometry, z0, z0 + n, padded=self.padded)
        err = float(np.linalg.norm(gpu_slab - cpu_slab) / max(np.linalg.norm(cpu_slab), 1e-30))
        return True if err < 1e-5 else \
            f"slices {z0}-{z0 + n - 1} differ from the CPU backprojector (relative L2 {err:.2e})"

    def state(self, gpu):
        """``gpu``'s state (launcher, kernel, uploads), set up and self-checked on first use.

        Raises
        ------
        RuntimeError
            If the device is not trusted (the reason given).
        """
        return self._devices.get(gpu)

    def run(self, slabs, gpu):
        """The slabs ``[(z0, z1), ...]`` backprojected on ``gpu``, in order.

        Pipelined: each slab's launches go on one stream, its copy back into
        page-locked host memory on another, after them; the next slab's
        launches are queued before the host waits for that copy, so copies
        (and the host's receiving of each slab) overlap the kernels. At most
        two slabs are in flight; a slab that does not fit beside them runs
        alone, cut in halves if need be (:meth:`_slab`).
        """
        st = self.state(gpu)
        lx = st["lx"]
        with lx.active():
            compute, copy = lx.stream(), lx.stream()
            done, flight = [], []
            for z0, z1 in slabs:
                shape = (z1 - z0, self.geometry.nVoxel[1], self.geometry.nVoxel[2])
                try:
                    dev = lx.empty(shape, np.float32)
                except lx.out_of_memory:
                    done.extend(self._land(lx, flight, len(flight)))
                    lx.synchronize()
                    done.append(self._slab(st, z0, z1))
                    continue
                lx.zero_async(dev, compute)
                self.launch(st, z0, z1, dev, compute)
                host = lx.pinned(shape, np.float32)
                flight.append((dev, host, lx.to_host_async(dev, host, copy, after=compute)))
                done.extend(self._land(lx, flight, len(flight) - 1))
            done.extend(self._land(lx, flight, len(flight)))
            return done

    @staticmethod
    def _land(lx, flight, n):
        """The first ``n`` slabs in flight, received (their copies waited for), taken off ``flight``."""
        out = []
        for _ in range(n):
            dev, host, token = flight.pop(0)
            lx.wait(token)
            out.append(np.array(host))
            del dev
        return out

    def _slab(self, st, z0, z1):
        lx = st["lx"]
        nz, ny, nx = z1 - z0, self.geometry.nVoxel[1], self.geometry.nVoxel[2]
        try:
            out = lx.zeros((nz, ny, nx), np.float32)
        except lx.out_of_memory:
            if nz == 1:
                raise
            mid = (z0 + z1) // 2
            return np.concatenate([self._slab(st, z0, mid), self._slab(st, mid, z1)])
        self.launch(st, z0, z1, out)
        lx.synchronize()
        return lx.to_host(out)

    def launch(self, st, z0, z1, out, stream=None):
        """Queue the kernel launches for slab [z0, z1) into zeroed device array ``out`` on ``stream``.

        Angles go in launches of at most ``MAX_ANGLES`` (constant memory), and
        each launch's angles in the parts that fill its waves best
        (:func:`split_for_waves`).
        """
        lx, k = st["lx"], _scalars(self.geometry)
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
                         i32(k["nv"]), i32(k["nu"]), zs, st["ys"], st["xs"], i32(nz), i32(ny), i32(nx),
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
