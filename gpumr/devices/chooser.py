"""Per-record device choice: a GPU if one is free, or will be before the CPU would finish; otherwise the CPU.

What "free" means, the service's timeouts and the fallback: :doc:`/concepts/devices`."""

import os
import time

from ..errors import GpumrError
from ..log import logger, say_once
from . import nvml as _nvml
from .free import Verdict, check
from .leases import LockFileLeases, wait_for

log = logger(__name__)

MODES = ("auto", "cpu", "gpu")
#: After a failed exclusive-mode context probe, leave that GPU alone this long (a probe is costly).
PROBE_BACKOFF = 1.0
#: After the scheduler service failed to answer: first and longest pause before asking it again (s).
SERVICE_BACKOFF = (5.0, 60.0)
#: A blocking (``--device gpu``) request to the service waits at most this long per round.
SERVICE_WAIT = 5.0
#: In ``auto``, a record waits at most this long for a busy GPU (s), however slow the CPU is.
MAX_WAIT = 60.0
#: The weight of the newest measurement in a device's moving average (:class:`Rates`).
RATE_WEIGHT = 0.3


class Rates:
    """How long work takes on each device, as measured by one chooser over its job: seconds per record on the CPU, per
    batch on a GPU (moving averages, :data:`RATE_WEIGHT`).

    Examples
    --------
    >>> r = Rates()
    >>> r.add("cpu", 15.0); r.add("gpu", 0.03)
    >>> round(r.wait(), 2)
    14.97
    """

    def __init__(self):
        self.cpu = self.gpu = None

    def add(self, device, seconds):
        """One more measurement of ``device`` (``"cpu"``: a record; ``"gpu"``: a batch)."""
        old = getattr(self, device)
        setattr(self, device, seconds if old is None else old + RATE_WEIGHT * (seconds - old))

    def wait(self):
        """How long a record may wait for a busy GPU: while the GPU, once free, would finish its batch (this record
        in it) before the CPU would finish this record alone; 0 while either device is unmeasured."""
        if self.cpu is None or self.gpu is None:
            return 0.0
        return max(0.0, min(MAX_WAIT, self.cpu - self.gpu))


