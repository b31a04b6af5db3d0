"""Node-local GPU leases held as ``fcntl`` locks on files in a node-wide folder.

The rule, the folder and sharing it: :doc:`/concepts/devices`."""

import errno
import fcntl
import os
import time

from .. import limits
from ..trusted import Untrusted, open_regular, warn_once
from .paths import lease_dir


def _skip(exc, then="that slot is treated as taken"):
    """Warn once per path that a lock or context file is refused (:class:`gpumr.trusted.Untrusted`)."""
    warn_once(f"{exc}; {then}")


def check_slots(value, option="--gpu-slots"):
    """``value`` as a slot count from 1 to :data:`gpumr.limits.MAX_GPU_SLOTS`, else a one-line error naming
    ``option``. Raises ``GpumrError``."""
    return limits.number(option, value, 1, limits.MAX_GPU_SLOTS, integer=True)


def _safe(uuid):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)


class FileLease:
    """A held slot lock; :meth:`release` (or process exit) gives it back."""

    def __init__(self, gpu, slot, fd, path):
        self.gpu, self.slot, self._fd, self.path = gpu, slot, fd, path

    @property
    def fd(self):
        """The locked descriptor (None once released)."""
        return self._fd

    def release(self):
        """Give the slot back, for every holder of the lock (idempotent)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self.close()

    def close(self):
        """Drop this process's hold only: the slot stays held while another copy of the descriptor is open."""
        if self._fd is not None:
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
        Leases per GPU (``--gpu-slots``)."""

    def __init__(self, directory=None, slots=1):
        self.slots = check_slots(slots)
        self.directory = lease_dir(directory)
        self._ctx_fd = {}

    def _open(self, name, create=True):
        # 0o660 less the umask: a group-shared folder's members can open each other's files.
        return open_regular(os.path.join(self.directory, name), os.O_RDONLY | (os.O_CREAT if create else 0),
                            0o660, what="a lock file", any_owner=True)

    @staticmethod
    def slot_name(gpu, slot):
        """The lock file's name for ``slot`` of ``gpu``."""
        return f"gpu-{_safe(gpu.uuid)}-slot-{slot}.lock"

    def try_slot(self, gpu, slot):
        """A lease on ``slot`` of ``gpu`` if nobody holds it, else None."""
        name = self.slot_name(gpu, slot)
        try:
            fd = self._open(name)
        except Untrusted as exc:
            _skip(exc)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        return FileLease(gpu.index, slot, fd, os.path.join(self.directory, name))

    def try_acquire(self, gpu):
        """A lease on a free slot of ``gpu`` (a :class:`gpumr.devices.nvml.GPU`), or None."""
        for slot in range(self.slots):
            got = self.try_slot(gpu, slot)
            if got is not None:
                return got
        return None

    def held_slots(self, gpu):
        """How many of ``gpu``'s slots are leased by any process now (this one included)."""
        prefix = self.slot_name(gpu, "")[:-len(".lock")]
        busy = 0
        for name in os.listdir(self.directory):
            slot = name[len(prefix):-len(".lock")]
            if not (name.startswith(prefix) and name.endswith(".lock") and slot.isascii() and slot.isdigit()
                    and str(int(slot)) == slot and int(slot) < self.slots):
                continue
            try:
                fd = self._open(name, create=False)
            except FileNotFoundError:
                continue
            except Untrusted as exc:
                _skip(exc)
                busy += 1
                continue
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
        try:
            fd = self._open(f"ctx-{_safe(gpu.uuid)}-{os.getpid()}")
        except Untrusted as exc:  # siblings then count this process as foreign: safe
            _skip(exc, "this process's GPU context is not registered (siblings count it as foreign)")
            return
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._ctx_fd[gpu.uuid] = fd

    def sibling_pids(self, gpu):
        """Pids of live gpumr processes registered with a context on ``gpu``."""
        prefix = f"ctx-{_safe(gpu.uuid)}-"
        pids = set()
        for name in os.listdir(self.directory):
            if not name.startswith(prefix) or not name[len(prefix):].isdigit():
                continue
            path = os.path.join(self.directory, name)
            try:
                fd = self._open(name, create=False)
            except (OSError, Untrusted):  # gone, or not a regular file: not a live sibling
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
