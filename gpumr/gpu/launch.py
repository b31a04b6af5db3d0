"""Launching gpumr's CUDA kernels: PyCUDA, or CuPy where PyCUDA is missing; the host for simulated GPUs."""

import contextlib

import numpy as np

from . import kernels
from .interface import Launcher, check_copy, check_filter, check_view


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
        return self.cuda.module_from_buffer(kernels.image(name, self.arch))

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

    def resident_blocks(self, fn, threads):
        return _resident(self.cuda.Device(self.ordinal).get_attributes(), fn.num_regs, fn.shared_size_bytes, threads,
                         lambda a: getattr(self.cuda.device_attribute, a))

    def stream(self):
        return self.cuda.Stream(flags=1)  # CU_STREAM_NON_BLOCKING: not ordered after the legacy default stream

    def empty(self, shape, dtype):
        import pycuda.gpuarray as ga
        return ga.empty(shape, dtype)

    def zero_async(self, dev, stream):
        self.cuda.memset_d8_async(dev.gpudata, 0, dev.nbytes, stream)

    def view(self, dev, offset, count, dtype):
        import pycuda.gpuarray as ga
        check_view(dev.nbytes, offset, count, dtype)
        return ga.GPUArray((count,), dtype, gpudata=int(dev.gpudata) + offset, base=dev)

    def to_device_async(self, host, dev, stream):
        check_copy(host, dev)
        self.cuda.memcpy_htod_async(dev.gpudata, host, stream)

    def pinned(self, shape, dtype):
        return self.cuda.pagelocked_empty(shape, dtype)

    def to_host_async(self, dev, host, stream, after=None):
        if after is not None:
            ready = self.cuda.Event()
            ready.record(after)
            stream.wait_for_event(ready)
        self.cuda.memcpy_dtoh_async(host, dev.gpudata, stream)
        done = self.cuda.Event()
        done.record(stream)
        return done

    def wait(self, token):
        if token is not None:
            token.synchronize()

    def record(self, stream=None):
        event = self.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream, event):
        if event is not None:
            stream.wait_for_event(event)

    def is_device_error(self, exc):
        return isinstance(exc, self.cuda.Error) and not isinstance(exc, self.cuda.MemoryError)

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
        module = self.cp.cuda.function.Module()
        module.load(kernels.image(name, self.arch))
        return module

    def to_device(self, host):
        return self.cp.asarray(np.ascontiguousarray(host))

    def zeros(self, shape, dtype):
        return self.cp.zeros(shape, dtype)

    def to_host(self, dev):
        return self.cp.asnumpy(dev)

    def launch(self, fn, grid, block, *args):
        fn(grid, block, args)

    def launch_on(self, stream, fn, grid, block, *args):
        if stream is None:
            return self.launch(fn, grid, block, *args)
        with stream:
            fn(grid, block, args)

    def resident_blocks(self, fn, threads):
        attrs = self.cp.cuda.Device(self.ordinal).attributes
        get = self.cp.cuda.driver.funcGetAttribute
        return _resident(attrs, get(_CU_FUNC_NUM_REGS, fn.ptr), get(_CU_FUNC_SHARED_SIZE_BYTES, fn.ptr), threads,
                         lambda a: _CUPY_ATTRS[a])

    def stream(self):
        return self.cp.cuda.Stream(non_blocking=True)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def zero_async(self, dev, stream):
        self.cp.cuda.runtime.memsetAsync(dev.data.ptr, 0, dev.nbytes, stream.ptr)

    def view(self, dev, offset, count, dtype):
        check_view(dev.nbytes, offset, count, dtype)
        return self.cp.ndarray((count,), dtype, memptr=dev.data + offset)

    def to_device_async(self, host, dev, stream):
        check_copy(host, dev)
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, rt.memcpyHostToDevice, stream.ptr)

    def pinned(self, shape, dtype):
        import cupyx
        return cupyx.empty_pinned(shape, dtype)

    def to_host_async(self, dev, host, stream, after=None):
        if after is not None:
            stream.wait_event(after.record())
        dev.get(stream=stream, out=host, blocking=False)
        return stream.record()

    def wait(self, token):
        if token is not None:
            token.synchronize()

    def record(self, stream=None):
        event = self.cp.cuda.Event()
        event.record(stream if stream is not None else self.cp.cuda.Stream.null)
        return event

    def wait_event(self, stream, event):
        if event is not None:
            stream.wait_event(event)

    def is_device_error(self, exc):
        cuda = self.cp.cuda
        return isinstance(exc, (cuda.runtime.CUDARuntimeError, cuda.driver.CUDADriverError)) and \
            not isinstance(exc, cuda.memory.OutOfMemoryError)

    fft = True

    def filter_rows(self, dev, response, stream):
        response = check_filter(dev, response)
        fft = self.cp.fft
        with stream if stream is not None else self.cp.cuda.Stream.null:  # (transforms, plans, temporaries on it)
            spectrum = fft.rfft(dev, axis=1)
            spectrum *= self.cp.asarray(response)
            dev[...] = fft.irfft(spectrum, n=dev.shape[1], axis=1)

    def set_constant(self, module, name, host):
        data = np.ascontiguousarray(host)
        ptr = module.get_global_var(name)  # the __constant__ symbol's device address (an int)
        rt = self.cp.cuda.runtime
        rt.memcpy(ptr, data.ctypes.data, data.nbytes, rt.memcpyHostToDevice)

    def synchronize(self):
        self.cp.cuda.Device(self.ordinal).synchronize()

    @property
    def out_of_memory(self):
        return self.cp.cuda.memory.OutOfMemoryError


