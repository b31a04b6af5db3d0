"""Writing SequenceFiles that Hadoop's ``SequenceFile.Reader`` reads."""

import errno
import os
import struct

from . import codecs
from .atomic import AtomicFile
from .errors import SequenceFileError
from .header import BLOCK, NONE, RECORD, SYNC_INTERVAL, Header
from .writable import BYTES, TEXT, encode, encode_vlong

_INT32 = struct.Struct(">i")
_TWO_INT32 = struct.Struct(">ii")
_ESCAPE = _INT32.pack(-1)
#: Hadoop's default ``io.seqfile.compress.blocksize``.
BLOCK_SIZE = 1_000_000

#: Values at least this large are written to the file directly, past the writer's buffer.
_DIRECT = 1 << 16
#: ``os.sendfile`` errors that mean "not between these files": the value is then read and written instead.
_NO_SENDFILE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ESPIPE, errno.EXDEV}


def _write_all(fd, buffers):
    """Write ``buffers`` (bytes-like) to ``fd`` in order, in as few system calls as the kernel takes them."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        n = os.writev(fd, views) if len(views) > 1 else os.write(fd, views[0])
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


class Writer:
    """Write key/value records to a new SequenceFile, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Where the finished file goes (replaced if it exists).
    key_class, value_class : str
        Java class names; ``Text`` keys and ``BytesWritable`` values by default.
    compression : {"NONE", "RECORD", "BLOCK"}
    codec : str, optional
        Short name (``default``, ``gzip``, ``bzip2``, ``snappy``, ``lz4``, ``zstd``) or Hadoop class name; ``default``
        (zlib) when compressing.
    metadata : dict of str to str, optional
    sync_interval : int
        Bytes between sync markers in files without block compression.
    block_size : int
        Raw key+value bytes per block with block compression.
    sync : bytes, optional
        The 16-byte sync marker; random by default, as in Hadoop.
    out : seqfile.atomic.AtomicFile, optional
        Write through this (anything with ``file``, ``commit()`` and ``abort()``) instead of a new
        ``AtomicFile(path)``; its ``commit`` decides what becomes of an existing file at ``path``. The writer owns it:
        it is aborted if the writer fails, from its first line on.

    Examples
    --------
    >>> import os, tempfile
    >>> from seqfile import Reader
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "frames.seq")
    >>> with Writer(path) as w:
    ...     w.append("a.jpg", b"one")
    ...     w.append("b.jpg", b"two")
    >>> [(r.key, r.value) for r in Reader(path)]
    [('a.jpg', b'one'), ('b.jpg', b'two')]
    >>> folder.cleanup()
    """

    def __init__(self, path, key_class=TEXT, value_class=BYTES, compression=NONE,
                 codec=None, metadata=None, sync_interval=SYNC_INTERVAL,
                 block_size=BLOCK_SIZE, sync=None, out=None):
        self.path = os.fspath(path)
        self._out = out  # the writer owns it from here: aborted if anything below fails
        try:
            compression = compression.upper()
            if compression not in (NONE, RECORD, BLOCK):
                raise ValueError(f"compression must be NONE, RECORD or BLOCK, not {compression!r}")
            if compression != NONE:
                codec = codecs.resolve(codec or "default")
                codecs.check_available(codec)
            else:
                codec = None
            self.header = Header(key_class, value_class, compression, codec, dict(metadata or {}))
            if sync is not None:
                self.header.sync = bytes(sync)
            self.sync_interval = sync_interval
            self.block_size = block_size
            self.records = 0
            if self._out is None:
                self._out = AtomicFile(self.path)
            self._f = self._out.file
            head = self.header.to_bytes()
            self.header.size = len(head)
            self._f.write(head)
            self._dirty = True  # bytes in the buffer (a direct write flushes them first)
            self._fd = False  # the file's descriptor, once asked for (None: it has none)
        except BaseException as exc:
            if self._out is not None:
                self._out.abort()
            if isinstance(exc, OSError):
                raise SequenceFileError(self.path, None, f"cannot write: {exc.strerror or exc}") from None
            raise
        self._pos = len(head)
        self._last_sync = 0
        self._block = [bytearray(), bytearray(), bytearray(), []]  # key lens, keys, value lens, values
        self._block_raw = 0
        self._block_count = 0

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def append(self, key, value):
        """Append one record. Raises ``ValueError`` if the writer is closed.

        Parameters
        ----------
        key, value : object
            As :func:`seqfile.writable.encode` takes them for the header's key and value classes (``str`` for
            ``Text``, bytes-like for ``BytesWritable``)."""
        hdr = self.header
        if hdr.value_class == BYTES and hdr.compression == NONE:
            self._append_bytes_value(encode(hdr.key_class, key), value)
        else:
            self.append_serialized(encode(hdr.key_class, key), encode(hdr.value_class, value))

    def _append_bytes_value(self, key, value):
        """The common case without copying the value: Text key, BytesWritable value."""
        n = len(value)
        head = self._sync_due() + _TWO_INT32.pack(len(key) + 4 + n, len(key)) + key + _INT32.pack(n)
        fd = self._direct_fd() if n >= _DIRECT else None
        if fd is not None:
            # a large value goes straight to the file with its record's head (and a sync entry due before it),
            # in one system call, not copied through the writer's buffer first
            _write_all(fd, [head, memoryview(value).cast("B")])
        else:
            self._buffered(head)
            self._buffered(value)
        self._pos += 12 + len(key) + n
        self.records += 1

    def _buffered(self, data):
        self._f.write(data)
        self._dirty = True

    def _direct_fd(self):
        """The file's descriptor, the writer's buffer flushed if it holds anything, where it has one (else None)."""
        if self._fd is False:
            raw = getattr(self._f, "raw", None)
            try:
                self._fd = raw.fileno() if raw is not None else None
            except (AttributeError, OSError, ValueError):
                self._fd = None
        if self._fd is not None and self._dirty:
            self._f.flush()
            self._dirty = False
        return self._fd

    def append_file(self, key, fd, size):
        """Append one record whose value is the whole of the open regular file ``fd``, ``size`` bytes, copied by the
        kernel (``os.sendfile``: the bytes never pass through Python); Text keys and BytesWritable values without
        compression, values of at least 64 KiB, only.

        Returns
        -------
        bool
            Whether the record was appended."""
        if self._f is None:
            raise ValueError("writer is closed")
        hdr = self.header
        if hdr.value_class != BYTES or hdr.compression != NONE or size < _DIRECT or not hasattr(os, "sendfile"):
            return False
        out = self._direct_fd()
        if out is None:
            return False
        key = encode(hdr.key_class, key)
        pos, last_sync = self._pos, self._last_sync
        head = self._sync_due() + _TWO_INT32.pack(len(key) + 4 + size, len(key)) + key + _INT32.pack(size)
        written = at = 0
        try:
            written = os.write(out, head)
            if written < len(head):
                _write_all(out, [head[written:]])
                written = len(head)
            while at < size:
                sent = os.sendfile(out, fd, at, size - at)
                if not sent:
                    break
                at += sent
            whole = at == size and not os.pread(fd, 1, size)
        except OSError as exc:
            if exc.errno not in _NO_SENDFILE:
                raise
            whole = False
        if not whole:  # the record (and its sync entry) taken back: the caller appends what it reads
            start = os.lseek(out, 0, os.SEEK_CUR) - written - at
            os.ftruncate(out, start)
            os.lseek(out, start, os.SEEK_SET)
            self._pos, self._last_sync = pos, last_sync
            return False
        self._pos += 12 + len(key) + size
        self.records += 1
        return True

    def append_serialized(self, key, value):
        """Append a record from its already-serialized key and value fields. Raises ``ValueError`` if the writer is
        closed.

        Parameters
        ----------
        key, value : bytes-like
            The fields as Hadoop serializes the header's classes (what :func:`seqfile.writable.encode` returns)."""
        if self._f is None:
            raise ValueError("writer is closed")
        if self.header.compression == BLOCK:
            kl, ks, vl, vs = self._block
            kl += encode_vlong(len(key))
            ks += key
            vl += encode_vlong(len(value))
            vs.append(bytes(value))
            self._block_count += 1
            self._block_raw += len(value)
            self.records += 1
            if len(ks) + self._block_raw >= self.block_size:
                self._flush_block()
            return
        if self.header.compression == RECORD:
            value = codecs.compress(self.header.codec, value)
        self._buffered(self._sync_due() + _TWO_INT32.pack(len(key) + len(value), len(key)) + key)
        self._buffered(value)
        self._pos += 8 + len(key) + len(value)
        self.records += 1

    def _sync_due(self):
        """The sync entry due before the next record (counted as written), or nothing."""
        if self._pos >= self._last_sync + self.sync_interval:
            return self._sync_entry()
        return b""

    def _sync_entry(self):
        if self._pos == self._last_sync:
            return b""
        self._pos += 20
        self._last_sync = self._pos
        return _ESCAPE + self.header.sync

    def _flush_block(self):
        if not self._block_count:
            return
        self._buffered(self._sync_entry())
        kl, ks, vl, vs = self._block
        codec = self.header.codec
        parts = [encode_vlong(self._block_count)]
        for raw in (kl, ks, vl, b"".join(vs)):
            packed = codecs.compress(codec, bytes(raw))
            parts += [encode_vlong(len(packed)), packed]
        data = b"".join(parts)
        self._buffered(data)
        self._pos += len(data)
        self._block = [bytearray(), bytearray(), bytearray(), []]
        self._block_raw = 0
        self._block_count = 0

    def close(self):
        """Finish the file and move it into place."""
        if self._f is None:
            return
        try:
            self._flush_block()
            self._f = None
            self._out.commit()
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise SequenceFileError(self.path, None, f"cannot write: {exc.strerror or exc}") from None
            raise

    def abort(self):
        """Drop the unfinished file."""
        self._f = None
        self._out.abort()
