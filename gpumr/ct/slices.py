"""Slices as job output records, and assembling them into a volume.

A slice travels as ``"00012"<TAB>{"z": 12, "nz": 256, "shape": [ny, nx],
"device": ..., "data": base64(zlib(float32 little-endian))}``; the zero-padded
key makes the identity reducer's sort the slice order.
"""

import base64
import zlib

import numpy as np

from .. import limits
from ..errors import GpumrError
from ..io.outputs import FileOutput, write_file


def encode_slice(z, nz, image, device):
    """The output value of slice ``z`` of ``nz``.

    Parameters
    ----------
    z : int
        The slice's index in the volume.
    nz : int
        Slices in the whole volume.
    image : numpy.ndarray
        The slice [y, x].
    device : str
        Where it was computed (``cpu``, ``gpu:N``).

    Returns
    -------
    dict
        ``z``, ``nz``, ``shape``, ``device`` and ``data``: the float32
        little-endian pixels, zlib-compressed, base64.
    """
    data = np.ascontiguousarray(image, dtype="<f4").tobytes()
    return {"z": int(z), "nz": int(nz), "shape": list(image.shape), "device": device,
            "data": base64.b64encode(zlib.compress(data, 1)).decode("ascii")}


def slice_key(z):
    return f"{z:05d}"


def decode_slice(value, where="slice"):
    """``(z, nz, image)`` from an output value, its sizes checked before anything is decompressed.

    Parameters
    ----------
    value : dict
        A slice record's value (:func:`encode_slice`).
    where : str, optional
        What to name in an error (the record's key).

    Returns
    -------
    (int, int, numpy.ndarray)
        The slice's index, the volume's slice count, and the float32 image [y, x].

    Raises
    ------
    GpumrError
        Naming ``where`` and the field: a size out of :mod:`gpumr.limits`, or data that does not
        decompress to exactly the image the shape declares.
    """
    missing = [k for k in ("z", "nz", "shape", "data") if k not in value]
    if missing:
        raise GpumrError(f"{where}: not a slice: no {', '.join(missing)}")
    nz = limits.number(f"{where}: nz", value["nz"], 1, limits.MAX_VOXEL_SIDE, integer=True)
    z = limits.number(f"{where}: z", value["z"], 0, nz - 1, integer=True)
    shape = value["shape"]
    if not isinstance(shape, list) or len(shape) != 2:
        raise GpumrError(f"{where}: shape must be a list of 2 numbers, not {limits.shown(shape)}")
    ny, nx = (limits.number(f"{where}: shape[{i}]", n, 1, limits.MAX_VOXEL_SIDE, integer=True)
              for i, n in enumerate(shape))
    size = ny * nx * 4
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(value["data"], validate=True), size + 1)
    except (TypeError, ValueError, zlib.error) as exc:
        raise GpumrError(f"{where}: data is not base64 of zlib data: {exc}") from None
    if len(raw) != size or not inflate.eof:
        raise GpumrError(f"{where}: data does not hold the {ny}x{nx} float32 image its shape declares")
    return z, nz, np.frombuffer(raw, "<f4").reshape(ny, nx)


def assemble(results):
    """A volume [z, y, x] from slice records.

    Parameters
    ----------
    results : iterable of (str, dict)
        ``(key, value)`` of every slice record, in any order, e.g.
        :func:`gpumr.io.joboutput.read_job_output` of a job's output.

    Returns
    -------
    numpy.ndarray
        float32, shape (nz, ny, nx).

    Raises
    ------
    GpumrError
        For missing or duplicate slices (naming them), records that are not
        slices (an ``error`` record's reason included), or a volume over
        :data:`gpumr.limits.MAX_VOXELS`.
    """
    seen = {}
    nz = shape = None
    for key, value in results:
        if not isinstance(value, dict) or "data" not in value:
            err = value.get("error") if isinstance(value, dict) else None
            raise GpumrError(f"record {key!r} is not a slice" + (f" (the job reported: {err})" if err else ""))
        z, n, img = decode_slice(value, f"record {key!r}")
        if nz is None:
            nz, shape = n, img.shape
            limits.at_most(f"record {key!r}: {nz} slices of {shape[0]}x{shape[1]}", nz * shape[0] * shape[1],
                           limits.MAX_VOXELS, "voxels")
        if n != nz:
            raise GpumrError(f"slice {z} says the volume has {n} slices, others say {nz}")
        if img.shape != shape:
            raise GpumrError(f"slice {z} is {img.shape[0]}x{img.shape[1]}, others are {shape[0]}x{shape[1]}")
        if z in seen:
            raise GpumrError(f"duplicate slice {z}")
        seen[z] = img
    if not seen:
        raise GpumrError("no slices in the job output")
    missing = sorted(set(range(nz)) - set(seen))
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        raise GpumrError(f"missing {len(missing)} slice(s) of {nz}: {shown}")
    return np.stack([seen[z] for z in range(nz)])


def save_volume(volume, path, tiff=None, inputs=()):
    """Write ``volume`` as .npy (and a float32 TIFF stack at ``tiff``) under gpumr's output rule.

    Each file appears whole or not at all and replaces only an earlier
    gpumr output, never one of ``inputs`` (:class:`gpumr.io.outputs.FileOutput`).

    Parameters
    ----------
    volume : numpy.ndarray
        The volume [z, y, x].
    path : str
        The ``.npy`` file.
    tiff : str, optional
        A multi-page TIFF to write as well.
    inputs : sequence of str, optional
        The command's inputs, which are never replaced.

    Raises
    ------
    GpumrError
        If a file is in the way that gpumr did not write, or is an input.
    """
    with FileOutput(path, "gpumr ct", inputs=inputs) as f:
        np.save(f, volume.astype(np.float32, copy=False))
    if tiff:
        import tifffile
        with FileOutput(tiff, "gpumr ct", inputs=inputs, option="--tiff") as f:
            tifffile.imwrite(f, volume.astype(np.float32, copy=False))


def preview(volume, path, inputs=()):
    """A PNG of the three central orthogonal slices (axial, coronal, sagittal), labelled, with a colour bar.

    Drawn by :func:`gpumr.ct.preview.preview_image` (each slice at least 256
    pixels, axes in voxel indices, grey levels from the volume's 1st to 99.5th
    percentile); the file is written as :func:`save_volume` writes.

    Parameters
    ----------
    volume : numpy.ndarray
        The volume [z, y, x].
    path : str
        The PNG file.
    inputs : sequence of str, optional
        The command's inputs, which are never replaced.

    Raises
    ------
    GpumrError
        If a file is in the way that gpumr did not write, or is an input.
    """
    from .preview import preview_png
    write_file(path, preview_png(volume), "gpumr ct", inputs=inputs, option="--preview")
