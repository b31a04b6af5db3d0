"""Where node-local device state lives, and whether that place can be trusted.

Leases (lock files) and the scheduler's socket default to one per-user
folder in the system temp dir, ``$TMPDIR/gpumr-<uid>``, shared by every
gpumr task of that user on the node. ``$GPUMR_LEASE_DIR`` and
``$GPUMR_SCHEDULER_SOCKET`` (or ``--lease-dir`` / ``--socket``) move them
to a place the administrator chose.

Two rules, checked before anything is created or trusted there:

* the per-user folder is created mode 0700 and must be a real folder (not
  a symlink) owned by this user with no group or other write permission;
  anything else was planted by someone else and is refused;
* a folder the administrator chose may be shared with a group (the EMR
  bootstrap uses a setgid ``2770`` folder), so it may be group-writable
  and owned by another user, but it must be a folder and must not be
  writable by everyone unless the sticky bit is set (like ``/tmp``), so
  that nobody outside may swap the files in it. Missing, it is created
  mode 0770 less the umask (under the bootstrap's umask 007 the group
  shares it; a setgid parent passes its group on).
"""

import os
import stat
import tempfile

from ..errors import GpumrError

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


def check_dir(path):
    """Refuse ``path`` as a home for leases or a socket when someone else could tamper with it.

    Parameters
    ----------
    path : str
        An existing folder: the per-user folder (strict rule) or one an
        administrator chose (shared rule); see the module docstring.

    Raises
    ------
    GpumrError
        One line naming the folder and what is wrong with it.
    """
    strict = _is_user_dir(path)
    try:
        st = os.lstat(path) if strict else os.stat(path)
    except OSError as exc:
        raise GpumrError(f"{path}: cannot use it for gpumr's leases and socket ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a folder"
        raise GpumrError(f"{path}: refusing it for gpumr's leases and socket: it is {what}")
    mode = stat.S_IMODE(st.st_mode)
    if strict:
        if st.st_uid != os.getuid():
            raise GpumrError(f"{path}: refusing it for gpumr's leases and socket: it belongs to uid "
                             f"{st.st_uid}, not to you (uid {os.getuid()}); someone else made it")
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise GpumrError(f"{path}: refusing it for gpumr's leases and socket: mode {mode:04o} lets "
                             f"others write in it (it must be 0700; remove it or chmod 700 it)")
    elif mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise GpumrError(f"{path}: refusing it for gpumr's leases and socket: mode {mode:04o} lets "
                         f"anyone write in it (make it group-shared, e.g. 2770, or set the sticky bit)")
    return path


def ensure_dir(path):
    """Create ``path`` if missing (0700; 0770 less the umask for a chosen folder), :func:`check_dir` it."""
    if not os.path.lexists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not _is_user_dir(path):
            os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(path, 0o700 if _is_user_dir(path) else 0o770)
        except FileExistsError:
            pass  # someone made it meanwhile: the check decides
        else:
            # mkdir's mode passes through the umask, which only takes bits away; make it exact
            # without touching the process umask (others' threads share it).
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if _is_user_dir(path):
                    os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
    return check_dir(path)


def lease_dir(path=None):
    """The lease folder to use (``path`` or :func:`default_lease_dir`), created and checked."""
    return ensure_dir(path or default_lease_dir())


def socket_path(path=None):
    """The scheduler socket path (``path`` or :func:`default_socket`), its folder created and checked."""
    path = path or default_socket()
    ensure_dir(os.path.dirname(os.path.abspath(path)))
    return path
