"""Compression codecs, named by their Hadoop class names."""

import bz2
import struct
import zlib

DEFAULT = "org.apache.hadoop.io.compress.DefaultCodec"
DEFLATE = "org.apache.hadoop.io.compress.DeflateCodec"
GZIP = "org.apache.hadoop.io.compress.GzipCodec"
BZIP2 = "org.apache.hadoop.io.compress.BZip2Codec"
SNAPPY = "org.apache.hadoop.io.compress.SnappyCodec"
LZ4 = "org.apache.hadoop.io.compress.Lz4Codec"
ZSTD = "org.apache.hadoop.io.compress.ZStandardCodec"

#: Short names accepted on the command line and by :class:`seqfile.Writer`.
SHORT_NAMES = {
    "default": DEFAULT, "zlib": DEFAULT, "deflate": DEFLATE, "gzip": GZIP,
    "bzip2": BZIP2, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD,
}

#: Raw bytes per framed chunk we write; below Hadoop's 256 KiB codec buffers.
_FRAME_CHUNK = 64 * 1024
_INT32 = struct.Struct(">i")


class CodecError(ValueError):
    """A stream could not be decompressed, or a codec is unavailable."""


def _cramjam(codec_class):
    try:
        import cramjam
    except ImportError:
        raise CodecError(
            f"{codec_class.rsplit('.', 1)[-1]} needs the 'cramjam' package "
            "(pip install 'gpumr[codecs]', or pip install cramjam)") from None
    return cramjam


def _zstd():
    """The streaming zstd module (``compression.zstd`` or its backport)."""
    try:
        from compression import zstd
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            raise CodecError("ZStandardCodec needs the 'backports.zstd' package to read "
                             "(pip install 'gpumr[codecs]', or pip install backports.zstd)") from None
    return zstd


def resolve(name):
    """The Hadoop class name of a codec named by a short name (``default``, ``gzip``, ``bzip2``, ``snappy``, ``lz4``,
    ``zstd``, as ``gpumr pack --codec`` takes them) or by its class name. Raises ``CodecError`` for a name that is
    neither.

    Examples
    --------
    >>> resolve("gzip")
    'org.apache.hadoop.io.compress.GzipCodec'
    """
    if name in SHORT_NAMES:
        return SHORT_NAMES[name]
    if name in SHORT_NAMES.values():
        return name
    raise CodecError(f"unknown codec {name!r}; known: {', '.join(SHORT_NAMES)}")


def check_available(codec_class):
    """Raise :class:`CodecError` unless the Hadoop codec class ``codec_class`` can be used here: one gpumr supports,
    whose optional library (``cramjam``, ``backports.zstd``) is installed; the message says what to install."""
    if codec_class not in SHORT_NAMES.values():
        raise CodecError(f"unsupported codec class {codec_class}")
    if codec_class in (SNAPPY, LZ4, ZSTD):
        _cramjam(codec_class)
    if codec_class == ZSTD:
        _zstd()


def compress(codec_class, data):
    """Compress ``data`` as one stream of ``codec_class``. Raises ``CodecError`` for an unsupported or unavailable
    codec.

    Parameters
    ----------
    codec_class : str
        A Hadoop codec class name.
    data : bytes-like
        What to compress.

    Returns
    -------
    bytes
        The stream Hadoop's codec of that class writes for ``data`` (Snappy and LZ4 in Hadoop's block framing)."""
    if codec_class in (DEFAULT, DEFLATE):
        return zlib.compress(data, 6)
    if codec_class == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec_class == BZIP2:
        return bz2.compress(data, 9)
    cj = _cramjam(codec_class)
    if codec_class == ZSTD:
        return bytes(cj.zstd.compress(data))
    if codec_class == SNAPPY:
        raw = lambda b: bytes(cj.snappy.compress_raw(b))  # noqa: E731 (a one-line choice of function)
    elif codec_class == LZ4:
        raw = lambda b: bytes(cj.lz4.compress_block(b, store_size=False))  # noqa: E731 (a one-line choice of function)
    else:
        raise CodecError(f"unsupported codec class {codec_class}")
    view = memoryview(data)
    out = []
    for i in range(0, len(view), _FRAME_CHUNK):
        chunk = bytes(view[i:i + _FRAME_CHUNK])
        packed = raw(chunk)
        out += [_INT32.pack(len(chunk)), _INT32.pack(len(packed)), packed]
    return b"".join(out)


