"""Hadoop Writable encodings used by SequenceFiles: ``Text``, ``BytesWritable``, ``IntWritable``, ``LongWritable``,
``NullWritable`` and the variable-length integers (``WritableUtils.writeVLong``)."""

import struct

TEXT = "org.apache.hadoop.io.Text"
BYTES = "org.apache.hadoop.io.BytesWritable"
INT = "org.apache.hadoop.io.IntWritable"
LONG = "org.apache.hadoop.io.LongWritable"
NULL = "org.apache.hadoop.io.NullWritable"

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def encode_vlong(value):
    """``value``, a signed 64-bit int, in Hadoop's zero-compressed VLong encoding (``WritableUtils.writeVLong``): one byte
    for -112..127, else a length byte and 1 to 8 big-endian bytes.

    Examples
    --------
    >>> list(encode_vlong(127)), list(encode_vlong(128))
    ([127], [143, 128])
    """
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    prefix = -112
    if value < 0:
        value ^= -1
        prefix = -120
    nbytes = (value.bit_length() + 7) // 8
    return struct.pack(">b", prefix - nbytes) + value.to_bytes(nbytes, "big")


def decode_vlong(buf, pos):
    """``(value, position after it)`` of the VLong in ``buf`` at ``pos``. Raises ``ValueError`` if ``buf`` ends inside the
    number.

    Examples
    --------
    >>> decode_vlong(bytes([143, 128]), 0)
    (128, 2)
    """
    if pos >= len(buf):
        raise ValueError("truncated variable-length integer")
    first = buf[pos]
    if first >= 128:
        first -= 256
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    nbytes = (-120 - first) if negative else (-112 - first)
    end = pos + 1 + nbytes
    if end > len(buf):
        raise ValueError("truncated variable-length integer")
    value = int.from_bytes(buf[pos + 1:end], "big")
    return (value ^ -1 if negative else value), end


def vlong_size(first_byte):
    """How many bytes (1 to 9) the whole VLong takes whose first byte (0 to 255) is ``first_byte``.

    Examples
    --------
    >>> vlong_size(127), vlong_size(143)
    (1, 2)
    """
    first = first_byte - 256 if first_byte >= 128 else first_byte
    if first >= -112:
        return 1
    return 1 + ((-120 - first) if first < -120 else (-112 - first))


def encode_text(value):
    """A serialized ``Text``: its VInt byte length, then its UTF-8 bytes (bytes given are taken as UTF-8 already).

    Examples
    --------
    >>> list(encode_text("hé"))
    [3, 104, 195, 169]
    """
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return encode_vlong(len(data)) + data


def decode_text(buf):
    """The ``str`` of a whole serialized ``Text`` field. Raises ``ValueError`` if the length does not match the field, or
    the bytes are not UTF-8 (:class:`UnicodeDecodeError`).

    Examples
    --------
    >>> decode_text(encode_text("hé"))
    'hé'
    """
    length, pos = decode_vlong(buf, 0)
    if length < 0 or pos + length != len(buf):
        raise ValueError(f"Text length {length} does not match its field of {len(buf) - pos} bytes")
    return bytes(buf[pos:]).decode("utf-8")


def decode_bytes_writable(buf):
    """The value's bytes of a whole ``BytesWritable`` field (int32 length, then bytes): a slice of ``buf``, no copy for a
    memoryview. Raises ``ValueError`` if the field is shorter than 4 bytes or its length does not match.

    Examples
    --------
    >>> bytes(decode_bytes_writable(bytes([0, 0, 0, 2]) + b"hi"))
    b'hi'
    """
    if len(buf) < 4:
        raise ValueError("BytesWritable shorter than its 4-byte length")
    (length,) = _INT32.unpack_from(buf, 0)
    if length != len(buf) - 4:
        raise ValueError(f"BytesWritable length {length} does not match its field of {len(buf) - 4} bytes")
    return buf[4:]


def encode(class_name, value):
    """``value`` serialized as the Writable ``class_name`` (a Java class name), as Hadoop's ``write(DataOutput)`` writes
    it: ``Text`` takes ``str`` (or UTF-8 bytes), ``BytesWritable`` bytes-like, ``IntWritable``/``LongWritable`` ints,
    ``NullWritable`` ``None``; any other class takes its already-serialized bytes.

    Examples
    --------
    >>> list(encode(INT, 7)), encode(NULL, None)
    ([0, 0, 0, 7], b'')
    """
    if class_name == TEXT:
        return encode_text(value)
    if class_name == BYTES:
        return _INT32.pack(len(value)) + bytes(value)
    if class_name == INT:
        return _INT32.pack(value)
    if class_name == LONG:
        return _INT64.pack(value)
    if class_name == NULL:
        return b""
    return bytes(value)


def decode(class_name, buf):
    """One field of class ``class_name`` (from the file's header): ``Text`` as str, ``BytesWritable`` as bytes,
    ``IntWritable`` and ``LongWritable`` as int, ``NullWritable`` as None, other classes as their raw bytes. Raises
    ``ValueError`` if the field does not hold a well-formed value of that class.

    Examples
    --------
    >>> decode(LONG, encode(LONG, -1)), decode("com.example.Point", b"xy")
    (-1, b'xy')
    """
    if class_name == TEXT:
        return decode_text(buf)
    if class_name == BYTES:
        return bytes(decode_bytes_writable(buf))
    if class_name in (INT, LONG):
        size = 4 if class_name == INT else 8
        if len(buf) != size:
            raise ValueError(f"{class_name.rsplit('.', 1)[-1]} needs {size} bytes, field has {len(buf)}")
        return int.from_bytes(buf, "big", signed=True)
    if class_name == NULL:
        if len(buf):
            raise ValueError(f"NullWritable field has {len(buf)} bytes")
        return None
    return bytes(buf)
