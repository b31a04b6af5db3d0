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
import os
import secrets

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _temp_beside(path, mode=0o666):
    """Create an empty hidden file beside ``path``; return ``(fd, temp path)``."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, _FLAGS, mode), tmp
        except FileExistsError:
            continue


def temp_dir_beside(path):
    """Create an empty hidden folder beside ``path`` (mode 0o777 less the umask); return its path.

    For outputs made of several files: fill it, then rename it to ``path``.
    """
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:
            continue


def _sync_folder(folder):
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


def _discard(tmp):
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


class AtomicFile:
    """A binary file that appears at ``path`` only when :meth:`commit` succeeds.

    Parameters
    ----------
    path : str or os.PathLike
        The final name (replaced if it exists).
    buffering : int
        Buffer size of :attr:`file`.

    Attributes
    ----------
    file : io.BufferedWriter
        Write the contents here.
    tmp : str
        The temporary file's path.

    Use it as a context manager (commit on success, abort on error) or call
    :meth:`commit` / :meth:`abort` yourself.
    """

    def __init__(self, path, buffering=1 << 20):
        self.path = os.fspath(path)
        fd, self.tmp = _temp_beside(self.path)
        try:
            # The descriptor made with O_EXCL, under the temporary file's name (some writers ask for it).
            self.file = open(self.tmp, "wb", buffering=buffering, opener=lambda path, flags: fd)
        except BaseException:
            os.close(fd)
            _discard(self.tmp)
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
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        _sync_folder(os.path.dirname(os.path.abspath(self.path)))

    def abort(self):
        """Drop the unfinished file (idempotent)."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None
        _discard(self.tmp)

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
