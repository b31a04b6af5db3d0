"""A GPU implementation's per-device state, trusted only once its self-check has passed; devices lost to CUDA errors."""

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ..log import logger

log = logger(__name__)
_untrusted = {}  # device_key(gpu) -> why
_untrusted_lock = threading.Lock()


def device_key(gpu):
    """What tells one device from another in this process: a simulated GPU is also told by its memory size (a
    launcher of its own, :func:`gpumr.gpu.launch.launcher`)."""
    return (True, gpu.index, gpu.memory_total) if gpu.simulated else (False, gpu.index)


def distrust(gpu, why):
    """Mark ``gpu`` untrusted for the rest of this process (the first reason is kept)."""
    with _untrusted_lock:
        _untrusted.setdefault(device_key(gpu), why)


def untrusted(gpu):
    """Why ``gpu`` is untrusted in this process (:func:`distrust`), or None.

    Examples
    --------
    >>> from gpumr.devices.nvml import simulated_gpus
    >>> untrusted(simulated_gpus("1:3MiB")[0]) is None
    True
    """
    return _untrusted.get(device_key(gpu))


def any_untrusted():
    """Whether any device is untrusted in this process."""
    return bool(_untrusted)


def settle(lx, gpu, exc):
    """After a call on ``gpu`` raised ``exc``: wait until nothing queued on it can still run, and distrust it where
    ``exc`` or that wait is a CUDA error (``gpu`` None: a device not yet trusted anyway). Returns whether it is still
    trusted."""
    why = f"a CUDA error: {type(exc).__name__}: {exc}" if lx.is_device_error(exc) else None
    try:
        lx.synchronize()
    except Exception as late:  # noqa: BLE001 (whatever it is, the device's state is unknown)
        why = why or f"waiting for its queued work failed: {type(late).__name__}: {late}"
    if why and gpu is not None:
        distrust(gpu, why)
    return why is None


@contextlib.contextmanager
def settled(lx, gpu):
    """Within it, a failure (any exception, an interrupt too) is settled (:func:`settle`) before it propagates.

    Examples
    --------
    >>> from gpumr.gpu.interface import Launcher
    >>> class Idle(Launcher):
    ...     def synchronize(self):
    ...         print("settled")
    >>> try:
    ...     with settled(Idle(), None):
    ...         raise ValueError("a bad slab")
    ... except ValueError:
    ...     pass
    settled
    """
    try:
        yield
    except BaseException as exc:
        settle(lx, gpu, exc)
        raise


class DeviceStates:
    """Per-device state of one GPU implementation.

    Parameters
    ----------
    what : str
        The implementation, for messages ("GPU face detection").
    setup : callable
        ``setup(gpu) -> dict``: the device's state (launcher, kernels, uploads).
    check : callable
        ``check(state) -> True`` when the device computes what the CPU does, else a sentence saying how it differs;
        ``check(state, expected)`` where ``expected`` is given.
    expected : callable, optional
        ``expected() -> value``: the CPU's side of the check, started now in a thread of its own (outside any GPU
        lease) and computed once."""

    def __init__(self, what, setup, check, expected=None):
        self.what = what
        self._setup = setup
        self._check = check
        self._expected = None
        if expected is not None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpumr-self-check")
            self._expected = pool.submit(expected)
            pool.shutdown(wait=False)
        self._states = {}
        self._verdicts = {}
        self._lock = threading.Lock()
        self._device_locks = {}

    def get(self, gpu):
        """The state of ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), set up and checked on first use, once however
        many threads ask at once. Raises ``RuntimeError`` if the device is not trusted, with the reason."""
        key = device_key(gpu)
        if key not in self._verdicts:
            with self._lock:
                device_lock = self._device_locks.setdefault(key, threading.Lock())
            with device_lock:
                if key not in self._verdicts:
                    self._states[key], self._verdicts[key] = self._make(gpu)
        why = untrusted(gpu)
        if why:
            raise RuntimeError(f"{self.what} disabled on gpu:{gpu.index}: {why}")
        if self._verdicts[key] is not True:
            raise RuntimeError(f"{self.what} disabled on gpu:{gpu.index}: {self._verdicts[key]}")
        return self._states[key]

    def _make(self, gpu):
        """``(state, verdict)`` of a device set up and self-checked now."""
        try:
            state = self._setup(gpu)
        except Exception as exc:  # noqa: BLE001 (any failure: the device is not trusted, and the verdict says why)
            return None, f"setting it up failed: {type(exc).__name__}: {exc}"
        try:
            with settled(state["lx"], gpu):
                verdict = self._check(state) if self._expected is None else \
                    self._check(state, self._expected.result())
        except Exception as exc:  # noqa: BLE001 (any failure: the device is not trusted, and the verdict says why)
            verdict = f"its self-check raised {type(exc).__name__}: {exc}"
        log.debug("%s set up on gpu:%d (process %d): %s", self.what, gpu.index, os.getpid(),
                  "self-check passed" if verdict is True else verdict)
        return state, verdict

    def trust(self, gpu, state):
        """Take ``state`` as ``gpu``'s, trusted with no self-check: for a launcher that computes nothing (the null
        launcher's figures of the host's own driving cost, ``bench/host_driving.py``)."""
        key = device_key(gpu)
        self._states[key], self._verdicts[key] = state, True
