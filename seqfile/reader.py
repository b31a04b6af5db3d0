"""Reading SequenceFiles, whole or by split, with Hadoop's semantics."""

import functools
import os
import stat
import struct
from collections import namedtuple

from . import codecs
from .errors import RecordError, SequenceFileError
from .header import BLOCK, NONE, RECORD, SYNC_SIZE, read_header
from .writable import BYTES, TEXT, decode, decode_vlong, vlong_size

Record = namedtuple("Record", "key value offset")
Record.__doc__ = """One key/value pair and the byte offset where it (or its block) starts."""

#: Largest decompressed buffer or record accepted (Java arrays are int-indexed).
MAX_BUFFER = (1 << 31) - 1
#: Default cap on one record, and on one block's decompressed data: 256 MiB.
DEFAULT_MAX_RECORD_SIZE = 256 << 20
#: A block may hold at most ``max_record_size // _BYTES_PER_BLOCK_RECORD``
#: records (4 Mi at the default cap): indexing each costs memory.
_BYTES_PER_BLOCK_RECORD = 64
_INT32 = struct.Struct(">i")
_TWO_INT32 = struct.Struct(">ii")
_ESCAPE = b"\xff\xff\xff\xff"
#: Bytes read ahead for a sync entry, record lengths, a short key and the value length.
_PEEK = 20 + 8 + 128 + 4
_STOP = object()
_SCAN_CHUNK = 1 << 20


