"""The SequenceFile header (format version 6), as ``SequenceFile.Writer`` writes it."""

import os
import struct
from dataclasses import dataclass, field

from . import codecs
from .errors import SequenceFileError
from .writable import decode_vlong, encode_text, vlong_size

MAGIC = b"SEQ"
VERSION = 6
SYNC_SIZE = 16
#: Bytes between sync points, as Hadoop's ``SequenceFile.SYNC_INTERVAL`` (5 KiB x 20).
SYNC_INTERVAL = 5 * 1024 * (4 + SYNC_SIZE)
#: Largest class name or metadata string we accept (guards allocation).
MAX_STRING = 1 << 20
MAX_METADATA_ENTRIES = 1 << 16

NONE, RECORD, BLOCK = "NONE", "RECORD", "BLOCK"


@dataclass
class Header:
    """Everything the header of a SequenceFile says.

    Attributes
    ----------
    key_class, value_class : str
        Java class names of keys and values.
    compression : str
        ``"NONE"``, ``"RECORD"`` (values compressed one by one) or ``"BLOCK"``.
    codec : str or None
        Java class name of the compression codec, None when not compressed.
    metadata : dict of str to str
        The file's metadata, in Hadoop's (byte-sorted) order.
    sync : bytes
        The 16-byte sync marker.
    size : int
        Bytes the header takes; records start here."""

    key_class: str
    value_class: str
    compression: str = NONE
    codec: str = None
    metadata: dict = field(default_factory=dict)
    sync: bytes = field(default_factory=lambda: os.urandom(SYNC_SIZE))
    size: int = 0

    def to_bytes(self):
        """Serialize this header exactly as Hadoop's writer does."""
        compressed = self.compression != NONE
        parts = [MAGIC, bytes([VERSION]), encode_text(self.key_class),
                 encode_text(self.value_class),
                 bytes([compressed, self.compression == BLOCK])]
        if compressed:
            parts.append(encode_text(self.codec))
        items = sorted(((k.encode("utf-8"), v.encode("utf-8")) for k, v in self.metadata.items()))
        parts.append(struct.pack(">i", len(items)))
        for k, v in items:
            parts += [encode_text(k), encode_text(v)]
        if len(self.sync) != SYNC_SIZE:
            raise ValueError("sync marker must be 16 bytes")
        parts.append(self.sync)
        return b"".join(parts)


class _Cursor:
    """Reads header fields from a file, turning every shortfall into SequenceFileError."""

    def __init__(self, f, path):
        self.f, self.path, self.pos = f, path, 0

    def take(self, n, what):
        data = self.f.read(n)
        if len(data) != n:
            raise SequenceFileError(self.path, self.pos, f"file ends inside the {what}")
        self.pos += n
        return data

    def vint(self, what):
        first = self.take(1, what)
        rest = self.take(vlong_size(first[0]) - 1, what)
        return decode_vlong(first + rest, 0)[0]

    def text(self, what):
        at = self.pos
        n = self.vint(what)
        if not 0 <= n <= MAX_STRING:
            raise SequenceFileError(self.path, at, f"{what} length {n} is out of range")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SequenceFileError(self.path, at, f"{what} is not valid UTF-8") from None

    def flag(self, what):
        at = self.pos
        b = self.take(1, what)[0]
        if b > 1:
            raise SequenceFileError(self.path, at, f"{what} flag must be 0 or 1, found {b}")
        return bool(b)


def read_header(f, path):
    """Read and check the header at the start of binary file ``f``. Raises ``SequenceFileError`` if it is not a
    version-6 SequenceFile header, or is truncated or malformed.

    Parameters
    ----------
    f : binary file
        Open for reading, positioned at the file's first byte.
    path : str
        The file's name, for error messages.

    Returns
    -------
    Header
        What the header says; ``f`` is left at the first byte after it."""
    cur = _Cursor(f, path)
    magic = cur.take(4, "magic 'SEQ' and version")
    if magic[:3] != MAGIC:
        raise SequenceFileError(path, 0, f"not a SequenceFile (starts with {magic[:3]!r}, expected b'SEQ')")
    if magic[3] != VERSION:
        raise SequenceFileError(path, 3, f"unsupported SequenceFile version {magic[3]} (only 6 is read)")
    key_class = cur.text("key class name")
    value_class = cur.text("value class name")
    compressed = cur.flag("compression")
    block = cur.flag("block-compression")
    if block and not compressed:
        raise SequenceFileError(path, cur.pos - 1, "block-compressed but not compressed")
    codec = None
    if compressed:
        at = cur.pos
        codec = cur.text("codec class name")
        try:
            codecs.check_available(codec)
        except codecs.CodecError as exc:
            raise SequenceFileError(path, at, str(exc)) from None
    at = cur.pos
    (count,) = struct.unpack(">i", cur.take(4, "metadata count"))
    if not 0 <= count <= MAX_METADATA_ENTRIES:
        raise SequenceFileError(path, at, f"metadata count {count} is out of range")
    metadata = {}
    for _ in range(count):
        k = cur.text("metadata key")
        metadata[k] = cur.text("metadata value")
    sync = cur.take(SYNC_SIZE, "sync marker")
    return Header(key_class, value_class, BLOCK if block else (RECORD if compressed else NONE),
                  codec, metadata, sync, cur.pos)