def decompress(codec_class, data, limit, head=0):
    """Decompress one stream of ``codec_class`` into at most ``limit`` bytes. Raises ``CodecError`` on a malformed or
    truncated stream, or output beyond ``limit``.

    Parameters
    ----------
    codec_class : str
        A Hadoop codec class name.
    data : bytes-like
        One whole stream.
    limit : int
        The most bytes the output may have (the reader's ``max_record_size``); decompression stops there instead of
        allocating more.
    head : int, optional
        With ``head`` > 0, return ``(first head bytes, the rest)`` as two objects, so that a caller stripping a length
        prefix (a BytesWritable's) need not copy a large value to do it; zlib, gzip, bzip2 and zstd produce the two
        directly, Snappy and LZ4 by slicing.

    Returns
    -------
    bytes or (bytes, bytes)
        The decompressed data, or its head and the rest."""
    try:
        if codec_class in (DEFAULT, DEFLATE):
            return _streams(zlib.decompressobj, data, limit, False, head)
        if codec_class == GZIP:
            return _streams(lambda: zlib.decompressobj(31), data, limit, True, head)
        if codec_class == BZIP2:
            return _streams(bz2.BZ2Decompressor, data, limit, True, head)
        if codec_class == ZSTD:
            return _streams(_zstd().ZstdDecompressor, data, limit, True, head)
        cj = _cramjam(codec_class)
        if codec_class == SNAPPY:
            out = _unframe(data, limit, lambda b, n: _snappy_block(cj, b, n))
        elif codec_class == LZ4:
            out = _unframe(data, limit, lambda b, n: _lz4_block(cj, b, n))
        else:
            raise CodecError(f"unsupported codec class {codec_class}")
    except CodecError:
        raise
    except Exception as exc:  # noqa: BLE001 (zlib.error, OSError, cramjam's DecompressionError ...: one CodecError)
        raise CodecError(f"bad {codec_class.rsplit('.', 1)[-1]} stream: {exc}") from None
    if len(out) > limit:
        raise CodecError(f"decompressed data exceeds {limit} bytes")
    return (out[:head], out[head:]) if head else out


#: Output piece size when measuring a stream without keeping it.
_MEASURE_PIECE = 1 << 20


def measure(codec_class, data, limit):
    """The decompressed size of one stream of ``codec_class``, without keeping the output. Raises ``CodecError`` as
    :func:`decompress`.

    Parameters
    ----------
    codec_class : str
        A Hadoop codec class name.
    data : bytes-like
        One whole stream.
    limit : int
        The most bytes the output may have.

    Returns
    -------
    int
        The size of the decompressed data."""
    try:
        if codec_class in (DEFAULT, DEFLATE):
            return _count(zlib.decompressobj, data, limit, multi=False)
        if codec_class == GZIP:
            return _count(lambda: zlib.decompressobj(31), data, limit, multi=True)
        if codec_class == BZIP2:
            return _count(bz2.BZ2Decompressor, data, limit, multi=True)
        if codec_class == ZSTD:
            return _count(_zstd().ZstdDecompressor, data, limit, multi=True)
        cj = _cramjam(codec_class)
        if codec_class == SNAPPY:
            return _unframe(data, limit, lambda b, n: _snappy_block(cj, b, n), keep=False)
        if codec_class == LZ4:
            return _unframe(data, limit, lambda b, n: _lz4_block(cj, b, n), keep=False)
        raise CodecError(f"unsupported codec class {codec_class}")
    except CodecError:
        raise
    except Exception as exc:  # noqa: BLE001 (zlib.error, OSError, cramjam's DecompressionError ...: one CodecError)
        raise CodecError(f"bad {codec_class.rsplit('.', 1)[-1]} stream: {exc}") from None


