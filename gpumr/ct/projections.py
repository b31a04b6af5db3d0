"""Projection images in and out: float TIFF, 16-bit TIFF/PNG, .npy; one SequenceFile record each."""

import io
import os

import numpy as np

from seqfile import Reader, Writer

from .. import limits
from ..errors import GpumrError
from ..io.outputs import FileOutput


def encode_tiff(image):
    """The bytes of a 32-bit float TIFF of the 2-D projection ``image``.

    Examples
    --------
    >>> encode_tiff(np.zeros((2, 2)))[:2]
    b'II'
    """
    import tifffile
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.asarray(image, np.float32))
    return buf.getvalue()


def header_shape(name, data):
    """The shape the header of a projection file declares (its format from the extension of ``name``, the record's key),
    read without decoding pixels; None if the header gives none.

    Examples
    --------
    >>> buf = io.BytesIO(); np.save(buf, np.zeros((2, 4), np.float32))
    >>> header_shape("proj_0000.npy", buf.getvalue())
    (2, 4)
    """
    ext = os.path.splitext(name)[1].lower()
    try:
        if ext == ".npy":
            f = io.BytesIO(data)
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            return tuple(read(f, max_header_size=1 << 16)[0])
        if ext == ".png":
            from ..core.images import image_size
            size = image_size(data)
            return None if size is None else (size[1], size[0])
    except Exception:  # noqa: BLE001 (any decoder failure means: size unknown here, the decode says why)
        return None
    return None


def _check_declared(name, declared, shape):
    """Refuse a header that does not declare the detector's ``shape`` (before any pixel is decoded)."""
    if declared is None:
        raise GpumrError(f"{name}: cannot read a projection's size from its header")
    if declared != tuple(shape):
        shown = "x".join(map(str, declared))
        raise GpumrError(f"{name}: projection is {shown}, the geometry's detector is {shape[0]}x{shape[1]} "
                         "(rows x cols)")


class Layout:
    """The layout of a set's TIFF projections, learnt from one that tifffile decoded: the others that share it are
    read straight from their bytes.

    Examples
    --------
    >>> layout = Layout()
    >>> a, b = (encode_tiff(np.full((3, 4), v, np.float32)) for v in (1, 2))
    >>> float(_tiff("a.tif", a, (3, 4), layout)[0, 0]), float(layout.pixels(b)[0, 0])
    (1.0, 2.0)
    """

    def __init__(self):
        self.head = None

    def learn(self, data, tif, page, pixels):
        """Keep ``page``'s layout if it is of the form above and reads as ``pixels``; else keep none."""
        try:
            if tif.is_bigtiff or len(tif.pages) != 1 or page.compression != 1 or not page.is_contiguous:
                return
            start, count = int(page.dataoffsets[0]), int(sum(page.databytecounts))  # (one run: is_contiguous)
            dtype = np.dtype(pixels.dtype).newbyteorder(tif.byteorder)
            ends = [t.valueoffset + t.valuebytecount for t in page.tags.values()]
            ends.append(page.offset + 2 + 12 * len(page.tags) + 4)  # (the directory, and its next-page pointer)
            if start + count != len(data) or count != pixels.size * dtype.itemsize or max(ends) > start:
                return
            mine = np.frombuffer(data, dtype, pixels.size, start).reshape(pixels.shape)
            if mine.tobytes() != np.ascontiguousarray(pixels, dtype).tobytes():
                return
        except Exception:  # noqa: BLE001 (a tag or attribute this tifffile lacks: no layout, every file decoded)
            return
        self.head, self.size, self.dtype, self.shape = bytes(data[:start]), len(data), dtype, pixels.shape

    def pixels(self, data):
        """The pixels of a file of the learnt layout (read-only, the file's own bytes), or None."""
        start = len(self.head or b"")
        if self.head is None or len(data) != self.size or memoryview(data)[:start] != self.head:
            return None
        return np.frombuffer(data, self.dtype, self.shape[0] * self.shape[1], start).reshape(self.shape)


