"""Reading SequenceFiles, whole or by split, with Hadoop's semantics.

A reader over the byte range ``[start, end)`` returns exactly the records
that Hadoop's ``mapred.SequenceFileRecordReader`` returns for a ``FileSplit``
of that range:

* if ``start`` lies past the header, reading begins at the first sync marker
  whose escape starts at or after ``start`` (``SequenceFile.Reader.sync``);
  otherwise at the first record, so a split that ends inside the header is
  empty;
* a record is returned unless it starts at or after ``end`` *and* a sync
  marker was read just before it; the first such record ends the split.

Together these give every record to exactly one split, whatever the cuts.
"""

import os
import struct
from collections import namedtuple

from . import codecs
from .errors import SequenceFileError
from .header import BLOCK, NONE, RECORD, SYNC_SIZE, read_header
from .writable import BYTES, TEXT, decode, decode_vlong, vlong_size

Record = namedtuple("Record", "key value offset")
Record.__doc__ = """One key/value pair and the byte offset where it (or its block) starts."""

#: Largest decompressed buffer or record accepted (Java arrays are int-indexed).
MAX_BUFFER = (1 << 31) - 1
_INT32 = struct.Struct(">i")
_TWO_INT32 = struct.Struct(">ii")
_ESCAPE = b"\xff\xff\xff\xff"
#: Bytes read ahead for a sync entry, record lengths, a short key and the value length.
_PEEK = 20 + 8 + 128 + 4
_STOP = object()
_SCAN_CHUNK = 1 << 20


