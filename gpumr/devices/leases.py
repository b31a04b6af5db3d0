"""Node-local GPU leases held as ``fcntl`` locks on files in a node-wide directory.

Each GPU has ``slots`` lock files; holding the lock on one is holding a
lease on a slot of that GPU. The kernel drops a process's locks when it
exits, however it exits, so a killed map task never keeps a GPU.

Processes that hold a CUDA context also hold a lock on a ``ctx-`` file that
names their pid, so that other gpumr tasks can tell the compute processes of
their siblings on the node from those of foreign programs.
"""

import errno
import fcntl
import os
import time

from .paths import default_lease_dir


def _safe(uuid):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)


class FileLease:
    """A held slot lock; :meth:`release` (or process exit) gives it back."""

    def __init__(self, gpu, slot, fd, path):
        self.gpu, self.slot, self._fd, self.path = gpu, slot, fd, path

    def release(self):
        """Give the slot back (idempotent)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class LockFileLeases:
    """Slots of GPUs as lock files in ``directory``.

    Parameters
    ----------
    directory : str
        Node-wide directory shared by all map tasks of the node.
    slots : int
        Leases per GPU (``--gpu-slots``).
    """

    def __init__(self, directory=None, slots=1):
        self.directory = directory or default_lease_dir()
        self.slots = max(1, int(slots))
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._ctx_fd = {}

    def _open(self, name):
        return os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT, 0o600)

    def try_acquire(self, gpu):
        """A lease on a free slot of ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), or None."""
        for slot in range(self.slots):
            name = f"gpu-{_safe(gpu.uuid)}-slot-{slot}.lock"
            fd = self._open(name)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue
                raise
            return FileLease(gpu.index, slot, fd, os.path.join(self.directory, name))
        return None

    def held_slots(self, gpu):
        """How many of ``gpu``'s slots are leased by any process now."""
        busy = 0
        for slot in range(self.slots):
            fd = self._open(f"gpu-{_safe(gpu.uuid)}-slot-{slot}.lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                busy += 1
            finally:
                os.close(fd)
        return busy

    def register_context(self, gpu):
        """Mark this process as a gpumr process with a CUDA context on ``gpu``."""
        if gpu.uuid in self._ctx_fd:
            return
        fd = self._open(f"ctx-{_safe(gpu.uuid)}-{os.getpid()}")
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._ctx_fd[gpu.uuid] = fd

    def sibling_pids(self, gpu):
        """Pids of live gpumr processes registered with a context on ``gpu``."""
        prefix = f"ctx-{_safe(gpu.uuid)}-"
        pids = set()
        for name in os.listdir(self.directory):
            if not name.startswith(prefix):
                continue
            path = os.path.join(self.directory, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # Nobody holds it: the process is gone; tidy up.
                try:
                    os.unlink(path)
                except OSError:
                    pass
            except OSError:
                pids.add(int(name[len(prefix):]))
            finally:
                os.close(fd)
        return pids


def wait_for(acquire, timeout=None, poll=0.05):
    """Call ``acquire()`` until it returns something, or ``timeout`` seconds pass."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        got = acquire()
        if got is not None:
            return got
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(poll)
