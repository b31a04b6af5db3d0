"""The node-local GPU scheduler service: lease bookkeeping, policies and the socket server.

One process per node hands out GPU leases to the node's map tasks over a
Unix-domain socket (TCP on loopback on request), one JSON object per line
each way, as ``shared/DESIGN.md`` fixes:

* ``{"op": "acquire", "memory": BYTES, "block": bool, "timeout": SECONDS}``
  -> ``{"ok": true, "gpu": INDEX, "lease": "ID"}`` or ``{"ok": false, "error": ...}``
* ``{"op": "release", "lease": "ID"}`` -> ``{"ok": true}``
* ``{"op": "status"}`` -> ``{"ok": true, "policy": ..., "gpus": [...], "leases": [...]}``

A lease ends on release or when its connection closes, so a killed task
never keeps a GPU. Policies follow the Spark GPU-scheduler paper: ``random``
among the eligible GPUs, ``round-robin`` over them, ``least-processes``
(fewest leases held; ties to the lowest index). A GPU is eligible when it
has a free slot, no compute process of another program, and enough memory
left after what its current leases asked for.
"""

import json
import os
import random
import secrets
import socket
import socketserver
import struct
import threading
import time

from . import nvml as _nvml
from .free import check
from .leases import LockFileLeases
from .paths import default_socket
from .protocol import MAX_REQUEST, NO_GPU, POLICIES, RequestError


