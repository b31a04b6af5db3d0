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
    """Return ``value`` in Hadoop's zero-compressed VLong encoding (``WritableUtils.writeVLong``).

    Parameters
    ----------
    value : int
        A signed 64-bit integer.

    Returns
    -------
    bytes
        One byte for -112..127, else a length byte and 1 to 8 big-endian bytes."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    prefix = -112
    if value < 0:
        value ^= -1
        prefix = -120
    nbytes = (value.bit_length() + 7) // 8
    return struct.pack(">b", prefix - nbytes) + value.to_bytes(nbytes, "big")


def decode_vlong(buf, pos):
    """Decode a VLong from ``buf`` at ``pos``. Raises ``ValueError`` if ``buf`` ends inside the number.

    Parameters
    ----------
    buf : bytes-like
        The bytes holding the number.
    pos : int
        Offset of its first byte.

    Returns
    -------
    (int, int)
        The value and the position after it."""
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
    """Total encoded size of a VLong whose first byte is ``first_byte``.

    Parameters
    ----------
    first_byte : int
        The first byte, 0 to 255.

    Returns
    -------
    int
        1 to 9: how many bytes the whole number takes."""
    first = first_byte - 256 if first_byte >= 128 else first_byte
    if first >= -112:
        return 1
    return 1 + ((-120 - first) if first < -120 else (-112 - first))


def encode_text(value):
    """Serialize a ``Text``: VInt byte length, then UTF-8 bytes.

    Parameters
    ----------
    value : str or bytes-like
        The text; bytes are taken as already UTF-8.

    Returns
    -------
    bytes
        The serialized field."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return encode_vlong(len(data)) + data


def decode_text(buf):
    """Deserialize a whole ``Text`` record field to ``str``. Raises ``ValueError`` if the length does not match the
    field, or the bytes are not UTF-8 (:class:`UnicodeDecodeError`).

    Parameters
    ----------
    buf : bytes-like
        The whole field: VInt length, then that many UTF-8 bytes.

    Returns
    -------
    str
        The text."""
    length, pos = decode_vlong(buf, 0)
    if length < 0 or pos + length != len(buf):
        raise ValueError(f"Text length {length} does not match its field of {len(buf) - pos} bytes")
    return bytes(buf[pos:]).decode("utf-8")


def decode_bytes_writable(buf):
    """Deserialize a whole ``BytesWritable`` field: int32 length, then bytes. Raises ``ValueError`` if the field is
    shorter than 4 bytes or its length does not match.

    Parameters
    ----------
    buf : bytes-like
        The whole field.

    Returns
    -------
    bytes-like
        The value's bytes, a slice of ``buf`` (no copy for a memoryview)."""
    if len(buf) < 4:
        raise ValueError("BytesWritable shorter than its 4-byte length")
    (length,) = _INT32.unpack_from(buf, 0)
    if length != len(buf) - 4:
        raise ValueError(f"BytesWritable length {length} does not match its field of {len(buf) - 4} bytes")
    return buf[4:]


def encode(class_name, value):
    """Serialize ``value`` as the Writable ``class_name``.

    Parameters
    ----------
    class_name : str
        A Java class name: ``Text`` takes ``str`` (or UTF-8 bytes), ``BytesWritable`` bytes-like,
        ``IntWritable``/``LongWritable`` ints, ``NullWritable`` ``None``; any other class takes its already-serialized
        bytes.
    value : object
        The value, as above.

    Returns
    -------
    bytes
        The serialized field, as Hadoop's ``write(DataOutput)`` writes it."""
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
    """Deserialize one field of class ``class_name``; unknown classes give raw bytes. Raises ``ValueError`` if the
    field does not hold a well-formed value of that class.

    Parameters
    ----------
    class_name : str
        The Java class name from the file's header.
    buf : bytes-like
        The whole field.

    Returns
    -------
    str, bytes, int or None
        ``Text`` as str, ``BytesWritable`` as bytes, ``IntWritable`` and ``LongWritable`` as int, ``NullWritable`` as
        None, other classes as their raw bytes."""
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
