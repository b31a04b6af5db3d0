"""Image records to arrays, refusing what is not a usable image before decoding it."""

import io
import re

import numpy as np

from ..limits import MAX_JPEG_SCANS
from .badrecord import BadRecord

#: Largest image accepted by default (decompression bombs are refused before decoding).
MAX_PIXELS = 50_000_000


_PNG = b"\x89PNG\r\n\x1a\n"
#: JPEG start-of-frame markers (SOF0-SOF15 less DHT 0xC4, JPG 0xC8 and DAC 0xCC): they carry the size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(data):
    """``(width, height)`` from an image's header, its pixels not decoded, or None where no header gives them.

    Examples
    --------
    >>> import cv2, numpy as np
    >>> image_size(cv2.imencode(".png", np.zeros((4, 6), np.uint8))[1].tobytes()), image_size(b"not an image")
    ((6, 4), None)
    """
    if data[:8] == _PNG:
        if len(data) >= 24 and data[12:16] == b"IHDR":
            return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        return None
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None  # only the header is read; our own limit applies
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:  # noqa: BLE001 (any decoder failure means: size unknown here, the decode says why)
        return None


#: In a JPEG's entropy-coded data a 0xFF byte is followed by 0x00 (stuffing) or a restart marker
#: (0xD0-0xD7); any other byte after it (fill bytes 0xFF aside) starts the next marker.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def _jpeg_segments(data):
    """``(marker, offset)`` of each marker segment of a JPEG after SOI, up to EOI (ITU T.81, B.1.1)."""
    pos, end = 2, len(data)
    while pos + 4 <= end:
        marker = data[pos + 1]
        if data[pos] != 0xFF or marker in (0x00, 0x01, 0xFF) or 0xD0 <= marker <= 0xD7:
            found = _NEXT_MARKER.search(data, pos + 1)
            if found is None:
                return
            pos = found.start()
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xD9 or length < 2:  # EOI
            return
        yield marker, pos
        pos += 2 + length
        if marker == 0xDA:
            found = _NEXT_MARKER.search(data, pos)
            if found is None:
                return
            pos = found.start()


def _jpeg_size(data):
    """The size in a JPEG's first start-of-frame segment; None if a scan or the end comes first."""
    for marker, pos in _jpeg_segments(data):
        if marker == 0xDA:
            return None
        if marker in _SOF:
            if pos + 9 > len(data):
                return None
            return int.from_bytes(data[pos + 7:pos + 9], "big"), int.from_bytes(data[pos + 5:pos + 7], "big")
    return None


def jpeg_scans(data, most=MAX_JPEG_SCANS):
    """How many scans (SOS segments) the JPEG bytes ``data`` hold, counting stops past ``most``
    (:data:`gpumr.limits.MAX_JPEG_SCANS`).

    Examples
    --------
    >>> import cv2, numpy as np
    >>> jpeg_scans(cv2.imencode(".jpg", np.zeros((8, 8), np.uint8))[1].tobytes())
    1
    """
    scans = 0
    for marker, _ in _jpeg_segments(data):
        scans += marker == 0xDA
        if scans > most:
            break
    return scans


def decode_image(data, mode="color", max_pixels=MAX_PIXELS, check=None):
    """Decode image bytes to an 8-bit array: BGR ``[height, width, 3]`` (``"color"``) or grey ``[height, width]``.
    Raises ``BadRecord``: empty, undecodable, larger than ``max_pixels``, a JPEG of more than
    :data:`gpumr.limits.MAX_JPEG_SCANS` scans, or of a size that cannot be read from its header (the size is checked
    before decoding, so a small file that would decode to gigabytes is never decoded).

    Parameters
    ----------
    data : bytes
        The image file's bytes (JPEG, PNG, BMP, TIFF, WebP, PNM, GIF).
    mode : {"color", "gray"}
    max_pixels : int
        Refuse larger images, from their header.
    check : callable, optional
        ``check(width, height)``, called with the header's size before decoding; it raises BadRecord to refuse the
        image unread.

    Returns
    -------
    numpy.ndarray"""
    import cv2
    if len(data) == 0:
        raise BadRecord("empty value (zero bytes)")
    size = image_size(data)
    if size is None:
        # Decoding it would be the only way to learn its size: a decompression bomb gets through that way.
        raise BadRecord("not a usable image: its size cannot be read from its header (PNG, JPEG, BMP, TIFF, "
                        "WebP, PNM and GIF are read)")
    if size[0] * size[1] > max_pixels:
        raise BadRecord(f"image of {size[0]}x{size[1]} pixels exceeds the limit of {max_pixels}")
    if size[0] <= 0 or size[1] <= 0:
        raise BadRecord(f"not a usable image: its header gives a size of {size[0]}x{size[1]} pixels")
    if data[:2] == b"\xff\xd8" and jpeg_scans(data) > MAX_JPEG_SCANS:
        raise BadRecord(f"JPEG of more than {MAX_JPEG_SCANS} scans (each a pass of the decoder over the image): "
                        "refused unread")
    if check is not None:
        check(*size)
    buf = np.frombuffer(data, np.uint8)
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE if mode == "gray" else cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise BadRecord(f"not a decodable image ({str(exc).strip().splitlines()[-1][:120]})") from None
    if img is None or img.size == 0:
        raise BadRecord("not a decodable image")
    if img.shape[0] * img.shape[1] > max_pixels:
        raise BadRecord(f"image of {img.shape[1]}x{img.shape[0]} pixels exceeds the limit of {max_pixels}")
    return img


def decode_gray(data, max_pixels=MAX_PIXELS, check=None):
    """:func:`decode_image` in grey.

    Examples
    --------
    >>> import cv2, numpy as np
    >>> png = cv2.imencode(".png", np.zeros((4, 6), np.uint8))[1].tobytes()
    >>> decode_gray(png).shape
    (4, 6)
    """
    return decode_image(data, "gray", max_pixels, check)


def decode_luminance(data, max_pixels=MAX_PIXELS):
    """The image as scikit-image makes a colour image grey: ``skimage.color.rgb2gray`` of its RGB, float64 in [0, 1].

    Examples
    --------
    >>> import cv2, numpy as np
    >>> png = cv2.imencode(".png", np.full((2, 3, 3), 255, np.uint8))[1].tobytes()
    >>> decode_luminance(png).round(6).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadRecord(f"value is a {type(data).__name__}, not image bytes")
    from skimage.color import rgb2gray
    return rgb2gray(decode_image(bytes(data), "color", max_pixels)[..., ::-1])
