"""Launching gpumr's CUDA kernels: PyCUDA, or CuPy where PyCUDA is missing; the host for simulated GPUs.

PyCUDA is the launcher the product names (``pip install 'gpumr[gpu]'``; it
builds against a CUDA toolkit). CuPy installs from wheels and serves behind
the same small interface (:class:`gpumr.gpu.interface.Launcher`) when PyCUDA
is not importable. A simulated GPU's launcher runs the same kernels on the
host (:mod:`gpumr.gpu.emulate`). Nothing here is imported on the CPU path.
"""

import contextlib

import numpy as np

from . import kernels
from .interface import Launcher


class PyCUDALauncher(Launcher):
    """Kernels, device arrays and launches through PyCUDA, in this process's context."""

    name = "pycuda"

    def __init__(self, ordinal):
        from . import context
        self.cuda = context.driver()
        self.ordinal = ordinal
        self._ctx = context
        with self.active():
            major, minor = self.cuda.Device(ordinal).compute_capability()
        self.arch = f"{major}{minor}"

    @contextlib.contextmanager
    def active(self):
        with self._ctx.context(self.ordinal):
            yield

    def module(self, name):
        return self.cuda.module_from_file(kernels.fatbin(name, self.arch))

    def to_device(self, host):
        import pycuda.gpuarray as ga
        return ga.to_gpu(np.ascontiguousarray(host))

    def zeros(self, shape, dtype):
        import pycuda.gpuarray as ga
        return ga.zeros(shape, dtype)

    def to_host(self, dev):
        return dev.get()

    def copy_to_symbol(self, ptr, data):
        self.cuda.memcpy_htod(ptr, data)

    def synchronize(self):
        self.cuda.Context.synchronize()

    @property
    def out_of_memory(self):
        return self.cuda.MemoryError


class CuPyLauncher(Launcher):
    """The same interface through CuPy."""

    name = "cupy"

    def __init__(self, ordinal):
        import cupy
        self.cp = cupy
        self.ordinal = ordinal
        with self.active():
            self.arch = cupy.cuda.Device(ordinal).compute_capability

    @contextlib.contextmanager
    def active(self):
        with self.cp.cuda.Device(self.ordinal):
            yield

    def module(self, name):
        return self.cp.RawModule(path=kernels.fatbin(name, self.arch))

    def to_device(self, host):
        return self.cp.asarray(np.ascontiguousarray(host))

    def zeros(self, shape, dtype):
        return self.cp.zeros(shape, dtype)

    def to_host(self, dev):
        return self.cp.asnumpy(dev)

    def launch(self, fn, grid, block, *args):
        fn(grid, block, args)

    def set_constant(self, module, name, host):
        data = np.ascontiguousarray(host)
        ptr = module.get_global(name)
        self.cp.ndarray(data.shape, data.dtype, ptr).set(data)

    def synchronize(self):
        self.cp.cuda.Device(self.ordinal).synchronize()

    @property
    def out_of_memory(self):
        return self.cp.cuda.memory.OutOfMemoryError


_launchers = {}


def launcher(gpu, prefer=None):
    """The launcher for ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), one per device and process.

    A simulated GPU's is :class:`gpumr.gpu.emulate.EmulatedLauncher` (its
    memory the simulated size); a real GPU's PyCUDA if importable, else CuPy
    (``prefer="cupy"`` tries CuPy first).

    Raises
    ------
    RuntimeError
        If neither PyCUDA nor CuPy is usable for a real GPU (with both reasons).
    """
    key = ("emulated", gpu.index, gpu.memory_total) if gpu.simulated else (gpu.ordinal, prefer)
    if key in _launchers:
        return _launchers[key]
    if gpu.simulated:
        from .emulate import EmulatedLauncher
        _launchers[key] = EmulatedLauncher(gpu.ordinal, gpu.memory_total)
        return _launchers[key]
    errors = []
    for cls in ((PyCUDALauncher, CuPyLauncher) if prefer != "cupy" else (CuPyLauncher, PyCUDALauncher)):
        try:
            _launchers[key] = cls(gpu.ordinal)
            return _launchers[key]
        except Exception as exc:  # ImportError, driver errors
            errors.append(f"{cls.name}: {exc}")
    raise RuntimeError("no CUDA launcher: " + "; ".join(errors))


def available(simulated=False):
    """``(True, name)`` if kernels can be launched here (without touching a GPU), else ``(False, why)``.

    For real GPUs: PyCUDA or CuPy importable. For simulated GPUs: a C++
    compiler to build the kernels for the host.
    """
    if simulated:
        from .emulate import available as host
        return host()
    import importlib.util
    for mod in ("pycuda", "cupy"):
        if importlib.util.find_spec(mod) is not None:
            return True, mod
    return False, "neither PyCUDA nor CuPy is installed (pip install 'gpumr[gpu]')"
