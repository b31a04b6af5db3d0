"""What every backend of the filesystem layer shares: the errors it raises, how it names a path, which files Hadoop
hides, a remote file's checked reads, and the interface a backend implements (:class:`Backend`)."""

import contextlib
import io
import os
import stat as _stat
from typing import Protocol

from ...errors import GpumrError, printable, redact

HDFS_SCHEMES = ("hdfs", "viewfs")
#: Bytes fetched per ranged read of a remote file (the read buffer): large enough that S3's
#: per-request latency is a small part of the time, small enough to hold per task.
READ_BUFFER = 4 << 20
#: The largest object S3 copies in one request (CopyObject); publishing is a copy there.
S3_COPY_LIMIT = 5 << 30
#: Flags to open a local input for reading: never through a symbolic link, never blocking on a FIFO.
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Backend(Protocol):
    """What a backend serves for a :class:`~gpumr.io.remote.location.Location` ``loc`` (each method takes one)."""

    publish_mode: str

    def stat(self, loc): ...

    def exists(self, loc): ...

    def list_files(self, loc): ...

    def entries(self, loc): ...


def kind(mode):
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", "a folder", ...)."""
    for test, words in ((_stat.S_ISREG, "a regular file"), (_stat.S_ISDIR, "a folder"),
                        (_stat.S_ISLNK, "a symbolic link"), (_stat.S_ISFIFO, "a FIFO (named pipe)"), (_stat.S_ISSOCK, "a socket"),
                        (_stat.S_ISCHR, "a character device"), (_stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


class Unavailable(GpumrError):
    """pyarrow cannot serve a URI from here; the message says why, without the URI (``hadoop fs`` may still)."""


class ReadFailed(GpumrError):
    """A read of a file failed part-way (it changed, shrank or went away while it was read).

    Attributes
    ----------
    offset : int
        Where in the file the failed read began."""

    def __init__(self, message, offset):
        super().__init__(message)
        self.offset = offset


def shown(text):
    """``text`` (a path, a URI or a :class:`~gpumr.io.remote.location.Location`) as every message shows it: user-info
    hidden, on one line.

    Examples
    --------
    >>> shown("s3://key:secret@bucket/x")
    's3://***@bucket/x'
    """
    return printable(redact(getattr(text, "text", None) or os.fspath(text)))


def first_line(exc):
    """The first line of an exception's message (its type's name if it has none), redacted."""
    text = str(exc).strip() or type(exc).__name__
    return redact(text.splitlines()[0])


def hidden(name):
    """Whether a file name is one Hadoop's input formats pass over (``_SUCCESS``, ``.crc``, temporaries)."""
    return name.startswith((".", "_"))


@contextlib.contextmanager
def errors(loc):
    """Turn the filesystem's errors about ``loc`` into one-line :class:`GpumrError`\\ s naming it (redacted)."""
    try:
        yield
    except GpumrError:
        raise
    except FileNotFoundError:
        raise GpumrError(f"{shown(loc)}: no such file or directory") from None
    except (OSError, ValueError) as exc:  # (pyarrow's ArrowInvalid is a ValueError)
        raise GpumrError(f"{shown(loc)}: {getattr(exc, 'strerror', None) or first_line(exc)}") from None


class Checked(io.RawIOBase):
    """A remote file's reads with their failures typed: :class:`ReadFailed` naming the file and the offset."""

    def __init__(self, raw, loc, size):
        self._raw, self._loc, self._size, self._pos = raw, loc, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, pos, whence=os.SEEK_SET):
        self._pos = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence] + pos
        return self._pos

    def tell(self):
        return self._pos

    def readinto(self, b):
        n = min(len(b), max(self._size - self._pos, 0))
        if n == 0:
            return 0
        try:
            data = self._raw.read_at(n, self._pos)
        except (OSError, ValueError) as exc:
            raise self._failed(n, first_line(exc)) from None
        if len(data) != n:
            raise self._failed(n, f"{len(data)} bytes came")
        b[:n] = data
        self._pos += n
        return n

    def _failed(self, n, why):
        try:
            now = self._loc.stat()[1]
        except GpumrError:
            now = None
        change = (f"it is {now} bytes now, {self._size} when opened" if now is not None and now != self._size
                  else "it changed or went away while it was read")
        return ReadFailed(f"{shown(self._loc)}: reading bytes {self._pos}..{self._pos + n} failed ({change}; {why})",
                          self._pos)

    def close(self):
        try:
            self._raw.close()
        finally:
            super().close()
