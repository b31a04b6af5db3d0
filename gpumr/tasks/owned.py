"""A task's side of the job's GPU owners (:mod:`gpumr.tasks.owner`): its connection, device choice that sends every
GPU batch to the owner, and the workload as such a task runs it."""

import contextlib
import hashlib
from multiprocessing.connection import Client

from ..log import logger, say_once

log = logger(__name__)


class OwnerGone(RuntimeError):
    """The owner cannot run batches any more (its process ended, or its device was lost)."""


class OwnerClient:
    """A task's connection to the job's GPU owner.

    Parameters
    ----------
    path : str
        The owner's socket.
    name : str
        The task attempt's name (the owner counts its tasks)."""

    def __init__(self, path, name):
        self.conn = Client(path, "AF_UNIX")
        self.conn.send(("hello", name))
        kind, what = self.conn.recv()
        self.gpu = what if kind == "ready" else None
        self.why = None if kind == "ready" else what

    def batch(self, records):
        """``(results, written)``: the owner's results of ``records`` (``[(key, item)]``), and the arrays it wrote for
        this task (:attr:`gpumr.tasks.output.Arrays.written`). Raises RuntimeError where it failed them,
        :class:`OwnerGone` where it cannot run any more."""
        try:
            self.conn.send(("batch", records))
            kind, *what = self.conn.recv()
        except (OSError, EOFError) as exc:
            raise OwnerGone(f"the GPU owner is gone ({type(exc).__name__})") from None
        if kind == "lost":
            raise OwnerGone(f"the GPU owner's device is lost: {what[0]}")
        if kind != "done":
            raise RuntimeError(f"the GPU owner failed the batch: {what[0]}")
        return tuple(what)

    def close(self):
        with contextlib.suppress(OSError):
            self.conn.close()


def connect(paths, name):
    """A task's :class:`OwnerClient` of one of the owners at ``paths`` (the first that answers ready, starting at
    one the task's ``name`` picks, so that a node's tasks spread over its GPUs), or None where none can be used (said
    why)."""
    first = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(paths) if paths else 0
    for path in paths[first:] + paths[:first]:
        try:
            client = OwnerClient(path, name)
        except (OSError, EOFError) as exc:
            say_once(log, f"a GPU owner did not answer ({exc}); this task sets a GPU up itself if no other does")
            continue
        if client.gpu is not None:
            return client
        client.close()
    return None


class OwnedChooser:
    """Device choice for a task whose GPU batches go to the owner: each batch to the owner's GPU, no lease (the
    owner holds it); the CPU once the owner is gone.

    Parameters
    ----------
    client : OwnerClient
    fallback : gpumr.devices.chooser.DeviceChooser
        The task's own device choice (closed with this one)."""

    def __init__(self, client, fallback):
        self.client, self.fallback = client, fallback
        self.has_gpus, self.simulated, self.why_cpu_only = True, bool(client.gpu.simulated), ""
        self.gone = False

    def fits(self, memory=0):
        return True  # (the owner set the GPU up for this workload's batches)

    def choose(self, memory=0):
        from ..devices.chooser import CPU, Choice
        return CPU if self.gone else Choice(self.client.gpu, "owner")

    def close(self):
        self.client.close()
        self.fallback.close()


class Owned:
    """The workload as a task with an owner runs it: GPU batches sent to the owner, the rest here; the arrays the
    owner wrote for the task listed in the task's ``arrays`` (:class:`gpumr.tasks.output.Arrays`)."""

    def __init__(self, workload, chooser, arrays):
        self.workload, self.chooser, self.arrays = workload, chooser, arrays

    def __getattr__(self, name):
        return getattr(self.workload, name)

    def gpu_batch(self, records, options, device):
        try:
            results, written = self.chooser.client.batch(records)
        except OwnerGone as exc:
            self.chooser.gone = True
            say_once(log, f"{exc}; this task's records run on the CPU")
            raise
        self.arrays.written.extend(written)
        return results
