"""A GPU implementation's per-device state, trusted only once its self-check has passed.

Both GPU implementations (faces, CT) set a device up once per task (launcher,
kernels, uploads) and then compare a built-in case with their CPU reference
before any record runs there. A device whose set-up or self-check fails, or
whose self-check raises, stays untrusted for the task, with the reason: every
batch given to it then fails with that reason, and the core re-runs its
records on the CPU (counted as GPU fallbacks).

The CPU's side of a self-check (its expected answer) is started when the
implementation is made, in a thread of its own, before any GPU is leased:
a lease then waits only for the device's side.
"""

from concurrent.futures import ThreadPoolExecutor


class DeviceStates:
    """Per-device state of one GPU implementation.

    Parameters
    ----------
    what : str
        The implementation, for messages ("GPU face detection").
    setup : callable
        ``setup(gpu) -> dict``: the device's state (launcher, kernels, uploads).
    check : callable
        ``check(state) -> True`` when the device computes what the CPU does,
        else a sentence saying how it differs; ``check(state, expected)``
        where ``expected`` is given.
    expected : callable, optional
        ``expected() -> value``: the CPU's side of the check, started now in
        a thread of its own (outside any GPU lease) and computed once.
    """

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

    def get(self, gpu):
        """The state of ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), set up and checked on first use.

        Raises
        ------
        RuntimeError
            If the device is not trusted, with the reason.
        """
        key = (gpu.simulated, gpu.index)
        if key not in self._verdicts:
            try:
                state = self._setup(gpu)
            except Exception as exc:
                state, verdict = None, f"setting it up failed: {type(exc).__name__}: {exc}"
            else:
                try:
                    verdict = self._check(state) if self._expected is None else \
                        self._check(state, self._expected.result())
                except Exception as exc:
                    verdict = f"its self-check raised {type(exc).__name__}: {exc}"
            self._states[key], self._verdicts[key] = state, verdict
        if self._verdicts[key] is not True:
            raise RuntimeError(f"{self.what} disabled on gpu:{gpu.index}: {self._verdicts[key]}")
        return self._states[key]
