"""The scale-space cube of ``blob_log`` on a GPU (``cuda/blobs.cu``), bit for bit the CPU's."""

import numpy as np

from ..gpu.trust import DeviceStates, settled
from .scalespace import log_cube, scale_factor, weights

#: Threads per block of the passes (x, y) and of the cube's writes.
BLOCK = (32, 8, 1)
SCALE_BLOCK = 256
#: The largest difference from scipy's cube the self-check allows (the kernels round as scipy does: 0 is expected).
TOLERANCE = 1e-12
#: Device arrays beside the cube, one image's worth each: the image and three passes' outputs.
PLANES = 4


def device_bytes(shape, scales):
    """Device memory one image of ``shape`` needs for ``scales`` scales: its cube and :data:`PLANES` planes."""
    pixels = int(shape[0]) * int(shape[1])
    return pixels * 8 * (scales + PLANES)


def check_image():
    """The self-check's image: 23 x 17 pixels, smooth blobs over noise (fixed seed), values in [0, 1]."""
    rng = np.random.default_rng(2024)
    y, x = np.mgrid[0:23, 0:17]
    spots = sum(np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * s * s)) for cy, cx, s in ((6, 5, 2), (16, 11, 3.5)))
    return np.clip(0.8 * spots + 0.2 * rng.random((23, 17)), 0, 1)


class LoGCube:
    """``run(image, gpu)`` -> the cube ``[rows, cols, scales]`` of a float64 image, for the scales given.

    Parameters
    ----------
    scales : ndarray [num_sigma, 2]
        :func:`gpumr.blobs.scalespace.sigmas`.
    prefer : str, optional
        ``"cupy"`` to try CuPy before PyCUDA."""

    def __init__(self, scales, prefer=None):
        self.scales = scales
        self.prefer = prefer
        # Per scale: the smoothing and second-derivative kernels, one after the other in one array.
        parts, self.offsets = [], []
        at = 0
        for s in scales:
            w0, w2 = weights(s[0], 0), weights(s[0], 2)
            self.offsets.append((at, at + len(w0), len(w0) - 1, scale_factor(s)))
            parts += [w0, w2]
            at += len(w0) + len(w2)
        self.table = np.concatenate(parts)
        self._devices = DeviceStates("GPU blob detection", self._setup, self._self_check)

    def _setup(self, gpu):
        from ..gpu.launch import launcher
        lx = launcher(gpu, self.prefer)
        with lx.active(), settled(lx, gpu):
            mod = lx.module("blobs")
            return dict(lx=lx, correlate=lx.function(mod, "correlate_axis"), write=lx.function(mod, "log_scale"),
                        table=lx.to_device(self.table))

    def _self_check(self, st):
        image = check_image()
        got = self._cube(st, image)
        want = log_cube(image, self.scales)
        err = float(np.max(np.abs(got - want)))
        return True if err <= TOLERANCE else f"its scale-space cube differs from scipy's by up to {err:.3g}"

    def run(self, image, gpu):
        """The cube of ``image`` (float64 ``[rows, cols]``) on ``gpu``. Raises ``RuntimeError`` if the device is not
        trusted (the reason given)."""
        return self._cube(self._devices.get(gpu), image, gpu)

    def _cube(self, st, image, gpu=None):
        lx = st["lx"]
        h, w = image.shape
        i32 = np.int32
        grid = ((w + BLOCK[0] - 1) // BLOCK[0], (h + BLOCK[1] - 1) // BLOCK[1])
        pixels, n = h * w, len(self.scales)
        with lx.active(), settled(lx, gpu):
            img = lx.to_device(np.ascontiguousarray(image, np.float64))
            t, a, b = (lx.empty((h, w), np.float64) for _ in range(3))
            cube = lx.empty((h, w, n), np.float64)
            table = st["table"]
            for k, (smooth, second, r, s2) in enumerate(self.offsets):
                w0, w2 = table[smooth:smooth + r + 1], table[second:second + r + 1]
                for src, dst, axis, weights_ in ((img, t, 0, w2), (t, a, 1, w0), (img, t, 0, w0), (t, b, 1, w2)):
                    lx.launch(st["correlate"], grid, BLOCK, src, dst, i32(h), i32(w), i32(axis), weights_, i32(r))
                lx.launch(st["write"], ((pixels + SCALE_BLOCK - 1) // SCALE_BLOCK,), (SCALE_BLOCK, 1, 1), a, b, cube,
                          i32(pixels), i32(n), i32(k), np.float64(s2))
            return lx.to_host(cube)  # (a copy on the legacy stream, after its launches)
