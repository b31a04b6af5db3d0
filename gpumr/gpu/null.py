"""A launcher whose kernels and copies cost nothing: the host's own cost of driving a device, as a figure."""

import collections
import math

import numpy as np

from .interface import Launcher, check_copy, check_filter, check_view

#: The device a null launcher stands for, as drivers size their launches: an H100's SMs, 6 blocks of 256
#: threads resident on each (the backprojection kernel's launch bounds).
SMS, THREADS_PER_SM = 132, 1536


class NullArray:
    """A device array of a null launcher: a shape and a type, sliced along its first axis; no memory."""

    def __init__(self, shape, dtype):
        self.shape = (int(shape),) if np.isscalar(shape) else tuple(map(int, shape))
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize

    def __getitem__(self, key):
        start, stop, _ = key.indices(self.shape[0])
        return NullArray((max(start, stop) - start,) + self.shape[1:], self.dtype)


class NullKernel:
    """A kernel of a null launcher: a name; a launch of it does nothing."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return None


class NullModule:
    """A kernel source's module on a null launcher: any function, any ``__constant__`` symbol (64 KiB)."""

    def __init__(self, name):
        self.name = name

    def get_function(self, name):
        return NullKernel(name)

    def get_global(self, name):
        return 0, 64 * 1024


class NullLauncher(Launcher):
    """Takes and counts every call; runs and copies nothing.

    Attributes
    ----------
    calls : collections.Counter
        The calls made, by the interface's method name.

    Examples
    --------
    >>> lx = NullLauncher()
    >>> dev = lx.to_device(np.ones((4, 3), np.float32))
    >>> lx.launch_on(lx.stream(), lx.function(lx.module("k"), "k"), (1,), (32,), dev[1:3])
    >>> dev[1:3].shape, sorted(lx.calls.items())
    ((2, 3), [('launch', 1), ('module', 1), ('stream', 1), ('to_device', 1)])
    """

    name = "null"
    out_of_memory = MemoryError

    def __init__(self, ordinal=0):
        self.ordinal = ordinal
        self.calls = collections.Counter()

    def module(self, name):
        self.calls["module"] += 1
        return NullModule(name)

    def to_device(self, host):
        self.calls["to_device"] += 1
        return NullArray(np.shape(host), np.asarray(host).dtype)

    def zeros(self, shape, dtype):
        self.calls["zeros"] += 1
        return NullArray(shape, dtype)

    def empty(self, shape, dtype):
        self.calls["empty"] += 1
        return NullArray(shape, dtype)

    def to_host(self, dev):
        self.calls["to_host"] += 1
        return np.zeros(dev.shape, dev.dtype)

    def resident_blocks(self, fn, threads):
        return SMS * max(1, THREADS_PER_SM // max(int(threads), 1))

    def stream(self):
        self.calls["stream"] += 1
        return object()

    def view(self, dev, offset, count, dtype):
        check_view(dev.nbytes, offset, count, dtype)
        return NullArray((count,), dtype)

    def to_device_async(self, host, dev, stream):
        self.calls["to_device_async"] += 1
        check_copy(host, dev)

    def zero_async(self, dev, stream):
        self.calls["zero_async"] += 1

    def pinned(self, shape, dtype):
        self.calls["pinned"] += 1
        return np.zeros(shape, dtype)

    def to_host_async(self, dev, host, stream, after=None):
        self.calls["to_host_async"] += 1
        return None

    def wait(self, token):
        self.calls["wait"] += 1

    def record(self, stream=None):
        self.calls["record"] += 1
        return None

    def wait_event(self, stream, event):
        self.calls["wait_event"] += 1

    fft = True

    def filter_rows(self, dev, response, stream):
        self.calls["filter_rows"] += 1
        check_filter(dev, response)

    def launch(self, fn, grid, block, *args):
        self.calls["launch"] += 1

    def launch_on(self, stream, fn, grid, block, *args):
        self.calls["launch"] += 1

    def set_constant(self, module, name, host):
        self.calls["set_constant"] += 1

    def synchronize(self):
        self.calls["synchronize"] += 1
