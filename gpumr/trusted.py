"""Trusted paths: the one rule for every folder gpumr reads code or state from, or keeps state in.

A trusted folder is yours or root's, no link, and not writable by others (a shared one only with the sticky bit);
only regular files are opened, never through a link and never blocking, so another user cannot make gpumr run their
code or block on a FIFO. Every refusal is one :class:`Untrusted` line naming the path and the reason."""

import errno
import os
import shutil
import stat
import tempfile

from .errors import GpumrError, printable

#: How a file in a trusted folder is opened: never through a link, never blocking, never inherited.
OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Untrusted(GpumrError):
    """A path that the trusted-paths rule refuses; the message names it and says why."""


def warn_once(text):
    """Say a trusted-paths refusal that gpumr works around (a private temporary kernel cache, a slot skipped) once
    per process, however often it is met (:func:`gpumr.log.say_once`)."""
    from .log import logger, say_once
    say_once(logger(__name__), text)


def _kind(mode):
    for test, what in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a regular file"


def _owners():
    return {os.geteuid(), 0}


def check_folder(path, what, *, shared=False):
    """The ``lstat`` of ``path`` if the rule trusts it as a folder for ``what`` (what gpumr keeps there, for the
    message: "gpumr's leases and socket"); with ``shared``, a documented shared folder, group or other write
    permission is allowed with the sticky bit. Raises ``Untrusted`` naming the folder and the reason: missing, a link,
    not a folder, another user's, or writable by others (without the sticky bit, for a shared folder)."""
    shown = printable(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Untrusted(f"{shown}: cannot use it for {what} ({exc.strerror})") from None
    return _judge_folder(st, shown, what, shared)


def _judge_folder(st, shown, what, shared):
    """The rule on a folder's ``stat``: its kind, owner and mode (see :func:`check_folder`)."""
    if not stat.S_ISDIR(st.st_mode):
        kind = "a file, not a folder" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise Untrusted(f"{shown}: refusing it for {what}: it is {kind}")
    if st.st_uid not in _owners():
        raise Untrusted(f"{shown}: refusing it for {what}: it belongs to uid {st.st_uid}, not to you "
                        f"(uid {os.geteuid()}) or root; someone else made it")
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        if not shared:
            raise Untrusted(f"{shown}: refusing it for {what}: mode {mode:04o} lets others write in it "
                            f"(it must be 0700; remove it or chmod 700 it)")
        if not mode & stat.S_ISVTX:
            raise Untrusted(f"{shown}: refusing it for {what}: mode {mode:04o} lets others write in it without "
                            f"the sticky bit, so they could replace the files gpumr uses there (chmod +t it, "
                            f"e.g. 1770 or 3770 for a group)")
    return st


def open_folder(path, what, *, shared=False):
    """A descriptor of the folder ``path``, opened once and judged by the rule on what was opened. Raises
    ``Untrusted`` for a link of another user, a second link, not a folder, another user's, or one writable by others.

    Returns
    -------
    (int, str)
        The folder's descriptor (the caller closes it) and its path as opened (no link in it).

    Examples
    --------
    >>> folder = private_temp_dir("gpumr-example-")
    >>> os.symlink(folder, folder + ".link")
    >>> fd, opened = open_folder(folder + ".link", "an example")
    >>> opened == folder
    True
    >>> os.close(fd); os.unlink(folder + ".link")
    """
    shown = printable(os.path.abspath(path))
    try:
        fd, opened = _walk([n for n in os.path.abspath(path).split("/") if n], shown, what)
    except OSError as exc:
        raise Untrusted(f"{shown}: cannot use it for {what} ({exc.strerror})") from None
    try:
        _judge_folder(os.fstat(fd), printable(opened), what, shared)  # (the folder it names: its name in messages)
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk(names, shown, what):
    """``(descriptor, path)`` of the folder at ``/`` + ``names``, each name opened relative to the one before it: the
    last of ``names`` may be a link of yours or root's, followed once; any other link is refused."""
    from collections import deque
    todo = deque((name, i == len(names) - 1) for i, name in enumerate(names))  # (name, the folder's own name?)
    fd, where, followed = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), [], False
    try:
        while todo:
            name, own_name = todo.popleft()
            if name in ("", "."):
                continue
            try:
                step = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                target = _link(fd, name, where, own_name and not followed, shown, what)
                if target is None:  # (not a folder, not a link)
                    raise
                followed = True
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), []
                todo.extendleft(reversed([(n, False) for n in target.split("/") if n]))
                continue
            os.close(fd)
            fd = step
            where = where[:-1] if name == ".." else [*where, name]
        return fd, "/" + "/".join(where)
    except BaseException:
        os.close(fd)
        raise


def _link(fd, name, where, may_follow, shown, what):
    """The target of the link ``name`` in open folder ``fd`` (at ``where``) where it may be followed, else
    :class:`Untrusted`; None if ``name`` is no link. Read from the link's own descriptor: what was judged."""
    link = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        st = os.fstat(link)
        if not stat.S_ISLNK(st.st_mode):
            return None
        at = "/" + "/".join([*where, name])
        said = f"{shown}: refusing it for {what}: " + ("" if printable(at) == shown else f"{printable(at)}: ")
        if st.st_uid not in _owners():
            raise Untrusted(f"{said}a link of uid {st.st_uid}, not yours (uid {os.geteuid()}) or root's; someone "
                            "else chose where it points")
        if not may_follow:
            raise Untrusted(f"{said}a link on the way (one link is followed: the folder's own name, not a chain; "
                            "give a path without links)")
        return os.readlink("", dir_fd=link)
    finally:
        os.close(link)


