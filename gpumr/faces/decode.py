"""Image records to grey arrays, refusing what is not a usable image before decoding it."""

import io

import numpy as np

from ..core import BadRecord

#: Largest image accepted by default (decompression bombs are refused before decoding).
MAX_PIXELS = 50_000_000


def image_size(data):
    """``(width, height)`` from an image header without decoding pixels, or None if unknown."""
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None  # only the header is read; our own limit applies
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:
        return None


def decode_gray(data, max_pixels=MAX_PIXELS):
    """Decode image bytes to an 8-bit grey array.

    Raises
    ------
    BadRecord
        Empty, undecodable, or larger than ``max_pixels`` (checked from the header first).
    """
    import cv2
    if len(data) == 0:
        raise BadRecord("empty value (zero bytes)")
    size = image_size(data)
    if size is not None and size[0] * size[1] > max_pixels:
        raise BadRecord(f"image of {size[0]}x{size[1]} pixels exceeds the limit of {max_pixels}")
    buf = np.frombuffer(data, np.uint8)
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    except cv2.error as exc:
        raise BadRecord(f"not a decodable image ({str(exc).strip().splitlines()[-1][:120]})") from None
    if img is None or img.size == 0:
        raise BadRecord("not a decodable image")
    if img.shape[0] * img.shape[1] > max_pixels:
        raise BadRecord(f"image of {img.shape[1]}x{img.shape[0]} pixels exceeds the limit of {max_pixels}")
    return img
