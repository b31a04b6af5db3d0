"""Hostile inputs made on purpose, for the tests and ``bench/limits.py``."""

import io

import numpy as np


def progressive_jpeg(width, height, seed=0):
    """A real grey progressive JPEG (Pillow's libjpeg: its own scan script) of noise."""
    from PIL import Image
    img = (np.random.default_rng(seed).random((height, width)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", progressive=True, quality=90)
    return buf.getvalue()


def many_scan_jpeg(width, height, scans, seed=0):
    """A valid grey progressive JPEG followed by ``scans`` extra scans of a few bytes each.

    Each extra scan is an AC first scan (bands 1-63) of end-of-band runs
    covering every block (ITU T.81, G.1.2.2): a few bytes of entropy-coded
    data, but libjpeg walks every block of the image for it. Its Huffman
    table (DHT, AC table 0) holds the one symbol EOB14, code ``0``.
    """
    base = progressive_jpeg(width, height, seed)
    assert base.endswith(b"\xff\xd9")
    dht = b"\xff\xc4" + (2 + 1 + 16 + 1).to_bytes(2, "big") + b"\x10" + b"\x01" + bytes(15) + b"\xe0"
    # SOS: 1 component (id 1, DC table 0, AC table 0), Ss=1, Se=63, Ah=Al=0.
    sos = b"\xff\xda" + (6 + 2).to_bytes(2, "big") + b"\x01\x01\x00\x01\x3f\x00"
    # Per run: code 0 then 14 one bits (a run of 2**14 + 16383 = 32767 blocks); padded with ones.
    blocks = -(-width // 8) * -(-height // 8)
    bits = "0" + "1" * 14
    bits *= -(-blocks // 32767)
    bits += "1" * (-len(bits) % 8)
    data = int(bits, 2).to_bytes(len(bits) // 8, "big").replace(b"\xff", b"\xff\x00")
    return base[:-2] + dht + (sos + data) * scans + b"\xff\xd9"


def tiff_directory_after_pixels(pixels):
    """A float32 TIFF (little-endian, one uncompressed strip) whose directory follows its pixels: its 8-byte
    header, then the pixels, then the tags. A reader finds the shape only after the pixels."""
    import struct

    import numpy as np
    pixels = np.ascontiguousarray(pixels, "<f4")
    rows, cols = pixels.shape
    data = pixels.tobytes()
    entries = [(256, 4, 1, cols), (257, 4, 1, rows), (258, 3, 1, 32), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, 1, 8), (277, 3, 1, 1), (278, 4, 1, rows), (279, 4, 1, len(data)), (339, 3, 1, 3)]
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        ifd += struct.pack("<HHI", tag, kind, count) + (struct.pack("<HH", value, 0) if kind == 3
                                                        else struct.pack("<I", value))
    return b"II*\0" + struct.pack("<I", 8 + len(data)) + data + ifd + struct.pack("<I", 0)
