"""Where node-local device state lives: leases (lock files) and the scheduler's socket.

Both default to a private per-user folder, ``$TMPDIR/gpumr-<uid>``; ``$GPUMR_LEASE_DIR`` and
``$GPUMR_SCHEDULER_SOCKET`` move them to a shared folder the administrator chose, trusted under :mod:`gpumr.trusted`'s
rule (:doc:`/concepts/devices`)."""

import os
import tempfile

from ..trusted import check_folder, ensure_folder

LEASE_DIR_ENV = "GPUMR_LEASE_DIR"
SOCKET_ENV = "GPUMR_SCHEDULER_SOCKET"


def user_dir():
    """The per-user folder for node-local state, ``$TMPDIR/gpumr-<uid>``."""
    return os.path.join(tempfile.gettempdir(), f"gpumr-{os.getuid()}")


def default_lease_dir():
    """``$GPUMR_LEASE_DIR``, or :func:`user_dir`."""
    return os.environ.get(LEASE_DIR_ENV) or user_dir()


def default_socket():
    """``$GPUMR_SCHEDULER_SOCKET``, or ``scheduler.sock`` in :func:`user_dir`."""
    return os.environ.get(SOCKET_ENV) or os.path.join(user_dir(), "scheduler.sock")


def _is_user_dir(path):
    return os.path.abspath(path) == os.path.abspath(user_dir())


WHAT = "gpumr's leases and socket"


def check_dir(path):
    """``path`` if :mod:`gpumr.trusted` trusts it for leases and a socket (private or shared). Raises
    ``gpumr.trusted.Untrusted``: one line naming the folder and what is wrong with it."""
    check_folder(path, WHAT, shared=not _is_user_dir(path))
    return path


def ensure_dir(path):
    """Create ``path`` if missing (see :func:`gpumr.trusted.ensure_folder`), :func:`check_dir` it."""
    return ensure_folder(path, WHAT, shared=not _is_user_dir(path))


def lease_dir(path=None):
    """The lease folder to use (``path`` or :func:`default_lease_dir`), created and checked."""
    return ensure_dir(path or default_lease_dir())


def socket_path(path=None):
    """The scheduler socket path (``path`` or :func:`default_socket`), its folder created and checked."""
    path = path or default_socket()
    ensure_dir(os.path.dirname(os.path.abspath(path)))
    return path
