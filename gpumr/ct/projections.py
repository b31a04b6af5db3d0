"""Projection images in and out: float TIFF, 16-bit TIFF/PNG, .npy; one SequenceFile record each.

Records are keyed by file name (``proj_0000.tif``...); projections are taken
in sorted key order, one per angle of the geometry. Values are line
integrals unless ``i0`` is given, in which case raw intensities are turned
into line integrals as ``-log(I / I0)``.
"""

import io
import os

import numpy as np

from seqfile import Reader, Writer

from ..errors import GpumrError
from ..io.outputs import FileOutput


def encode_tiff(image):
    """A 32-bit float TIFF of ``image``."""
    import tifffile
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.asarray(image, np.float32))
    return buf.getvalue()


def decode(name, data, i0=None):
    """One projection from file bytes, as float32 line integrals.

    Raises
    ------
    GpumrError
        Unknown extension or undecodable data (the name is given).
    """
    ext = os.path.splitext(name)[1].lower()
    try:
        if ext == ".npy":
            img = np.load(io.BytesIO(data), allow_pickle=False)
        elif ext in (".tif", ".tiff"):
            import tifffile
            img = tifffile.imread(io.BytesIO(data))
        elif ext == ".png":
            import cv2
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
            if img is None:
                raise ValueError("undecodable PNG")
        else:
            raise GpumrError(f"{name}: projections must be .tif, .tiff, .png or .npy")
    except GpumrError:
        raise
    except Exception as exc:
        raise GpumrError(f"{name}: cannot decode projection: {exc}") from None
    img = np.asarray(img)
    if img.ndim != 2:
        raise GpumrError(f"{name}: a projection must be a 2-D single-channel image, got shape {img.shape}")
    img = img.astype(np.float32)
    if i0:
        img = -np.log(np.maximum(img, 1e-6) / np.float32(i0)).astype(np.float32)
    return img


def write_set(path, projections, prefix="proj_", inputs=()):
    """Write projections (an iterable of 2-D arrays) as float TIFF records ``proj_0000.tif``...

    The SequenceFile is written under gpumr's output rule
    (:class:`gpumr.io.outputs.FileOutput`; never replacing one of ``inputs``).
    """
    with Writer(path, out=FileOutput(path, "gpumr ct phantom", inputs=inputs).begin()) as w:
        for i, p in enumerate(projections):
            w.append(f"{prefix}{i:04d}.tif", encode_tiff(p))


def read_set(paths, geometry, i0=None):
    """All projections of the SequenceFiles ``paths``, float32 [angle, row, col], in key order.

    Raises
    ------
    GpumrError
        If their number or size does not match the geometry.
    """
    records = {}
    for path in paths:
        with Reader(path) as reader:
            for key, value, _ in reader:
                records[key] = value
    na = geometry.n_angles
    if len(records) != na:
        raise GpumrError(f"{', '.join(paths)}: {len(records)} projections, the geometry has {na} angles")
    out = np.empty((na, *geometry.nDetector), np.float32)
    for i, key in enumerate(sorted(records)):
        img = decode(key, records[key], i0)
        if img.shape != tuple(geometry.nDetector):
            raise GpumrError(f"{key}: projection is {img.shape[0]}x{img.shape[1]}, the geometry's detector is "
                             f"{geometry.nDetector[0]}x{geometry.nDetector[1]} (rows x cols)")
        out[i] = img
    return out
