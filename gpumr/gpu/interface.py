"""The one interface every kernel launcher offers (PyCUDA, CuPy, the host emulation)."""

import contextlib

import numpy as np


class Launcher:
    """Kernels, device arrays and launches on one device.

    Attributes
    ----------
    name : str
        ``pycuda``, ``cupy`` or ``emulated``.
    out_of_memory : type
        The exception a device allocation raises when the device is full."""

    name = "launcher"

    def active(self):
        """A context manager that makes this device current for the calls inside it."""
        return contextlib.nullcontext()

    def module(self, name):
        """Kernel ``name``'s compiled module (``cuda/NAME.cu``)."""
        raise NotImplementedError

    def function(self, module, name):
        """The ``extern "C" __global__`` function ``name`` of ``module``."""
        return module.get_function(name)

    def to_device(self, host):
        """A device array holding a copy of the host array ``host``."""
        raise NotImplementedError

    def zeros(self, shape, dtype):
        """A zero-filled device array."""
        raise NotImplementedError

    def to_host(self, dev):
        """A host (numpy) copy of the device array ``dev``."""
        raise NotImplementedError

    def resident_blocks(self, fn, threads):
        """How many blocks of ``threads`` threads of kernel ``fn`` the device runs at once (a wave), or None
        where unknown; drivers size launches in whole waves with it."""
        return None

    def stream(self):
        """A new stream: work queued on it runs in order, beside other streams' work. None where every
        call runs in order anyway (the emulation); the methods below take None as that order."""
        return None

    def empty(self, shape, dtype):
        """An uninitialised device array."""
        return self.zeros(shape, dtype)

    def view(self, dev, offset, count, dtype):
        """A device array of ``count`` elements of ``dtype`` inside device array ``dev``, from byte ``offset`` (a
        multiple of the dtype's size): one allocation cut into a part's arrays, no driver call. Raises ``ValueError``
        if the view reaches past ``dev``'s end."""
        raise NotImplementedError

    def to_device_async(self, host, dev, stream):
        """Queue copying host array ``host`` (:meth:`pinned`, contiguous) into device array ``dev`` (as many
        bytes) on ``stream``; the host may change ``host`` once work queued after it on ``stream`` is done."""
        raise NotImplementedError

    def zero_async(self, dev, stream):
        """Queue zero-filling device array ``dev`` on ``stream``."""
        raise NotImplementedError

    def pinned(self, shape, dtype):
        """A host array in page-locked memory (asynchronous copies need it)."""
        return np.empty(shape, dtype)

    def to_host_async(self, dev, host, stream, after=None):
        """Queue copying device array ``dev`` into host array ``host`` (:meth:`pinned`) on ``stream``, once
        the work queued so far on stream ``after`` is done. Returns what :meth:`wait` takes."""
        raise NotImplementedError

    def wait(self, token):
        """Wait for the copy :meth:`to_host_async` returned ``token`` for, or for an event :meth:`record` made."""

    def record(self, stream=None):
        """An event after the work queued so far on ``stream`` (None: the legacy default stream), for
        :meth:`wait_event` and :meth:`wait`."""
        return None

    def wait_event(self, stream, event):
        """Make the work queued on ``stream`` from now on wait for ``event`` (:meth:`record`; None: nothing)."""

    #: Whether :meth:`filter_rows` runs on this launcher's device (cuFFT through CuPy; numpy's transforms on a
    #: simulated GPU); where it does not (PyCUDA), callers filter on the host.
    fft = False

    def filter_rows(self, dev, response, stream):
        """Queue filtering each row of device array ``dev`` (float32 [rows, n], ``n`` even) in place on ``stream`` by
        the real frequency response ``response`` (host float32 [n // 2 + 1], numpy's ``rfft`` order): ``row =
        irfft(rfft(row) * response)``. Raises ``NotImplementedError`` where :attr:`fft` is False."""
        raise NotImplementedError(f"{self.name}: no FFT on the device")

    def is_device_error(self, exc):
        """Whether exception ``exc`` is a CUDA error of this device (not running out of memory): after one, the
        device is not trusted again in this process (:func:`gpumr.gpu.trust.distrust`)."""
        return False

    def launch(self, fn, grid, block, *args):
        """Launch kernel ``fn`` on ``grid`` blocks of ``block`` threads (PyCUDA's call)."""
        fn(*args, grid=tuple(grid), block=tuple(block))

    def launch_on(self, stream, fn, grid, block, *args):
        """:meth:`launch` queued on ``stream`` (None: as :meth:`launch`)."""
        if stream is None:
            return self.launch(fn, grid, block, *args)
        fn(*args, grid=tuple(grid), block=tuple(block), stream=stream)

    def set_constant(self, module, name, host):
        """Copy the host array ``host`` to the start of ``module``'s ``__constant__`` symbol ``name``. Raises
        ``ValueError`` if it is larger than the symbol."""
        ptr, size = module.get_global(name)
        data = np.ascontiguousarray(host)
        if data.nbytes > size:
            raise ValueError(f"{name}: {data.nbytes} bytes do not fit its {size}")
        self.copy_to_symbol(ptr, data)

    def copy_to_symbol(self, ptr, data):
        """Copy the contiguous host array ``data`` to the device address ``ptr``."""
        raise NotImplementedError

    def synchronize(self):
        """Wait for every launch queued on this device."""
        raise NotImplementedError


def check_view(nbytes, offset, count, dtype):
    """Refuse a view of ``count`` ``dtype`` elements from byte ``offset`` that does not lie in ``nbytes``."""
    size = np.dtype(dtype).itemsize
    if offset < 0 or offset % size or count < 0 or offset + count * size > nbytes:
        raise ValueError(f"a view of {count} {np.dtype(dtype).name} from byte {offset} does not lie within the "
                         f"{nbytes} bytes of its device array (or is not aligned to its elements)")


def check_filter(dev, response):
    """Refuse a :meth:`Launcher.filter_rows` of rows that are not float32 [rows, n] with ``n`` even, or a response that
    is not ``n // 2 + 1`` values; the response as float32."""
    response = np.asarray(response, np.float32)
    if np.dtype(dev.dtype) != np.float32 or len(dev.shape) != 2 or dev.shape[1] % 2 or \
            response.shape != (dev.shape[1] // 2 + 1,):
        raise ValueError(f"filter_rows: rows {np.dtype(dev.dtype).name} {tuple(dev.shape)} and a response of "
                         f"{response.shape} values (float32 [rows, n], n even, and n // 2 + 1 values are needed)")
    return response


def check_copy(host, dev):
    """Refuse a copy between arrays of different sizes, or from a host array that is not contiguous."""
    if not host.flags.c_contiguous or host.nbytes != dev.nbytes:
        raise ValueError(f"copy of {host.nbytes} host bytes into a device array of {dev.nbytes}"
                         f"{'' if host.flags.c_contiguous else ' (the host array is not contiguous)'}")
