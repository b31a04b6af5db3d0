"""Where node-local device state lives: the lease folder and the scheduler's socket.

Both default to one per-user folder in the system temp dir,
``$TMPDIR/gpumr-<uid>``, shared by every gpumr task of that user on the
node; ``$GPUMR_LEASE_DIR`` and ``$GPUMR_SCHEDULER_SOCKET`` move them to a
place the administrator chose.
"""

import os
import tempfile

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