def read_at(dir_fd, name, limit, *, what="a file", shown=None):
    """The bytes (at most ``limit``) of regular file ``name`` in the folder open as ``dir_fd`` (:func:`open_folder`),
    opened under the rule (no link, non-blocking, ``fstat``-checked, yours or root's); ``shown``: its name in messages
    (default ``name``)."""
    fd = open_regular(name, dir_fd=dir_fd, what=what, shown=shown)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def ensure_folder(path, what, *, shared=False):
    """:func:`check_folder` ``path``, making it first (with its parents) if it is missing."""
    if not os.path.lexists(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            os.mkdir(path, 0o770 if shared else 0o700)
        except FileExistsError:
            pass  # someone made it meanwhile: the check decides
        else:
            # mkdir's mode passes through the umask, which only takes bits away; set it exactly
            # without touching the process umask (other threads share it).
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                made = stat.S_IMODE(os.fstat(fd).st_mode)
                if not shared:
                    os.fchmod(fd, 0o700)
                elif made & (stat.S_IWGRP | stat.S_IWOTH):
                    os.fchmod(fd, made | stat.S_ISVTX)
            finally:
                os.close(fd)
    check_folder(path, what, shared=shared)
    return path


def open_regular(path, flags=os.O_RDONLY, mode=0o600, *, what="a file", any_owner=False, dir_fd=None, shown=None):
    """A descriptor of regular file ``path``, opened under the rule (no link, non-blocking, ``fstat``-checked). Raises
    ``Untrusted`` for a link, a FIFO, a device, a socket, a folder or another user's file; ``OSError`` as ``os.open``
    (a missing file without ``O_CREAT`` included).

    Parameters
    ----------
    flags : int
        ``os.O_RDONLY`` (default), ``os.O_WRONLY | os.O_CREAT`` ...; the rule's flags are added.
    any_owner : bool
        Accept a file of another user (a lock file in a shared folder: only locked, its content never trusted). By
        default the file must be yours or root's.
    dir_fd : int, optional
        ``path`` is a name in this open folder (:func:`open_folder`).
    shown : str, optional
        The file's name in messages (default ``path``)."""
    shown = printable(path if shown is None else shown)
    try:
        fd = os.open(path, flags | OPEN_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a link
            raise Untrusted(f"{shown}: refusing {what} that is a symlink") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with nobody reading
            raise Untrusted(f"{shown}: refusing {what} that is a FIFO") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{shown}: refusing {what} that is {_kind(st.st_mode)}")
        if not any_owner and st.st_uid not in _owners():
            raise Untrusted(f"{shown}: refusing {what} of uid {st.st_uid}, not yours (uid {os.geteuid()}) "
                            f"or root's")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path, limit, *, what="a file"):
    """The bytes of regular file ``path`` (at most ``limit``), read under the rule (:func:`open_regular`)."""
    fd = open_regular(path, what=what)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def read_code(path, limit, *, what="code to run"):
    """The source (at most ``limit`` bytes) of the file of code ``path`` that gpumr is to run, read under the rule.
    Raises ``Untrusted`` naming the file or its folder and the reason, a file over ``limit`` bytes included;
    ``FileNotFoundError`` for a missing file.

    Examples
    --------
    >>> folder = private_temp_dir("gpumr-example-")
    >>> with open(os.path.join(folder, "mine.py"), "w") as f:
    ...     _ = f.write("X = 1\\n")
    >>> read_code(os.path.join(folder, "mine.py"), 1 << 20)
    b'X = 1\\n'
    """
    folder, name = os.path.split(os.path.abspath(path))
    shown = printable(folder)
    try:
        if stat.S_ISLNK(os.lstat(folder).st_mode):
            raise Untrusted(f"{shown}: refusing it for {what}: it is a symlink (name the folder it points to)")
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(exc.errno, exc.strerror, path) from None
        raise Untrusted(f"{shown}: cannot use it for {what} ({exc.strerror})") from None
    try:
        _judge_folder(os.fstat(fd), shown, what, shared=True)
        data = read_at(fd, name, limit + 1, what=what, shown=path)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Untrusted(f"{printable(path)}: refusing {what} of over {limit} bytes")
    return data


def private_temp_dir(prefix="gpumr-"):
    """A new folder of this process alone (``mkdtemp``: mode 0700), removed when the process exits.

    Examples
    --------
    >>> path = private_temp_dir("gpumr-example-")
    >>> os.path.isdir(path), oct(os.stat(path).st_mode & 0o777)
    (True, '0o700')
    """
    from multiprocessing.util import Finalize
    path = tempfile.mkdtemp(prefix=prefix)
    Finalize(None, shutil.rmtree, args=(path, True), exitpriority=0)
    return path


def usable_folder(path, what, *, shared=False, instead=private_temp_dir):
    """``path`` to keep state in (made if missing), or, where the rule refuses it, a private temporary folder."""
    try:
        ensure_folder(path, what, shared=shared)
        if not os.access(path, os.W_OK | os.X_OK):
            raise Untrusted(f"{printable(path)}: cannot use it for {what}: you may not write in it (read-only)")
    except (Untrusted, OSError) as exc:
        reason = str(exc) if isinstance(exc, Untrusted) else \
            f"{printable(path)}: cannot use it for {what} ({exc.strerror or exc})"
        private = instead()
        warn_once(f"{reason}; using a private temporary folder of each process instead, removed at its exit")
        return private
    return path
