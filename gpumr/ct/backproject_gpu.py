"""The slab backprojector on a GPU (``cuda/backproject.cu``), same function as the CPU one.

Projections are uploaded once per task and device and kept there across the
task's slabs. A slab whose output does not fit the free device memory is cut
into smaller slabs (halving) rather than failing. Before a device is trusted,
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
        st = self.state(gpu)
        with st["lx"].active():
            return [self._slab(st, z0, z1) for z0, z1 in slabs]

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

    def launch(self, st, z0, z1, out):
        """Queue the kernel launches for slab [z0, z1) into device array ``out`` (no synchronisation)."""
        lx, k = st["lx"], _scalars(self.geometry)
        nz, ny, nx = out.shape
        na, step = self.padded.shape[0], st["max_angles"]
        grid = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1], (nz + st["zb"] - 1) // st["zb"])
        f32, i32 = np.float32, np.int32
        zs = st["zs"][z0:z1]
        for a0 in range(0, na, step):
            a1 = min(a0 + step, na)
            lx.set_constant(st["mod"], "c_trig", st["trig"][a0:a1])
            lx.launch(st["fn"], grid, BLOCK, st["proj"][a0:a1], i32(a1 - a0), i32(k["nv"]), i32(k["nu"]), zs, st["ys"],
                      st["xs"], i32(nz), i32(ny), i32(nx), f32(k["dso"]), f32(k["dsd"]), f32(k["cu"]),
                      f32(k["cv"]), f32(k["inv_du"]), f32(k["inv_dv"]), out)