class Reader:
    """Iterate over the records of a SequenceFile, or of one split of it. Raises ``SequenceFileError`` for a path that
    is not a regular file (a FIFO, a pipe, a device: they are refused rather than read), an empty file, a malformed
    header, or (without ``on_error``) a malformed or oversized record.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
        The file to read: a path, or an open binary file that can ``seek`` and ``read`` (e.g. a byte-range reader of a
        remote object). A file object given is not closed by the reader.
    start, end : int, optional
        The split's byte range ``[start, end)``; the whole file by default.
    raw : bool
        If True, keys and values are the serialized Writable bytes; otherwise ``Text`` gives ``str``,
        ``BytesWritable`` ``bytes``, ``IntWritable`` / ``LongWritable`` ``int``, ``NullWritable`` ``None`` and other
        classes their serialized bytes.
    on_error : callable, optional
        Called with each error met after the header, instead of raising it; nothing is skipped without a call. A
        :class:`RecordError` (a record whose framing is intact but whose key or value cannot be read, or is over the
        cap) affects that record only: reading goes on with the next one. Any other :class:`SequenceFileError` means
        broken framing: reading resumes at the next sync marker, and the error's ``lost`` attribute is the byte range
        ``[start, end)`` skipped. Header errors always raise.
    max_record_size : int, optional
        The size cap, in bytes: a record (key and value, decompressed) or a block's decompressed data larger than this
        is refused (as a :class:`RecordError` where framing is intact) before it is read or while it is decompressed.
        256 MiB by default.
    values : bool
        If False, values are not read or kept: each record's ``value`` is the size in bytes of its value (a
        BytesWritable's payload, otherwise the serialized field), found by seeking past uncompressed and
        block-compressed values; record-compressed ones are decompressed a piece at a time (within the cap) to measure
        them, never kept whole. For listings.
    name : str, optional
        How errors name the file (default: ``path``, or the file object's ``name``).

    Attributes
    ----------
    header : seqfile.header.Header
    file_size : int

    Examples
    --------
    >>> import os, tempfile
    >>> from seqfile import Writer
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "frames.seq")
    >>> with Writer(path) as w:
    ...     w.append("a.jpg", b"one")
    >>> with Reader(path, values=False) as reader:  # a listing: each value's size, not its bytes
    ...     reader.header.key_class, list(reader)
    ('org.apache.hadoop.io.Text', [Record(key='a.jpg', value=3, offset=87)])
    >>> folder.cleanup()
    """

    def __init__(self, path, start=0, end=None, raw=False, on_error=None,
                 max_record_size=DEFAULT_MAX_RECORD_SIZE, values=True, name=None):
        given = hasattr(path, "read")
        self.path = name if name is not None else str(getattr(path, "name", "<file>")) if given else os.fspath(path)
        if max_record_size is None:
            max_record_size = DEFAULT_MAX_RECORD_SIZE
        if not 0 < max_record_size <= MAX_BUFFER:
            raise ValueError(f"max_record_size must be in 1..{MAX_BUFFER}, not {max_record_size}")
        self.max_record_size = max_record_size
        self.values = values
        self._owned = not given
        self._f = path if given else _open_regular(os.fspath(path))
        try:
            if given:
                self.file_size = self._f.seek(0, os.SEEK_END)
                self._f.seek(0)
                self._pread = functools.partial(_seek_read, self._f)
            else:
                self.file_size = os.fstat(self._f.fileno()).st_size
                self._pread = functools.partial(os.pread, self._f.fileno())
            if self.file_size == 0:
                raise SequenceFileError(self.path, None, "empty file, not a SequenceFile")
            self.header = read_header(self._f, self.path)
        except BaseException:
            self.close()
            raise
        self.raw = raw
        self.on_error = on_error
        self.start = start
        self.end = self.file_size if end is None else end
        self._sync = self.header.sync
        self._codec = self.header.codec
        self._bytes_values = (not raw and self.header.compression == NONE
                              and self.header.value_class == BYTES)

    # -- context manager -------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the underlying file, if the reader opened it."""
        if self._owned:
            self._f.close()

    # -- positioning -----------------------------------------------------
    def sync_position(self, position):
        """Where Hadoop's ``Reader.sync(position)`` lands: the offset of the first sync escape at or after byte
        ``position`` whose 16-byte marker is followed by at least one more byte of the file, or the file size when
        there is none."""
        position = max(position, self.header.size)
        f = self._f
        scan = position + 4
        while scan + SYNC_SIZE < self.file_size:
            f.seek(scan)
            chunk = f.read(_SCAN_CHUNK + SYNC_SIZE - 1)
            i = chunk.find(self._sync)
            if i >= 0:
                marker = scan + i
                return marker - 4 if marker + SYNC_SIZE < self.file_size else self.file_size
            scan += _SCAN_CHUNK
        return self.file_size

    def _first_position(self):
        hsize = self.header.size
        return self.sync_position(self.start) if self.start > hsize else hsize

    # -- iteration -------------------------------------------------------
    def __iter__(self):
        pos = self._first_position()
        if pos >= self.end:
            return
        if self.header.compression == BLOCK:
            yield from self._blocks(pos)
        else:
            yield from self._records(pos)

    def _fail(self, offset, message):
        raise SequenceFileError(self.path, offset, message)

    def _read(self, n, offset, what):
        data = self._f.read(n)
        if len(data) != n:
            self._fail(offset, f"file ends inside {what} ({len(data)} of {n} bytes)")
        return data

    def _check_sync(self, offset):
        marker = self._read(SYNC_SIZE, offset, "a sync marker")
        if marker != self._sync:
            self._fail(offset, "sync marker does not match the header's")

    def _skip(self, exc, gave_up):
        """After broken framing at ``gave_up``: report ``exc`` and return where reading resumes."""
        if self.on_error is None:
            raise exc
        resume = self.sync_position(gave_up + 1)
        exc.lost = (gave_up, resume)
        self.on_error(exc)
        return resume

    def _records(self, pos):
        """Records of a file without block compression, from ``pos``."""
        f, size, end, read = self._f, self.file_size, self.end, self._f.read
        fast = self._bytes_values and self.header.key_class == TEXT and self.values
        pread, sync = self._pread, self._sync
        while pos < size:
            rec_pos = pos
            if fast:
                peeked = self._peek(pread, pos, sync, size)
                if peeked is not None:
                    if peeked is _STOP:
                        return
                    record, pos = peeked
                    yield record
                    continue
            f.seek(pos)
            try:
                head = read(8)
                if head[:4] == _ESCAPE:
                    marker = head[4:] + read(SYNC_SIZE - 4)
                    if len(marker) != SYNC_SIZE:
                        self._fail(pos + 4, "file ends inside a sync marker")
                    if marker != sync:
                        self._fail(pos + 4, "sync marker does not match the header's")
                    pos += 4 + SYNC_SIZE
                    if rec_pos >= end or pos >= size:
                        return
                    head = read(8)
                if len(head) != 8:
                    self._fail(pos, f"file ends inside a record header ({len(head)} of 8 bytes)")
                length, key_len = _TWO_INT32.unpack(head)
                pos += 8
                if not 0 <= key_len <= length <= size - pos:
                    self._fail(rec_pos, f"record length {length} / key length {key_len} "
                                        f"do not fit the {size - pos} bytes left")
            except SequenceFileError as exc:
                pos = self._skip(exc, rec_pos)
                continue
            body, pos = pos, pos + length  # framing intact: the next record starts there
            try:
                record = self._record_body(rec_pos, body, length, key_len)
            except RecordError as exc:
                if self.on_error is None:
                    raise
                self.on_error(exc)
                continue
            except SequenceFileError as exc:  # the file changed under us
                pos = self._skip(exc, rec_pos)
                continue
            yield record

    def _peek(self, pread, pos, sync, size):
        """The well-formed common record at ``pos``, read with two ``pread`` calls."""
        head = pread(_PEEK, pos)
        at = 0
        if head[:4] == _ESCAPE and head[4:20] == sync:
            if pos >= self.end or pos + 20 >= size:
                return _STOP
            at = 20
        if len(head) < at + 13:
            return None
        length, key_len = _TWO_INT32.unpack_from(head, at)
        key_end = at + 8 + key_len
        if not (0 < key_len < 128 and head[at + 8] == key_len - 1 and key_end + 4 <= len(head)):
            return None
        n = length - key_len - 4
        next_pos = pos + at + 8 + length
        if n < 0 or length > self.max_record_size or _INT32.unpack_from(head, key_end)[0] != n or next_pos > size:
            return None
        value = pread(n, pos + key_end + 4)
        if len(value) != n:
            return None
        try:
            return Record(head[at + 9:key_end].decode("utf-8"), value, pos), next_pos
        except UnicodeDecodeError:
            return None

    def _record_body(self, rec_pos, pos, length, key_len):
        """The record whose lengths were just read; the file is at its key."""
        read, hdr, cap = self._f.read, self.header, self.max_record_size
        if key_len > cap:
            raise RecordError(self.path, rec_pos, f"key of {key_len} bytes is over the size cap of {cap} bytes")
        raw_key = read(key_len)
        if len(raw_key) != key_len:
            self._fail(pos, "file ends inside a key")
        key = self._key(raw_key, rec_pos)
        n = length - key_len
        if self._bytes_values or (hdr.value_class == BYTES and not self.values and hdr.compression == NONE):
            # BytesWritable, uncompressed: its length, then its bytes read straight into one object.
            if n < 4:
                self._bad(rec_pos, raw_key, f"value of {n} bytes cannot hold a BytesWritable")
            (size,) = _INT32.unpack(self._read(4, pos + key_len, "a BytesWritable length"))
            if size != n - 4:
                self._bad(rec_pos, raw_key, f"BytesWritable length {size} does not match the record's "
                                            f"{n - 4} value bytes")
            if not self.values:
                return Record(key, size, rec_pos)
            if length > cap:
                self._bad(rec_pos, raw_key, f"record of {length} bytes is over the size cap of {cap} bytes")
            value = read(size)
            if len(value) != size:
                self._fail(pos + key_len + 4, f"file ends inside a value ({len(value)} of {size} bytes)")
            return Record(key, value, rec_pos)
        if hdr.compression == NONE and not self.values:
            return Record(key, n, rec_pos)
        if length > cap:
            self._bad(rec_pos, raw_key, f"record of {length} bytes is over the size cap of {cap} bytes")
        field = read(n)
        if len(field) != n:
            self._fail(pos + key_len, f"file ends inside a value ({len(field)} of {n} bytes)")
        if hdr.compression == RECORD and not self.values:
            try:
                n = codecs.measure(self._codec, field, cap - key_len)
            except codecs.CodecError as exc:
                self._bad(rec_pos, raw_key, f"value: {exc}")
            return Record(key, n - 4 if hdr.value_class == BYTES and n >= 4 else n, rec_pos)
        if hdr.compression == RECORD:
            split = hdr.value_class == BYTES and self.values and not self.raw
            try:
                field = self._inflate(field, rec_pos, "value", cap - key_len, 4 if split else 0)
            except SequenceFileError as exc:
                raise RecordError(self.path, rec_pos, exc.message, self._key_bytes(raw_key)) from None
            if split:  # BytesWritable: the length prefix came apart from the value, which is not copied
                prefix, value = field
                if len(prefix) != 4 or _INT32.unpack(prefix)[0] != len(value):
                    self._bad(rec_pos, raw_key, f"value ({BYTES.rsplit('.', 1)[-1]}): length prefix "
                                                f"does not match its {len(prefix) + len(value) - 4} bytes")
                return Record(key, value, rec_pos)
        return Record(key, self._value(field, rec_pos, raw_key), rec_pos)

    def _blocks(self, pos):
        """Records of a block-compressed file, block by block, from ``pos``."""
        f, size, end = self._f, self.file_size, self.end
        f.seek(pos)
        while pos < size:
            block_pos = pos
            try:
                (escape,) = _INT32.unpack(self._read(4, pos, "a block's sync escape"))
                if escape != -1:
                    self._fail(pos, f"expected sync escape -1 before a block, found {escape}")
                self._check_sync(pos + 4)
                pos += 4 + SYNC_SIZE
                if block_pos >= end:
                    return
                records, pos = self._block_body(block_pos, pos)
            except SequenceFileError as exc:
                pos = self._skip(exc, block_pos)
                f.seek(pos)
                continue
            for record in records:
                if isinstance(record, RecordError):
                    if self.on_error is None:
                        raise record
                    self.on_error(record)
                else:
                    yield record

    def _read_vint(self, pos, what):
        first = self._read(1, pos, what)
        rest = self._read(vlong_size(first[0]) - 1, pos + 1, what)
        return decode_vlong(first + rest, 0)[0], pos + len(first) + len(rest)

    def _block_body(self, block_pos, pos):
        """Read one block after its sync entry: its records (lazily) and the position after it."""
        cap = self.max_record_size
        count, pos = self._read_vint(pos, "a block's record count")
        if count <= 0:
            self._fail(block_pos, f"block record count {count} is not positive")
        if count > cap // _BYTES_PER_BLOCK_RECORD:
            self._fail(block_pos, f"block claims {count} records, more than the "
                                  f"{cap // _BYTES_PER_BLOCK_RECORD} a block may hold under the "
                                  f"size cap of {cap} bytes")
        buffers, used = [], 0
        for what in ("key lengths", "keys", "value lengths", "values"):
            at = pos
            n, pos = self._read_vint(pos, f"the size of a block's {what}")
            if not 0 <= n <= self.file_size - pos:
                self._fail(at, f"block {what} size {n} runs past the end of the file")
            if what == "values" and not self.values:
                self._f.seek(n, os.SEEK_CUR)
                buffers.append(None)
            else:
                if n > cap - used:
                    self._fail(at, f"block {what} of {n} bytes: the block is over the size cap of {cap} bytes")
                buf = self._inflate(self._read(n, pos, f"a block's {what}"), at, f"block {what}", cap - used)
                used += len(buf)
                buffers.append(buf)
                if what.endswith("lengths") and count > len(buf):
                    self._fail(block_pos, f"block claims {count} records but its {what} hold {len(buf)} bytes")
            pos += n
        key_lens = self._lengths(buffers[0], count, block_pos, "key")
        val_lens = self._lengths(buffers[2], count, block_pos, "value")
        keys = memoryview(buffers[1])
        if sum(key_lens) != len(keys) or (self.values and sum(val_lens) != len(buffers[3])):
            self._fail(block_pos, "block lengths do not add up to its key/value data")
        return self._block_records(keys, buffers[3], key_lens, val_lens, block_pos), pos

    def _block_records(self, keys, vals, key_lens, val_lens, block_pos):
        """Yield each record of a block (or its :class:`RecordError`)."""
        vals = memoryview(vals) if vals is not None else None
        bytes_values = self.header.value_class == BYTES
        ko = vo = 0
        for kl, vl in zip(key_lens, val_lens):
            raw_key = keys[ko:ko + kl]
            try:
                key = self._key(raw_key, block_pos)
                if vals is None:
                    value = vl - 4 if bytes_values and vl >= 4 else vl
                else:
                    value = self._value(vals[vo:vo + vl], block_pos, raw_key)
                yield Record(key, value, block_pos)
            except RecordError as exc:
                yield exc
            ko += kl
            vo += vl

    def _lengths(self, buf, count, block_pos, what):
        lens, p = [], 0
        try:
            for _ in range(count):
                n, p = decode_vlong(buf, p)
                if n < 0:
                    raise ValueError(f"negative {what} length {n}")
                lens.append(n)
        except ValueError as exc:
            self._fail(block_pos, f"block {what} lengths: {exc}")
        if p != len(buf):
            self._fail(block_pos, f"block {what} lengths hold more than {count} entries")
        return lens

    def _inflate(self, data, offset, what, limit, head=0):
        try:
            return codecs.decompress(self._codec, data, limit, head)
        except codecs.CodecError as exc:
            self._fail(offset, f"{what}: {exc}")

    @staticmethod
    def _key_bytes(raw_key):
        """A key's stored bytes, without a Text key's length prefix where it has one."""
        try:
            n, p = decode_vlong(raw_key, 0)
            if 0 <= n and p + n == len(raw_key):
                return bytes(raw_key[p:])
        except ValueError:
            pass
        return bytes(raw_key)

    def _bad(self, offset, raw_key, message):
        raise RecordError(self.path, offset, message, self._key_bytes(raw_key))

    def _key(self, raw_key, offset):
        """Decode a key; a :class:`RecordError` carrying its bytes if it cannot be."""
        if self.raw:
            return bytes(raw_key)
        cls = self.header.key_class
        try:
            return decode(cls, raw_key)
        except (ValueError, UnicodeDecodeError) as exc:
            self._bad(offset, raw_key, f"key ({cls.rsplit('.', 1)[-1]}): {exc}")

    def _value(self, field, offset, raw_key):
        """Decode a value; a :class:`RecordError` naming the record's key if it cannot be."""
        cls = self.header.value_class
        if not self.values:
            return len(field) - 4 if cls == BYTES and len(field) >= 4 else len(field)
        if self.raw:
            return bytes(field)
        try:
            return decode(cls, field)
        except (ValueError, UnicodeDecodeError) as exc:
            self._bad(offset, raw_key, f"value ({cls.rsplit('.', 1)[-1]}): {exc}")