class Scheduler:
    """Lease bookkeeping and policies, independent of sockets.

    Parameters
    ----------
    discover : callable
        Returns the current list of :class:`gpumr.devices.nvml.GPU`.
    policy : str
    slots : int
        Leases per GPU.
    siblings : callable, optional
        ``siblings(gpu)`` -> pids of gpumr processes (not foreign).
    rng : random.Random, optional
    """

    def __init__(self, discover, policy="least-processes", slots=1, siblings=None, rng=None, refresh=0.2):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        self.policy = policy
        self.slots = max(1, int(slots))
        self._discover = discover
        self._siblings = siblings or (lambda gpu: set())
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        self._leases = {}  # id -> dict(gpu, memory, owner, pid, since)
        self._last = -1
        self._gpus, self._gpus_at, self._refresh = [], 0.0, refresh

    def _snapshot(self):
        now = time.monotonic()
        if now - self._gpus_at >= self._refresh:
            self._gpus, self._gpus_at = self._discover(), now
        return self._gpus

    def _eligible(self, memory):
        by_gpu = {}
        for lease in self._leases.values():
            by_gpu.setdefault(lease["gpu"], []).append(lease)
        out = []
        for gpu in self._snapshot():
            held = by_gpu.get(gpu.index, [])
            if len(held) >= self.slots:
                continue
            ours = {lease["pid"] for lease in held} | self._siblings(gpu)
            verdict = check(gpu, 0, ours, own_pid=-1)
            if not verdict.free:
                continue
            foreign_used = sum(used for pid, used in gpu.processes if pid not in ours)
            available = gpu.memory_total - foreign_used - sum(lease["memory"] for lease in held)
            if available >= memory:
                out.append((gpu, len(held)))
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

    def acquire(self, memory=0, block=False, timeout=None, owner=None, pid=None):
        """Grant a lease: ``(gpu index, lease id)``.

        Raises
        ------
        RequestError
            ``"no GPU is free"`` when none is eligible (after ``timeout`` when blocking).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                eligible = self._eligible(memory)
                if eligible:
                    gpu = self._pick(eligible)
                    lease = secrets.token_hex(8)
                    self._leases[lease] = dict(gpu=gpu.index, memory=memory, owner=owner, pid=pid,
                                               since=time.time())
                    return gpu.index, lease
                if not block:
                    raise RequestError(NO_GPU)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RequestError(f"{NO_GPU} (waited {timeout} s)")
                # Wake on a release, or re-read NVML now and then.
                self._cond.wait(0.5 if left is None else min(left, 0.5))

    def release(self, lease, owner=None):
        """End ``lease``; only its owner may, when an owner is given."""
        with self._cond:
            held = self._leases.get(lease)
            if held is None or (owner is not None and held["owner"] is not owner):
                raise RequestError(f"unknown lease {lease!r}")
            del self._leases[lease]
            self._cond.notify_all()

    def release_owner(self, owner):
        """End every lease of a closed connection."""
        with self._cond:
            for lease in [k for k, v in self._leases.items() if v["owner"] is owner]:
                del self._leases[lease]
            self._cond.notify_all()

    def status(self):
        """The service's view: policy, GPUs with their leases, and all leases."""
        with self._cond:
            gpus = []
            for gpu in self._snapshot():
                held = [lease for lease in self._leases.values() if lease["gpu"] == gpu.index]
                gpus.append(dict(index=gpu.index, name=gpu.name, uuid=gpu.uuid, simulated=gpu.simulated,
                                 compute_mode=gpu.compute_mode, slots=self.slots, leases=len(held),
                                 memory_total=gpu.memory_total, memory_leased=sum(x["memory"] for x in held)))
            leases = [dict(lease=k, gpu=v["gpu"], memory=v["memory"], pid=v["pid"], since=v["since"])
                      for k, v in self._leases.items()]
        return dict(ok=True, policy=self.policy, gpus=gpus, leases=leases)

    def handle(self, line, owner=None, pid=None):
        """Answer one request line with one reply object."""
        try:
            req = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            return dict(ok=False, error=f"malformed JSON: {exc}")
        if not isinstance(req, dict):
            return dict(ok=False, error="a request must be a JSON object")
        op = req.get("op")
        try:
            if op == "acquire":
                memory = req.get("memory", 0)
                block = req.get("block", False)
                timeout = req.get("timeout")
                if not isinstance(memory, int) or isinstance(memory, bool) or memory < 0:
                    raise RequestError("memory must be a non-negative integer (bytes)")
                if not isinstance(block, bool):
                    raise RequestError("block must be true or false")
                if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                            or timeout < 0):
                    raise RequestError("timeout must be a non-negative number of seconds or null")
                gpu, lease = self.acquire(memory, block, timeout, owner, pid)
                return dict(ok=True, gpu=gpu, lease=lease)
            if op == "release":
                lease = req.get("lease")
                if not isinstance(lease, str):
                    raise RequestError("release needs a lease id")
                self.release(lease, owner)
                return dict(ok=True)
            if op == "status":
                return self.status()
            raise RequestError(f"unknown op {op!r} (acquire, release, status)")
        except RequestError as exc:
            return dict(ok=False, error=str(exc))


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        sched = self.server.scheduler
        owner = object()
        pid = _peer_pid(self.connection)
        try:
            while True:
                line = self.rfile.readline(MAX_REQUEST + 1)
                if not line:
                    break
                if len(line) > MAX_REQUEST and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip the rest of it
                        line = self.rfile.readline(MAX_REQUEST)
                    reply = dict(ok=False, error=f"request longer than {MAX_REQUEST} bytes")
                elif not line.strip():
                    continue
                else:
                    reply = sched.handle(line, owner, pid)
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
        except (ConnectionError, OSError):
            pass
        finally:
            sched.release_owner(owner)


def _peer_pid(conn):
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[0]
    except (OSError, AttributeError):
        return None


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TCPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(scheduler, path=None, tcp_port=None, mode=0o600):
    """A server for ``scheduler`` on a Unix socket at ``path`` (or TCP 127.0.0.1:``tcp_port``)."""
    if tcp_port is not None:
        server = _TCPServer(("127.0.0.1", tcp_port), _Handler)
    else:
        path = path or default_socket()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if os.path.exists(path):
            try:  # a live service there? then refuse; a stale socket file: remove
                probe = socket.socket(socket.AF_UNIX)
                probe.connect(path)
                probe.close()
                raise OSError(f"{path}: a scheduler is already serving there")
            except ConnectionRefusedError:
                os.unlink(path)
        old = os.umask(0o177)
        try:
            server = _UnixServer(path, _Handler)
        finally:
            os.umask(old)
        os.chmod(path, mode)
    server.scheduler = scheduler
    return server


def node_scheduler(policy, slots, lease_dir=None):
    """A :class:`Scheduler` over this node's GPUs (NVML or simulated)."""
    leases = LockFileLeases(lease_dir, slots)
    return Scheduler(lambda: _nvml.discover().gpus, policy, slots, siblings=leases.sibling_pids)