#: ``CUfunction_attribute`` values (cuda.h): a kernel's static shared memory and its registers per thread.
_CU_FUNC_SHARED_SIZE_BYTES, _CU_FUNC_NUM_REGS = 1, 4

#: CUDA device attributes by the names PyCUDA gives them -> CuPy's names.
_CUPY_ATTRS = {"MULTIPROCESSOR_COUNT": "MultiProcessorCount",
               "MAX_REGISTERS_PER_MULTIPROCESSOR": "MaxRegistersPerMultiprocessor",
               "MAX_THREADS_PER_MULTIPROCESSOR": "MaxThreadsPerMultiProcessor",
               "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": "MaxSharedMemoryPerMultiprocessor"}


def _resident(attrs, regs, smem, threads, key):
    """Blocks of ``threads`` threads using ``regs`` registers and ``smem`` bytes the whole device runs at once."""
    warps = -(-threads // 32)
    per_warp = -(-max(int(regs), 1) * 32 // 256) * 256
    by_regs = attrs[key("MAX_REGISTERS_PER_MULTIPROCESSOR")] // per_warp // warps
    by_threads = attrs[key("MAX_THREADS_PER_MULTIPROCESSOR")] // (warps * 32)
    by_smem = attrs[key("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR")] // smem if smem else by_threads
    return max(1, min(by_regs, by_threads, by_smem, 32)) * attrs[key("MULTIPROCESSOR_COUNT")]


_launchers = {}


def launcher(gpu, prefer=None):
    """The launcher for ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), one per device and process. Raises
    ``RuntimeError`` if neither PyCUDA nor CuPy is usable for a real GPU (with both reasons)."""
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
        except Exception as exc:  # noqa: BLE001 (ImportError, driver errors: each named in the error raised below)
            errors.append(f"{cls.name}: {exc}")
    raise RuntimeError("no CUDA launcher: " + "; ".join(errors))


def use(gpu, lx):
    """Make ``lx`` the launcher of ``gpu`` in this process (a simulated GPU driven by the null launcher,
    :mod:`gpumr.gpu.null`, for the host's own driving cost)."""
    _launchers[("emulated", gpu.index, gpu.memory_total) if gpu.simulated else (gpu.ordinal, None)] = lx


def available(simulated=False):
    """``(True, name)`` if kernels can be launched here (without touching a GPU), else ``(False, why)``."""
    if simulated:
        from .emulate import available as host
        return host()
    import importlib.util
    for mod in ("pycuda", "cupy"):
        if importlib.util.find_spec(mod) is not None:
            return True, mod
    return False, ("neither CuPy nor PyCUDA is installed: pip install 'gpumr[cupy]' (or 'gpumr[gpu]': PyCUDA, built "
                   "against a CUDA toolkit)")
