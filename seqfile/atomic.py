"""Atomic file writes: the one helper every writer of this project uses.

A file is written under a hidden temporary name in its own folder, flushed
to disk (``fsync``) and renamed over its final name, so a reader sees the
old file or the whole new one, never a part. On any failure (an exception,
Ctrl-C) the temporary file is removed and the final name is untouched.

The temporary file is created with ``O_EXCL`` and mode ``0o666``, which the
kernel narrows by the process's umask, as for any new file; the umask is
never read or changed (changing it is process-wide and not thread-safe).
gpumr uses this module too: it lives here because ``seqfile`` imports
nothing from gpumr.
"""

import contextlib
import errno
import os
import secrets

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def temp_name(name):
    """A fresh hidden name for a temporary twin of ``name``, short enough for any file system.

    At most 40 bytes of ``name`` are kept, so that a name near the 255-byte
    limit still has a temporary twin.
    """
    stem = os.fsdecode(os.fsencode(name)[:40])
    return f".{stem}.{secrets.token_hex(4)}.tmp"


def _temp_beside(path, mode=0o666, dir_fd=None):
    """Create an empty hidden file beside ``path``; return ``(fd, temp path)``.

    With ``dir_fd``, ``path`` is a plain name in that open folder and the
    temporary path returned is a plain name there too.
    """
    if dir_fd is None:
        folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    else:
        folder, name = "", os.fspath(path)
    while True:
        tmp = os.path.join(folder, temp_name(name))
        try:
            return os.open(tmp, _FLAGS, mode, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue


def temp_dir_beside(path):
    """Create an empty hidden folder beside ``path`` (mode 0o777 less the umask); return its path.

    For outputs made of several files: fill it, then rename it to ``path``.
    """
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    while True:
        tmp = os.path.join(folder, temp_name(name))
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:
            continue


def swap_into_place(stage, path):
    """Rename the finished folder ``stage`` to ``path``; return where an old ``path`` went, or None.

    An existing ``path`` is first renamed to a hidden name beside it (returned),
    so that ``path`` always names a whole output: the old one until the new
    one is in place. Removing the old one is the caller's business, done only
    once the new one is in place, and only for what the caller made. If the
    second rename fails, the old output is put back.
    """
    path = os.fspath(path)
    old = None
    if os.path.lexists(path):
        folder, name = os.path.split(os.path.abspath(path))
        while True:
            old = os.path.join(folder, temp_name(name)[:-4] + ".old")
            if not os.path.lexists(old):
                break
        os.rename(path, old)
    try:
        os.rename(stage, path)
    except BaseException:
        if old is not None:
            os.rename(old, path)
        raise
    _sync_folder(os.path.dirname(os.path.abspath(path)))
    return old


def _sync_folder(folder, dir_fd=None):
    if dir_fd is not None:
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _discard(tmp, dir_fd=None):
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _link_no_replace(tmp, path, dir_fd):
    """Give ``tmp`` the name ``path`` unless that exists (FileExistsError); ``tmp`` is gone after."""
    try:
        # A hard link never replaces an existing name (a rename would).
        os.link(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        # A file system without hard links: check, then rename (not atomic against a racing writer).
        try:
            os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
    _discard(tmp, dir_fd)


class AtomicFile:
    """A binary file that appears at ``path`` only when :meth:`commit` succeeds.

    Parameters
    ----------
    path : str or os.PathLike
        The final name (replaced if it exists, unless ``replace`` is false).
    buffering : int
        Buffer size of :attr:`file`.
    dir_fd : int, optional
        An open folder; ``path`` is then a plain name in it, and nothing is
        looked up by path (no symbolic link on the way is followed).
    replace : bool
        If false, :meth:`commit` never replaces an existing ``path``: it
        raises :class:`FileExistsError` (and removes the temporary file).

    Attributes
    ----------
    file : io.BufferedWriter
        Write the contents here.
    tmp : str
        The temporary file's path.

    Use it as a context manager (commit on success, abort on error) or call
    :meth:`commit` / :meth:`abort` yourself.
    """

    def __init__(self, path, buffering=1 << 20, dir_fd=None, replace=True):
        self.path = os.fspath(path)
        self.dir_fd = dir_fd
        self.replace = replace
        fd, self.tmp = _temp_beside(self.path, dir_fd=dir_fd)
        try:
            # The descriptor made with O_EXCL, under the temporary file's name (some writers ask for it).
            self.file = open(self.tmp, "wb", buffering=buffering, opener=lambda path, flags: fd)
        except BaseException:
            os.close(fd)
            _discard(self.tmp, dir_fd)
            raise

    def commit(self):
        """Flush, sync and rename into place; removes the temporary file if that fails."""
        if self.file is None:
            return
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
            fds = dict(src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            if self.replace:
                os.replace(self.tmp, self.path, **fds)
            else:
                _link_no_replace(self.tmp, self.path, self.dir_fd)
        except BaseException:
            self.abort()
            raise
        _sync_folder(os.path.dirname(os.path.abspath(self.path)), self.dir_fd)

    def abort(self):
        """Drop the unfinished file (idempotent)."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None
        _discard(self.tmp, self.dir_fd)

    def __enter__(self):
        return self.file

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def write_bytes(path, data):
    """Write ``data`` to ``path`` atomically."""
    with AtomicFile(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` for a program that writes a file by name.

    Yields the temporary path (an empty file exists there); on leaving the
    block without an error it is synced and renamed to ``path``, otherwise
    removed.
    """
    fd, tmp = _temp_beside(path)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.fspath(path))
    except BaseException:
        _discard(tmp)
        raise
    _sync_folder(os.path.dirname(os.path.abspath(os.fspath(path))))