def _seek_read(f, n, pos):
    """``os.pread`` for a file object without a descriptor: ``n`` bytes at ``pos`` (fewer at the end)."""
    f.seek(pos)
    return f.read(n)


def _open_regular(path):
    """Open ``path`` for reading if it is a regular file; refuse FIFOs, pipes and devices without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO or pipe" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise SequenceFileError(path, None, f"{kind}: SequenceFiles are read from regular files only "
                                                "(copy a stream to a file first)")
        os.set_blocking(fd, True)
        # A small buffer: large values are then read straight into their bytes objects.
        return os.fdopen(fd, "rb", buffering=8192)
    except BaseException:
        os.close(fd)
        raise


def read_records(path, **kwargs):
    """Yield all records of the SequenceFile at ``path`` (see :class:`Reader`). Raises ``SequenceFileError`` for a
    malformed file, unless ``on_error`` takes the damage.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
        The file, as :class:`Reader` takes it.
    **kwargs
        :class:`Reader`'s other arguments (``start``, ``end``, ``max_record_size``, ``on_error``...).

    Yields
    ------
    Record
        Each record's key and value, decoded by their classes, and its offset.

    Examples
    --------
    >>> import os, tempfile
    >>> from seqfile import Writer
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "frames.seq")
    >>> with Writer(path, compression="BLOCK") as w:
    ...     w.append("a.jpg", b"one")
    >>> [(key, value) for key, value, offset in read_records(path)]
    [('a.jpg', b'one')]
    >>> folder.cleanup()
    """
    with Reader(path, **kwargs) as reader:
        yield from reader
