"""Per-record device choice: a GPU if one is free right now, otherwise the CPU.

"Free" follows ``shared/DESIGN.md``:

* exclusive-process (or -thread) compute mode: this process can own a CUDA
  context on it (the driver refuses a second process);
* default mode: NVML shows no compute process of another program (gpumr's
  own tasks on the node do not count), at least the task's memory is free,
  and this process holds a node-local lease on one of the GPU's slots.

Leases come from the node's scheduler service when its socket exists, else
from lock files. Modes: ``auto`` (per record, never waits), ``cpu`` (never
touches CUDA), ``gpu`` (waits for a GPU; fails clearly without one).
"""

import os
import time

from ..errors import GpumrError
from . import nvml as _nvml
from .free import Verdict, check
from .leases import LockFileLeases, wait_for

MODES = ("auto", "cpu", "gpu")
#: After a failed exclusive-mode context probe, leave that GPU alone this long (a probe is costly).
PROBE_BACKOFF = 1.0


class Choice:
    """The device one record runs on; release it when the record is done.

    Attributes
    ----------
    device : str
        ``"cpu"`` or ``"gpu:N"`` (N the NVML index).
    gpu : gpumr.devices.nvml.GPU or None
    """

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


class DeviceChooser:
    """Chooses the device for each record.

    Parameters
    ----------
    mode : {"auto", "cpu", "gpu"}
    memory : int
        Device memory one record's GPU work needs.
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
        Use only the GPUs with these indices (e.g. the addresses Spark gave a task); all by default.
    """

    def __init__(self, mode="auto", memory=0, slots=1, lease_dir=None, scheduler=None,
                 nvml=None, probe=None, env=None, wait_timeout=None, only=None):
        if mode not in MODES:
            raise GpumrError(f"device mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.memory = int(memory)
        self.wait_timeout = wait_timeout
        self._nvml = nvml
        self._env = os.environ if env is None else env
        self._probe = probe
        self._leases = None
        self._client = None
        self._rotate = 0
        self._probe_failed = {}  # uuid -> monotonic time of the last failed exclusive probe
        self._absent = None  # reason there will never be a GPU (no driver, no GPU)
        self._only = None if only is None else frozenset(int(i) for i in only)
        self.simulated = False
        if mode == "cpu":
            return
        first = _nvml.discover(self._nvml, self._env)
        self.simulated = first.simulated
        if not first.gpus or not self.gpus():
            self._absent = first.reason if not first.gpus else \
                f"none of the GPUs assigned to this task ({sorted(self._only)}) is on this node"
            if mode == "gpu":
                raise GpumrError(f"--device gpu: no GPU on this node ({self._absent})")
            return
        if scheduler is not False:
            from .client import SchedulerClient
            from .paths import default_socket
            path = scheduler or default_socket()
            if os.path.exists(path):
                try:
                    self._client = SchedulerClient(path)
                except OSError:
                    self._client = None
        self._leases = LockFileLeases(lease_dir, slots)

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
        gpus = _nvml.discover(self._nvml, self._env).gpus
        return gpus if self._only is None else [g for g in gpus if g.index in self._only]

    def verdicts(self):
        """For ``gpumr probe``: each GPU and whether a task would get it now."""
        out = []
        for gpu in self.gpus():
            v = check(gpu, self.memory, self._leases.sibling_pids(gpu))
            if v.free and gpu.compute_mode in (_nvml.EXCLUSIVE_PROCESS, _nvml.EXCLUSIVE_THREAD):
                ok = self._exclusive_probe(gpu)
                v = Verdict(gpu, ok, "" if ok else "exclusive mode and another process owns it")
            elif v.free:
                held = self._leases.held_slots(gpu)
                if held >= self._leases.slots:
                    v = Verdict(gpu, False, f"all {self._leases.slots} slot(s) leased by other gpumr tasks")
            out.append(v)
        return out

    def choose(self):
        """The device for the next record: a :class:`Choice` (``CPU`` when none is free)."""
        if not self.has_gpus:
            return CPU
        if self.mode == "gpu":
            got = wait_for(self._try_gpu, self.wait_timeout)
            if got is None:
                raise GpumrError(f"--device gpu: no GPU became free within {self.wait_timeout} s")
            return got
        return self._try_gpu() or CPU

    def _exclusive_probe(self, gpu):
        if self._probe is not None:
            return self._probe(gpu)
        if gpu.simulated:
            return True
        from ..gpu import context
        return context.probe(gpu)

    def _try_gpu(self):
        if self._client is not None:
            try:
                return self._from_scheduler()
            except OSError:
                self._client = None  # the service went away: lock files from now on
        gpus = self.gpus()
        if not gpus:
            return None
        n = len(gpus)
        self._rotate = (self._rotate + 1) % n
        for gpu in gpus[self._rotate:] + gpus[:self._rotate]:
            verdict = check(gpu, self.memory, self._leases.sibling_pids(gpu) if gpu.processes else ())
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

    def _from_scheduler(self):
        block = self.mode == "gpu"
        got = self._client.acquire(self.memory, block=block, timeout=self.wait_timeout if block else 0)
        if got is None:
            return None
        index, lease_id = got
        gpu = next((g for g in self.gpus() if g.index == index), None)
        if gpu is None:
            self._client.release(lease_id)
            return None
        if not gpu.simulated:
            self._leases.register_context(gpu)
        return Choice(gpu, lease_id, lambda: self._client.release(lease_id))

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