def _tiff(name, data, shape, layout=None):
    """A TIFF projection's pixels, its header parsed once: the declared shape checked, then the pixels read."""
    if layout is not None:
        pixels = layout.pixels(data)
        if pixels is not None:
            if shape is not None:
                _check_declared(name, pixels.shape, shape)
            return pixels
    import tifffile
    try:
        tif = tifffile.TiffFile(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 (tifffile's own errors, whatever their class: the file named in one line)
        if shape is not None:
            _check_declared(name, None, shape)
        raise GpumrError(f"{name}: cannot decode projection: {exc}") from None
    with tif:
        page = tif.pages.first
        if shape is not None:
            try:
                declared = tuple(page.shape) if len(tif.pages) == 1 else (len(tif.pages), *page.shape)
            except Exception:  # noqa: BLE001 (a shape tifffile cannot give: none declared)
                declared = None
            _check_declared(name, declared, shape)
        try:
            pixels = page.asarray()
        except Exception as exc:  # noqa: BLE001 (tifffile's own errors: the file named in one line)
            raise GpumrError(f"{name}: cannot decode projection: {exc}") from None
        if layout is not None and layout.head is None:
            layout.learn(data, tif, page, pixels)
        return pixels


def decode(name, data, i0=None, shape=None, layout=None):
    """One projection from file bytes, as float32 line integrals. Raises ``GpumrError``: unknown extension, a header
    that does not declare ``shape``, or undecodable data (the name is given).

    Parameters
    ----------
    shape : (int, int), optional
        The detector's (rows, cols): the file's header must declare this shape, checked before any pixel is decoded (a
        small file cannot make a large allocation).
    layout : Layout, optional
        A set's TIFF layout, learnt from the first of its files tifffile decodes and used for the others
        (:func:`read_set`). The result may then be read-only."""
    ext = os.path.splitext(name)[1].lower()
    if ext not in (".npy", ".tif", ".tiff", ".png"):
        raise GpumrError(f"{name}: projections must be .tif, .tiff, .png or .npy")
    if ext in (".tif", ".tiff"):
        img = _tiff(name, data, shape, layout)
    else:
        if shape is not None:
            _check_declared(name, header_shape(name, data), shape)
        try:
            if ext == ".npy":
                img = np.load(io.BytesIO(data), allow_pickle=False)
            else:
                import cv2
                img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
                if img is None:
                    raise ValueError("undecodable PNG")
        except Exception as exc:  # noqa: BLE001 (the decoders' own errors: the file named in one line)
            raise GpumrError(f"{name}: cannot decode projection: {exc}") from None
    img = np.asarray(img)
    if img.ndim != 2:
        raise GpumrError(f"{name}: a projection must be a 2-D single-channel image, got shape {img.shape}")
    img = img.astype(np.float32, copy=False)  # (a fresh array already, or the file's own bytes: decoded here)
    if i0 is not None:
        img = -np.log(np.maximum(img, 1e-6) / np.float32(i0)).astype(np.float32)
    return img


def write_set(path, projections, prefix="proj_", inputs=()):
    """Write ``projections`` (2-D, in angle order) as float TIFF records ``proj_0000.tif``... (the keys' ``prefix``)
    into the SequenceFile ``path``, under gpumr's output rule: the command's ``inputs`` are never replaced. Raises
    ``GpumrError`` if a file is in the way that gpumr did not write, or is an input."""
    with Writer(path, out=FileOutput(path, "gpumr ct phantom", inputs=inputs).begin()) as w:
        for i, p in enumerate(projections):
            w.append(f"{prefix}{i:04d}.tif", encode_tiff(p))


def read_set(paths, geometry, i0=None, keep=True, out=None):
    """All projections of the SequenceFiles ``paths``, float32 [angle, row, col], in key order. Raises ``GpumrError``:
    A count or size that does not match the geometry, a repeated key, an unreadable record or file, or a projection
    with NaN or infinite pixels (named, with its angle).

    Parameters
    ----------
    keep : bool
        False: check every projection the same way but keep none, holding one at a time (the launcher's check before
        any task); returns None.
    out : numpy.ndarray, optional
        float32 [angle, row, col] to read them into (a view of a larger array: :class:`gpumr.ct.bands.FilteredRows`
        reads them into its zero-bordered buffer) instead of a new array; returned."""
    from seqfile import SequenceFileError
    if i0 is not None:
        limits.number("--i0", i0, above=0, most=limits.MAX_I0)
    na, shape = geometry.n_angles, tuple(geometry.nDetector)
    where = ", ".join(paths)
    try:
        keys = set()
        for path in paths:
            with Reader(path, values=False) as reader:
                for key, _, _ in reader:
                    if key in keys:
                        raise GpumrError(f"{path}: projection {key} appears twice")
                    keys.add(key)
                    if len(keys) > na:
                        raise GpumrError(f"{where}: more than {na} projections, the geometry has {na} angles")
        if len(keys) != na:
            raise GpumrError(f"{where}: {len(keys)} projections, the geometry has {na} angles")
        index = {key: i for i, key in enumerate(sorted(keys))}
        if out is None:
            out = np.empty((na, *shape), np.float32) if keep else None
        elif out.shape != (na, *shape) or out.dtype != np.float32:
            raise ValueError(f"out is {out.dtype} {out.shape}, not float32 {(na, *shape)}")
        layout = Layout()  # (the set's TIFF layout, learnt from its first TIFF)
        for path in paths:
            with Reader(path) as reader:
                for key, value, _ in reader:
                    i = index.get(key)
                    if i is None:
                        raise GpumrError(f"{path}: changed while it was read")
                    img = decode(key, value, i0, shape, layout)
                    bad = img.size - np.count_nonzero(np.isfinite(img))
                    if bad:
                        raise GpumrError(f"{key}: projection {i} (angle {np.degrees(geometry.angles[i]):.2f} "
                                         f"degrees) has {bad} NaN or infinite pixel(s): it would spread to every "
                                         "voxel its rays cross")
                    if out is not None:
                        out[i] = img
    except SequenceFileError as exc:
        raise GpumrError(str(exc)) from None
    return out