class Reader:
    """Iterate over the records of a SequenceFile, or of one split of it.

    Parameters
    ----------
    path : str or os.PathLike
        The file to read.
    start, end : int, optional
        The split's byte range ``[start, end)``; the whole file by default.
    raw : bool
        If True, keys and values are the serialized Writable bytes; otherwise
        ``Text`` gives ``str``, ``BytesWritable`` ``bytes``, ``IntWritable`` /
        ``LongWritable`` ``int``, ``NullWritable`` ``None`` and other classes
        their serialized bytes.
    on_error : callable, optional
        Called with each :class:`SequenceFileError` met in a record; reading
        then resumes at the next sync marker instead of raising. Header errors
        always raise.

    Attributes
    ----------
    header : seqfile.header.Header
    file_size : int

    Raises
    ------
    SequenceFileError
        For a malformed header, or (without ``on_error``) a malformed record.
    """

    def __init__(self, path, start=0, end=None, raw=False, on_error=None):
        self.path = os.fspath(path)
        # A small buffer: large values are then read straight into their bytes objects.
        self._f = open(self.path, "rb", buffering=8192)
        try:
            self.file_size = os.fstat(self._f.fileno()).st_size
            self.header = read_header(self._f, self.path)
        except BaseException:
            self._f.close()
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
        """Close the underlying file."""
        self._f.close()

    # -- positioning -----------------------------------------------------
    def sync_position(self, position):
        """Where Hadoop's ``Reader.sync(position)`` lands.

        The offset of the first sync escape at or after ``position`` whose
        16-byte marker is followed by at least one more byte of the file, or
        the file size when there is none.
        """
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

    def _records(self, pos):
        """Records of a file without block compression, from ``pos``."""
        f, size, end, read = self._f, self.file_size, self.end, self._f.read
        fast = self._bytes_values and self.header.key_class == TEXT
        fd, sync = f.fileno(), self._sync
        while pos < size:
            rec_pos = pos
            if fast:
                peeked = self._peek(fd, pos, sync, size)
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
                record = self._record_body(rec_pos, pos, length, key_len)
                pos += length
            except SequenceFileError as exc:
                if self.on_error is None:
                    raise
                self.on_error(exc)
                pos = self.sync_position(rec_pos + 1)
                continue
            yield record

    def _peek(self, fd, pos, sync, size):
        """The well-formed common record at ``pos``, read with two ``pread`` calls.

        For a short Text key and an uncompressed BytesWritable value, one read
        covers an optional sync entry, both lengths and the key, and a second
        reads the value straight into its ``bytes``. Returns the record and the
        position after it, ``_STOP`` where the split ends at a sync entry, or
        None for anything else, which the general path then reads (and
        reports, if it is malformed).
        """
        head = os.pread(fd, _PEEK, pos)
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
        if n < 0 or _INT32.unpack_from(head, key_end)[0] != n or next_pos > size:
            return None
        value = os.pread(fd, n, pos + key_end + 4)
        if len(value) != n:
            return None
        try:
            return Record(head[at + 9:key_end].decode("utf-8"), value, pos), next_pos
        except UnicodeDecodeError:
            return None

    def _record_body(self, rec_pos, pos, length, key_len):
        """The key and value of the record whose lengths were just read."""
        read, hdr = self._f.read, self.header
        if self._bytes_values:
            # Text key and BytesWritable value, uncompressed: one read for the key
            # and the value's length, one read straight into the value.
            if length - key_len < 4:
                self._fail(rec_pos, f"value of {length - key_len} bytes cannot hold a BytesWritable")
            kv = read(key_len + 4)
            if len(kv) != key_len + 4:
                self._fail(pos, "file ends inside a key")
            (n,) = _INT32.unpack_from(kv, key_len)
            if n != length - key_len - 4:
                self._fail(rec_pos, f"BytesWritable length {n} does not match the record's "
                                    f"{length - key_len - 4} value bytes")
            value = read(n)
            if len(value) != n:
                self._fail(pos + key_len + 4, f"file ends inside a value ({len(value)} of {n} bytes)")
            return Record(self._decode(hdr.key_class, memoryview(kv)[:key_len], rec_pos), value, rec_pos)
        data = read(length)
        if len(data) != length:
            self._fail(pos, f"file ends inside a record ({len(data)} of {length} bytes)")
        field = memoryview(data)[key_len:]
        if hdr.compression == RECORD:
            field = self._inflate(field, rec_pos, "value")
        return self._record(memoryview(data)[:key_len], field, rec_pos)

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
                if self.on_error is None:
                    raise
                self.on_error(exc)
                pos = self.sync_position(block_pos + 1)
                f.seek(pos)
                continue
            yield from records

    def _read_vint(self, pos, what):
        first = self._read(1, pos, what)
        rest = self._read(vlong_size(first[0]) - 1, pos + 1, what)
        return decode_vlong(first + rest, 0)[0], pos + len(first) + len(rest)

    def _block_body(self, block_pos, pos):
        count, pos = self._read_vint(pos, "a block's record count")
        if count <= 0:
            self._fail(block_pos, f"block record count {count} is not positive")
        buffers = []
        for what in ("key lengths", "keys", "value lengths", "values"):
            at = pos
            n, pos = self._read_vint(pos, f"the size of a block's {what}")
            if not 0 <= n <= self.file_size - pos:
                self._fail(at, f"block {what} size {n} runs past the end of the file")
            buffers.append(self._inflate(self._read(n, pos, f"a block's {what}"), at, f"block {what}"))
            pos += n
        key_lens = self._lengths(buffers[0], count, block_pos, "key")
        val_lens = self._lengths(buffers[2], count, block_pos, "value")
        keys, vals = memoryview(buffers[1]), memoryview(buffers[3])
        if sum(key_lens) != len(keys) or sum(val_lens) != len(vals):
            self._fail(block_pos, "block lengths do not add up to its key/value data")
        out, ko, vo = [], 0, 0
        for kl, vl in zip(key_lens, val_lens):
            out.append(self._record(keys[ko:ko + kl], vals[vo:vo + vl], block_pos))
            ko += kl
            vo += vl
        return out, pos

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

    def _inflate(self, data, offset, what):
        try:
            return codecs.decompress(self._codec, data, MAX_BUFFER)
        except codecs.CodecError as exc:
            self._fail(offset, f"{what}: {exc}")

    def _decode(self, class_name, field, offset):
        if self.raw:
            return bytes(field)
        try:
            return decode(class_name, field)
        except (ValueError, UnicodeDecodeError) as exc:
            self._fail(offset, f"{class_name.rsplit('.', 1)[-1]}: {exc}")

    def _record(self, key, field, offset):
        return Record(self._decode(self.header.key_class, key, offset),
                      self._decode(self.header.value_class, field, offset), offset)


def read_records(path, **kwargs):
    """Yield all records of the SequenceFile at ``path`` (see :class:`Reader`)."""
    with Reader(path, **kwargs) as reader:
        yield from reader
