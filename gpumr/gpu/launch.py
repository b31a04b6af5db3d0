"""Launching gpumr's CUDA kernels: PyCUDA, or CuPy where PyCUDA is missing.

PyCUDA is the launcher the product names (``pip install 'gpumr[gpu]'``; it
builds against a CUDA toolkit). CuPy installs from wheels and serves behind
the same small interface when PyCUDA is not importable. Nothing here is
imported on the CPU path.
"""

import contextlib

import numpy as np

from . import kernels


class PyCUDALauncher:
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

    def function(self, module, name):
        return module.get_function(name)

    def to_device(self, host):
        import pycuda.gpuarray as ga
        return ga.to_gpu(np.ascontiguousarray(host))

    def zeros(self, shape, dtype):
        import pycuda.gpuarray as ga
        return ga.zeros(shape, dtype)

    def to_host(self, dev):
        return dev.get()

    def launch(self, fn, grid, block, *args):
        fn(*[a.gpudata if hasattr(a, "gpudata") else a for a in args], grid=grid, block=block)

    def set_constant(self, module, name, host):
        ptr, size = module.get_global(name)
        data = np.ascontiguousarray(host)
        if data.nbytes > size:
            raise ValueError(f"{name}: {data.nbytes} bytes do not fit its {size}")
        self.cuda.memcpy_htod(ptr, data)

    def synchronize(self):
        self.cuda.Context.synchronize()

    @property
    def out_of_memory(self):
        return self.cuda.MemoryError


class CuPyLauncher:
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

    def function(self, module, name):
        return module.get_function(name)

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


def launcher(ordinal, prefer=None):
    """The launcher for device ``ordinal``: PyCUDA if importable, else CuPy.

    Raises
    ------
    RuntimeError
        If neither is usable (with both reasons).
    """
    key = (ordinal, prefer)
    if key in _launchers:
        return _launchers[key]
    errors = []
    for cls in ((PyCUDALauncher, CuPyLauncher) if prefer != "cupy" else (CuPyLauncher, PyCUDALauncher)):
        try:
            _launchers[key] = cls(ordinal)
            return _launchers[key]
        except Exception as exc:  # ImportError, driver errors
            errors.append(f"{cls.name}: {exc}")
    raise RuntimeError("no CUDA launcher: " + "; ".join(errors))


def available():
    """``(True, name)`` if a launcher can be imported here (without touching a GPU), else ``(False, why)``."""
    import importlib.util
    for mod in ("pycuda", "cupy"):
        if importlib.util.find_spec(mod) is not None:
            return True, mod
    return False, "neither PyCUDA nor CuPy is installed (pip install 'gpumr[gpu]')"