class Choice:
    """The device one record runs on; release it when the record is done.

    Attributes
    ----------
    device : str
        ``"cpu"`` or ``"gpu:N"`` (N the NVML index).
    gpu : gpumr.devices.nvml.GPU or None"""

    def __init__(self, gpu=None, lease=None, release=None):
        self.gpu = gpu
        self._release = release
        self.lease = lease

    @property
    def device(self):
        return "cpu" if self.gpu is None else f"gpu:{self.gpu.index}"

    @property
    def on_gpu(self):
        return self.gpu is not None

    def release(self):
        """Give the GPU's lease back (nothing for the CPU); idempotent."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


CPU = Choice()


def _no_gpu(reason):
    return GpumrError(f"--device gpu: no GPU on this node ({reason})")


def require_gpu(nvml=None, env=None):
    """Refuse ``--device gpu`` where the tasks will run on this node and it has no GPU. Raises ``GpumrError``: saying
    why there is no GPU (no driver, no device, none simulated)."""
    found = _nvml.discover(nvml, env)
    if not found.gpus:
        raise _no_gpu(found.reason)
_FAILED = object()  # the service just failed to answer


class DeviceChooser:
    """Chooses the device for each record.

    Parameters
    ----------
    mode : {"auto", "cpu", "gpu"}
    memory : int, optional
        Device memory a GPU batch needs, for every choice (``--gpu-memory``); None: as each :meth:`choose` says.
    slots : int
        Concurrent tasks per GPU (``--gpu-slots``), for lock-file leases.
    lease_dir : str, optional
        Node-wide lock directory (``$GPUMR_LEASE_DIR`` by default).
    scheduler : str or None or False
        Scheduler socket path; None looks at the default path; False never uses one.
    nvml, probe, env
        Stand-ins for ``pynvml``, the CUDA context probe and the environment (tests).
    wait_timeout : float, optional
        In ``gpu`` mode, give up after this many seconds.
    only : iterable of int, optional
        Use only the GPUs with these indices (e.g. the addresses Spark gave a task); all by default. Such a task takes
        lock-file leases on them, never the service's: the service, which does not know the assignment, would pick
        among all the node's GPUs (and honours the lock files)."""

    def __init__(self, mode="auto", memory=None, slots=1, lease_dir=None, scheduler=None,
                 nvml=None, probe=None, env=None, wait_timeout=None, only=None):
        if mode not in MODES:
            raise GpumrError(f"device mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.memory = None if memory is None else int(memory)
        self.wait_timeout = wait_timeout
        self._nvml = nvml
        self._env = os.environ if env is None else env
        self._probe = probe
        self._leases = None
        self._client = None
        self._socket = None  # the service's socket path, when one may be used
        self._retry_at = 0.0  # monotonic time before which the service is not asked again
        self._backoff = SERVICE_BACKOFF[0]
        self._outage = False
        self._rotate = 0
        self._probe_failed = {}  # uuid -> monotonic time of the last failed exclusive probe
        self._said_lost = set()  # uuids of GPUs lost to a CUDA error that the log has named
        self.rates = Rates()
        self._cpu_since = None  # when the last record given the CPU was given it (timed at the next choice)
        self._absent = None  # reason there will never be a GPU (no driver, no GPU)
        self._only = None if only is None else frozenset(int(i) for i in only)
        self._largest = 0  # the most memory a GPU here has: no batch needing more is ever waited for
        self.simulated = False
        if mode == "cpu":
            return
        first = _nvml.discover(self._nvml, self._env)
        self.simulated = first.simulated
        gpus = self._assigned(first.gpus)
        if not gpus:
            self._absent = first.reason if not first.gpus else \
                f"none of the GPUs assigned to this task ({sorted(self._only)}) is on this node"
            if mode == "gpu":
                raise _no_gpu(self._absent)
            return
        self._largest = max(g.memory_total for g in gpus)
        self._leases = LockFileLeases(lease_dir, slots)
        if scheduler is not False and self._only is None:
            from .paths import check_dir, default_socket
            self._socket = scheduler or default_socket()
            folder = os.path.dirname(os.path.abspath(self._socket))
            if os.path.lexists(folder):
                check_dir(folder)  # a socket in a folder others may write to could be anyone's

    @property
    def has_gpus(self):
        """Whether this node has (possibly simulated) GPUs that records may use."""
        return self.mode != "cpu" and self._absent is None

    @property
    def why_cpu_only(self):
        """Why every record runs on the CPU, or "" if GPUs may be used."""
        if self.mode == "cpu":
            return "--device cpu"
        return self._absent or ""

    def gpus(self):
        """The GPUs as NVML (or the simulation) reports them now (only those in ``only``, if given)."""
        return self._assigned(_nvml.discover(self._nvml, self._env).gpus)

    def _assigned(self, gpus):
        """Those of ``gpus`` this task may use (all, or those in ``only``)."""
        return gpus if self._only is None else [g for g in gpus if g.index in self._only]

    def verdicts(self):
        """For ``gpumr probe``: each GPU and whether a task would get it now."""
        out = []
        for gpu in self.gpus():
            v = check(gpu, self.memory or 0, self._leases.sibling_pids(gpu))
            if v.free and gpu.compute_mode in (_nvml.EXCLUSIVE_PROCESS, _nvml.EXCLUSIVE_THREAD):
                ok = self._exclusive_probe(gpu)
                v = Verdict(gpu, ok, "" if ok else "exclusive mode and another process owns it")
            elif v.free:
                held = self._leases.held_slots(gpu)
                if held >= self._leases.slots:
                    v = Verdict(gpu, False, f"all {self._leases.slots} slot(s) leased by other gpumr tasks")
            out.append(v)
        return out

    def fits(self, memory=0):
        """Whether GPU work needing ``memory`` bytes (or the one figure given for all) fits a GPU here."""
        return self.has_gpus and self._need(memory) <= self._largest

    def _need(self, memory):
        return int(memory) if self.memory is None else self.memory

    def choose(self, memory=0):
        """The device for the next record or batch: a :class:`Choice` (``CPU`` when none is free)."""
        now = time.monotonic()
        if self._cpu_since is not None:  # the record given the CPU last is done: the task asks again
            self.rates.add("cpu", now - self._cpu_since)
            self._cpu_since = None
        if not self.fits(memory) or self._all_lost():
            return self._cpu()
        need = self._need(memory)
        if self.mode == "gpu":
            got = wait_for(lambda: self._try_gpu(need), self.wait_timeout)
            if got is None:
                raise GpumrError(f"--device gpu: no GPU became free within {self.wait_timeout} s")
            return self._timed(got)
        got = self._try_gpu(need)
        wait = self.rates.wait()
        if got is None and wait > 0:  # a busy GPU that would still finish before the CPU: wait for it that long
            got = wait_for(lambda: self._try_gpu(need), wait)
        return self._cpu() if got is None else self._timed(got)

    def _cpu(self):
        if self.has_gpus:
            self._cpu_since = time.monotonic()
        return CPU

    def _timed(self, choice):
        """``choice`` (a GPU's), its batch timed from now to its release (:attr:`rates`)."""
        t0, release = time.monotonic(), choice._release

        def done():
            self.rates.add("gpu", time.monotonic() - t0)
            if release is not None:
                release()
        choice._release = done
        return choice

    def _lost(self, gpu):
        """Whether ``gpu`` was lost to a CUDA error in this process (said in the log once)."""
        from ..gpu.trust import untrusted
        why = untrusted(gpu)
        if why and gpu.uuid not in self._said_lost:
            self._said_lost.add(gpu.uuid)
            say_once(log, f"gpu:{gpu.index} is not used again by this task: {why}")
        return bool(why)

    def _all_lost(self):
        from ..gpu.trust import any_untrusted
        if not any_untrusted():
            return False
        gpus = self.gpus()
        return bool(gpus) and all(self._lost(g) for g in gpus)

    def _exclusive_probe(self, gpu):
        if self._probe is not None:
            return self._probe(gpu)
        if gpu.simulated:
            return True
        from ..gpu import context
        return context.probe(gpu)

    def _service(self):
        """A connection to the service, or None (none there, or in backoff after a failure)."""
        if self._client is not None or self._socket is None:
            return self._client
        now = time.monotonic()
        if now < self._retry_at:
            return None
        if not os.path.exists(self._socket):
            self._retry_at = now + SERVICE_BACKOFF[0]  # no service (yet): lock files; look again later
            return None
        from .client import SchedulerClient, SchedulerUnavailable, default_timeout
        try:
            self._client = SchedulerClient(self._socket, timeout=default_timeout(self._env))
        except SchedulerUnavailable as exc:
            self._service_failed(exc)
            return _FAILED
        return self._client

    def _service_failed(self, exc):
        """The service did not answer: CPU for this record, lock files for a while, one log line."""
        if self._client is not None:
            self._client.disconnect()  # its leases end; records under way keep their claims until released
            self._client = None
        if not self._outage:
            say_once(log, f"{exc}; this record runs on the CPU, and lock-file leases are used "
                      f"for {self._backoff:g} s (then longer) before the service is asked again")
        self._outage = True
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, SERVICE_BACKOFF[1])

    def _try_gpu(self, memory):
        client = self._service()
        if client is _FAILED:
            return None  # this record on the CPU
        if client is not None:
            from .client import SchedulerUnavailable
            from .protocol import RequestError
            try:
                got = self._from_scheduler(client, memory)
            except (SchedulerUnavailable, RequestError) as exc:  # a service we cannot use: as if down
                self._service_failed(exc)
                return None
            self._outage, self._backoff = False, SERVICE_BACKOFF[0]
            return got
        gpus = self.gpus()
        if not gpus:
            return None
        n = len(gpus)
        self._rotate = (self._rotate + 1) % n
        for gpu in gpus[self._rotate:] + gpus[:self._rotate]:
            if self._lost(gpu):
                continue
            verdict = check(gpu, memory, self._leases.sibling_pids(gpu) if gpu.processes else ())
            if not verdict.free:
                continue
            if gpu.compute_mode in (_nvml.EXCLUSIVE_PROCESS, _nvml.EXCLUSIVE_THREAD):
                if time.monotonic() - self._probe_failed.get(gpu.uuid, -PROBE_BACKOFF) < PROBE_BACKOFF:
                    continue
                if self._exclusive_probe(gpu):
                    return Choice(gpu, None, None)
                self._probe_failed[gpu.uuid] = time.monotonic()
                continue
            lease = self._leases.try_acquire(gpu)
            if lease is not None:
                if not gpu.simulated:
                    self._leases.register_context(gpu)
                return Choice(gpu, lease, lease.release)
        return None

    def _from_scheduler(self, client, memory):
        block = self.mode == "gpu"
        wait = SERVICE_WAIT if self.wait_timeout is None else min(SERVICE_WAIT, self.wait_timeout)
        got = client.acquire(memory, block=block, timeout=wait if block else 0)
        if got is None:
            return None
        index, lease_id = got
        gpu = next((g for g in self.gpus() if g.index == index), None)
        if gpu is None or self._lost(gpu):
            client.release(lease_id)
            return None
        if not gpu.simulated:
            self._leases.register_context(gpu)
        return Choice(gpu, lease_id, lambda: self._release_service(client, lease_id))

    def _release_service(self, client, lease_id):
        from .protocol import RequestError
        try:
            client.release(lease_id)  # our claim is let go first, whatever the service says
        except RequestError as exc:
            if client is self._client:
                self._service_failed(exc)  # closing the connection ends the lease anyway

    def close(self):
        """Close the connection to the scheduler service (its leases end)."""
        if self._client is not None:
            self._client.close()
            self._client = None


def describe(chooser):
    """One line for logs: which devices records may run on."""
    if not chooser.has_gpus:
        return f"all records on the CPU ({chooser.why_cpu_only})"
    gpus = chooser.gpus()
    sim = " (simulated)" if chooser.simulated else ""
    return f"records on the CPU or a free GPU among {len(gpus)}{sim}: " + ", ".join(
        f"gpu:{g.index} {g.name}" for g in gpus)