def _count(new, data, limit, multi):
    """Bytes that :func:`_streams` would produce, decompressed a piece at a time."""
    total = 0
    rest = data
    while True:
        d = new()
        zlib_like = hasattr(d, "unconsumed_tail")
        idle = 0
        while True:
            piece = d.decompress(rest, _MEASURE_PIECE)
            total += len(piece)
            if total > limit:
                raise CodecError(f"decompressed data exceeds {limit} bytes")
            rest = d.unconsumed_tail if zlib_like else b""
            idle = 0 if piece else idle + 1
            if d.eof or idle > 8 or (not piece and (not rest if zlib_like else d.needs_input)):
                break
        if not d.eof:
            raise CodecError("compressed stream is truncated")
        rest = d.unused_data
        if not (multi and rest):
            return total


#: LZ4 expands at most about 255-fold (each extra length byte adds 255).
_LZ4_MAX_RATIO = 256


def _lz4_block(cj, data, most):
    # Hadoop does not store each chunk's raw size; decompress into room for
    # what is left of the block (no more than the chunk can expand to) and
    # keep what was actually produced.
    most = min(most, len(data) * _LZ4_MAX_RATIO + 64)
    out = bytearray(most)
    n = cj.lz4.decompress_block_into(data, out, output_len=most)
    return bytes(memoryview(out)[:n])


def _snappy_block(cj, data, most):
    # A raw Snappy block starts with its uncompressed length (a varint):
    # check it before the library allocates that much.
    declared, shift = 0, 0
    for i, byte in enumerate(data[:5]):
        declared |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    else:
        raise CodecError("Snappy chunk has no valid length")
    if declared > most:
        raise CodecError(f"Snappy chunk declares {declared} bytes, more than the {most} its block has left")
    return bytes(cj.snappy.decompress_raw(data))


def _streams(new, data, limit, multi, head=0):
    """Decompress one stream (or, with ``multi``, concatenated streams) into at most ``limit`` bytes."""
    out = []
    total = 0
    rest = data
    first = None
    while True:
        d = new()
        if head and first is None:
            first = d.decompress(rest, head)
            total = len(first)
            rest = getattr(d, "unconsumed_tail", b"")
            if d.eof or len(first) < head:  # a stream shorter than the head: no fast path
                out.append(first)
                first = b""
                rest = d.unused_data if d.eof else rest
                if not d.eof:
                    raise CodecError("compressed stream is truncated")
                if not (multi and rest):
                    joined = b"".join(out)
                    return joined[:head], joined[head:]
                continue
        piece = d.decompress(rest, limit - total + 1)
        total += len(piece)
        out.append(piece)
        if total > limit:
            raise CodecError(f"decompressed data exceeds {limit} bytes")
        if not d.eof:
            raise CodecError("compressed stream is truncated")
        rest = d.unused_data
        if not (multi and rest):
            break
    if first is None:
        return b"".join(out)
    if first:  # the usual case: the head came whole from the first stream
        return first, b"".join(out)
    joined = b"".join(out)
    return joined[:head], joined[head:]


def _unframe(data, limit, raw_decompress, keep=True):
    view = memoryview(data)
    out = []
    total = 0
    pos = 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise CodecError("block header is truncated")
        (raw_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if raw_len == 0:  # Hadoop's marker of an empty stream
            break
        if raw_len < 0:
            raise CodecError(f"block raw length {raw_len} is negative")
        if total + raw_len > limit:
            raise CodecError(f"block declares {raw_len} raw bytes: decompressed data exceeds {limit} bytes")
        got = 0
        while got < raw_len:
            if pos + 4 > len(view):
                raise CodecError("chunk header is truncated")
            (comp_len,) = _INT32.unpack_from(view, pos)
            pos += 4
            if comp_len < 0 or pos + comp_len > len(view):
                raise CodecError(f"chunk length {comp_len} runs past the stream")
            piece = raw_decompress(view[pos:pos + comp_len], raw_len - got)
            pos += comp_len
            got += len(piece)
            if got > raw_len:
                raise CodecError("chunk decompresses past its block's raw length")
            if keep:
                out.append(piece)
        total += raw_len
    return b"".join(out) if keep else total
