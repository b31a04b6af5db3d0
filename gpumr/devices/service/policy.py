"""The service's lease bookkeeping and its policies (random, round-robin, least-processes): which GPU a
request gets, and when a lease ends. No sockets here (:mod:`.transport`)."""

import os
import random
import secrets
import time

from .. import nvml as _nvml
from .. import protocol as P
from ..free import check
from ..leases import LockFileLeases, check_slots
from ..protocol import POLICIES, RequestError


class Scheduler:
    """Lease bookkeeping and policies, independent of sockets (one thread: the server's loop).

    Parameters
    ----------
    discover : callable
        Returns the current list of :class:`gpumr.devices.nvml.GPU`.
    policy : str
    slots : int
        Leases per GPU (1 to :data:`gpumr.limits.MAX_GPU_SLOTS`).
    siblings : callable, optional
        ``siblings(gpu)`` -> pids of gpumr processes (not foreign).
    rng : random.Random, optional
    refresh : float
        Seconds a ``discover()`` answer is reused.
    leases : gpumr.devices.leases.LockFileLeases, optional
        The node's lock-file leases: each granted lease holds a slot's lock file, and slots held by others are not
        granted. Without it (tests of the policies) slots are counted in memory only."""

    def __init__(self, discover, policy="least-processes", slots=1, siblings=None, rng=None, refresh=0.2,
                 leases=None):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        self.policy = policy
        self.slots = check_slots(slots, "--slots-per-gpu")
        self._discover = discover
        self._siblings = siblings or (lambda gpu: set())
        self._rng = rng or random.Random()
        self._files = leases
        self._leases = {}  # id -> dict(gpu, memory, owner, pid, since, file)
        self._by_owner = {}  # owner -> set of lease ids
        self._last = -1
        self._gpus, self._gpus_at, self._refresh = [], None, refresh

    def _snapshot(self):
        now = time.monotonic()
        if self._gpus_at is None or now - self._gpus_at >= self._refresh:
            self._gpus, self._gpus_at = self._discover(), now
        return self._gpus

    def _eligible(self, memory):
        by_gpu = {}
        for lease in self._leases.values():
            by_gpu.setdefault(lease["gpu"], []).append(lease)
        out = []
        for gpu in self._snapshot():
            held = by_gpu.get(gpu.index, [])
            if len(held) >= self.slots:  # all ours: no need to look at the lock files
                continue
            taken = self._files.held_slots(gpu) if self._files is not None else len(held)
            if taken >= self.slots:
                continue
            ours = {lease["pid"] for lease in held}
            if gpu.processes:  # only then does it matter which are gpumr's (a folder listing)
                ours |= self._siblings(gpu)
            if not check(gpu, 0, ours, own_pid=-1).free:
                continue
            foreign_used = sum(used for pid, used in gpu.processes if pid not in ours)
            available = gpu.memory_total - foreign_used - sum(lease["memory"] for lease in held)
            if available >= memory:
                out.append((gpu, taken))
        return out

    def _pick(self, eligible):
        if self.policy == "random":
            return self._rng.choice(eligible)[0]
        if self.policy == "round-robin":
            ordered = sorted(eligible, key=lambda e: e[0].index)
            after = [e for e in ordered if e[0].index > self._last]
            gpu = (after or ordered)[0][0]
            self._last = gpu.index
            return gpu
        return min(eligible, key=lambda e: (e[1], e[0].index))[0]

    def try_acquire(self, memory=0, owner=None, pid=None):
        """Grant a lease now: ``(gpu index, lease id)``. Raises ``RequestError``: code ``no-gpu`` when the node has no
        GPU, ``no-gpu-free`` when none is eligible."""
        if not self._snapshot():
            raise RequestError("this node has no GPU", P.NO_GPU)
        eligible = self._eligible(memory)
        while eligible:
            gpu = self._pick(eligible)
            held = None
            if self._files is not None:
                held = self._files.try_acquire(gpu)
                if held is None:  # a lock-file holder took it meanwhile
                    eligible = [e for e in eligible if e[0] is not gpu]
                    continue
            lease = secrets.token_hex(8)
            self._leases[lease] = dict(gpu=gpu.index, memory=memory, owner=owner, pid=pid, since=time.time(),
                                       file=held)
            self._by_owner.setdefault(owner, set()).add(lease)
            return gpu.index, lease
        raise RequestError("no GPU is free", P.NO_GPU_FREE)

    def acquire(self, memory=0, block=False, timeout=None, owner=None, pid=None, poll=0.05):
        """:meth:`try_acquire`, waiting up to ``timeout`` seconds (None: forever) when ``block``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self.try_acquire(memory, owner, pid)
            except RequestError as exc:
                if not block or exc.code != P.NO_GPU_FREE:
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    raise RequestError(f"no GPU is free (waited {timeout:g} s)", P.NO_GPU_FREE) from None
            time.sleep(poll)

    def claim(self, lease):
        """The locked descriptor of ``lease``'s slot, to hand to its holder (None without lock files)."""
        held = self._leases[lease]["file"]
        return None if held is None else held.fd

    def release(self, lease, owner=None):
        """End ``lease``; only its owner may, when an owner is given."""
        held = self._leases.get(lease)
        if held is None or (owner is not None and held["owner"] is not owner):
            raise RequestError(f"unknown lease {lease[:64]!r}", P.UNKNOWN_LEASE)
        self._drop(lease)

    def _drop(self, lease):
        held = self._leases.pop(lease)
        if held["file"] is not None:
            held["file"].close()  # the holder's claim, if it has one, keeps the slot until it lets go
        mine = self._by_owner.get(held["owner"])
        if mine is not None:
            mine.discard(lease)
            if not mine:
                del self._by_owner[held["owner"]]

    def release_owner(self, owner):
        """End every lease of a closed connection; how many there were."""
        mine = list(self._by_owner.get(owner, ()))
        for lease in mine:
            self._drop(lease)
        return len(mine)

    def holds(self, owner):
        """Whether ``owner`` holds a lease."""
        return bool(self._by_owner.get(owner))

    def status(self):
        """The service's view: policy, GPUs with their leases, and all leases."""
        gpus = []
        for gpu in self._snapshot():
            held = [lease for lease in self._leases.values() if lease["gpu"] == gpu.index]
            taken = self._files.held_slots(gpu) if self._files is not None else len(held)
            gpus.append(dict(index=gpu.index, name=gpu.name, uuid=gpu.uuid, simulated=gpu.simulated,
                             compute_mode=gpu.compute_mode, slots=self.slots, leases=len(held),
                             lock_file_leases=taken - len(held),
                             memory_total=gpu.memory_total, memory_leased=sum(x["memory"] for x in held)))
        leases = [dict(lease=k, gpu=v["gpu"], memory=v["memory"], pid=v["pid"], since=v["since"])
                  for k, v in self._leases.items()]
        return dict(ok=True, policy=self.policy, pid=os.getpid(), gpus=gpus, leases=leases)



def node_scheduler(policy, slots, lease_dir=None):
    """A :class:`Scheduler` over this node's GPUs (NVML or simulated) and its lock-file leases."""
    leases = LockFileLeases(lease_dir, slots)
    return Scheduler(lambda: _nvml.discover().gpus, policy, slots, siblings=leases.sibling_pids, leases=leases)

