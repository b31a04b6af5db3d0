"""Writing records as files named by their keys, inside one folder and nowhere else.

``gpumr unpack`` writes record ``key`` to ``DIR/key``. Keys come from files
that anyone may have written, so each is checked before anything is made:
it must be a relative ``/``-separated path of ordinary names (no empty,
``.`` or ``..`` part, no NUL byte, each name within the file system's limit,
at most :data:`MAX_DEPTH` folders deep). Folders and files are then made
one name at a time relative to an open descriptor of the folder above
(``dir_fd``), never following a symbolic link (``O_NOFOLLOW``): a link
inside DIR, planted before or during the run, is refused, not written
through. Each file is written atomically (:class:`seqfile.atomic.AtomicFile`).
"""

import errno
import os
import stat

from seqfile.atomic import AtomicFile

from ..errors import GpumrError, printable
from .inputs import kind

#: The most folders a key may name before its file (deeper keys are refused).
MAX_DEPTH = 255

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class KeyRefused(GpumrError):
    """One record's key cannot be written as a file (the message names the key)."""


class KeyFiles:
    """Writes ``(key, bytes)`` records as files under ``directory``.

    Parameters
    ----------
    directory : str
        The folder written into (made if missing). It may itself be a
        symbolic link (the user named it); nothing inside it is followed.
    force : bool
        Replace existing regular files (never anything else); without it an
        existing file is a refused key.

    Use as a context manager; :meth:`write` raises :class:`KeyRefused` for a
    key that is not written, after which further keys may still be written.
    """

    def __init__(self, directory, force=False):
        self.directory = os.fspath(directory)
        self.force = force
        self._seen = set()
        os.makedirs(self.directory, exist_ok=True)
        self._root = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            self._name_max = os.fpathconf(self._root, "PC_NAME_MAX")
        except (OSError, ValueError):
            self._name_max = 255

    def close(self):
        """Close the folder's descriptor."""
        if self._root is not None:
            os.close(self._root)
            self._root = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _refuse(self, key, why):
        return KeyRefused(f"refusing key '{printable(key)}': {why}")

    def check(self, key):
        """The key's names (folders, then the file's), or :class:`KeyRefused` saying what is wrong."""
        if not isinstance(key, str):
            raise self._refuse(key if isinstance(key, bytes) else repr(key), "keys must be Text (UTF-8 file names)")
        if not key:
            raise self._refuse(key, "it is empty")
        if "\0" in key:
            raise self._refuse(key, "it holds a NUL byte, which no file name may hold")
        if key.startswith("/"):
            raise self._refuse(key, f"it is absolute; keys are paths inside {printable(self.directory)}")
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise self._refuse(key, f"it has an empty, '.' or '..' part, or climbs out of {printable(self.directory)}")
        if len(parts) - 1 > MAX_DEPTH:
            raise self._refuse(key, f"it is {len(parts) - 1} folders deep; the limit is {MAX_DEPTH}")
        for p in parts:
            if len(os.fsencode(p)) > self._name_max:
                raise self._refuse(key, f"the name {printable(p[:40])}... is {len(os.fsencode(p))} bytes long; "
                                        f"the file system allows {self._name_max}")
        return parts

    def write(self, key, data):
        """Write ``data`` to ``directory/key`` atomically; :class:`KeyRefused` if the key is refused."""
        parts = self.check(key)
        if key in self._seen:
            raise self._refuse(key, "a duplicate: an earlier record has this key (the first one was kept)")
        fd = self._root
        try:
            for i, name in enumerate(parts[:-1]):
                child = self._enter(fd, name, key, parts[:i + 1])
                if fd != self._root:
                    os.close(fd)
                fd = child
            self._write_file(fd, parts[-1], data, key)
        finally:
            if fd != self._root:
                os.close(fd)
        self._seen.add(key)

    def _enter(self, parent, name, key, where):
        """Open folder ``name`` in ``parent`` (made if missing), never through a link."""
        try:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                pass
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    try:
                        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                    except OSError:
                        mode = 0
                    what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
                    raise self._refuse(key, f"'{printable('/'.join(where))}' in {printable(self.directory)} is {what} "
                                            "(unpack never writes through links, nor makes a file and a folder "
                                            "of one name)") from None
                raise self._refuse(key, f"cannot open folder '{printable('/'.join(where))}': {exc.strerror}") from None
        except OSError as exc:
            raise self._refuse(key, f"cannot make folder '{printable('/'.join(where))}': {exc.strerror}") from None

    def _write_file(self, folder, name, data, key):
        try:
            existing = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            existing = None
        except OSError as exc:
            raise self._refuse(key, f"cannot look at the existing file: {exc.strerror}") from None
        if existing is not None:
            if not stat.S_ISREG(existing):
                raise self._refuse(key, f"it exists in {printable(self.directory)} as "
                                        f"{kind(existing)}; unpack replaces only regular files")
            if not self.force:
                raise self._refuse(key, f"it exists in {printable(self.directory)} "
                                        "(use --force to replace existing files)")
        try:
            with AtomicFile(name, dir_fd=folder, replace=self.force) as f:
                f.write(data)
        except FileExistsError:
            raise self._refuse(key, f"it appeared in {printable(self.directory)} meanwhile; "
                                    "not replaced") from None
        except IsADirectoryError:
            raise self._refuse(key, f"it is a folder in {printable(self.directory)}") from None
        except OSError as exc:
            raise self._refuse(key, f"cannot write it: {exc.strerror}") from None


__all__ = ["KeyFiles", "KeyRefused", "MAX_DEPTH"]
