"""Slices as job output records, and assembling them into a volume.

A slice travels as ``"00012"<TAB>{"z": 12, "nz": 256, "shape": [ny, nx],
"device": ..., "data": base64(zlib(float32 little-endian))}``; the zero-padded
key makes the identity reducer's sort the slice order.
"""

import base64
import zlib

import numpy as np

from ..errors import GpumrError
from ..io.outputs import FileOutput, write_file


def encode_slice(z, nz, image, device):
    """The output value of slice ``z`` of ``nz``."""
    data = np.ascontiguousarray(image, dtype="<f4").tobytes()
    return {"z": int(z), "nz": int(nz), "shape": list(image.shape), "device": device,
            "data": base64.b64encode(zlib.compress(data, 1)).decode("ascii")}


def slice_key(z):
    return f"{z:05d}"


def decode_slice(value):
    """``(z, nz, image)`` from an output value."""
    raw = zlib.decompress(base64.b64decode(value["data"]))
    return value["z"], value["nz"], np.frombuffer(raw, "<f4").reshape(value["shape"])


def assemble(results):
    """A volume [z, y, x] from ``{key: value}`` slice records.

    Raises
    ------
    GpumrError
        For missing or duplicate slices (naming them) or records that are not slices.
    """
    seen = {}
    nz = None
    for key, value in results:
        if not isinstance(value, dict) or "data" not in value:
            err = value.get("error") if isinstance(value, dict) else None
            raise GpumrError(f"record {key!r} is not a slice" + (f" (the job reported: {err})" if err else ""))
        z, n, img = decode_slice(value)
        nz = n if nz is None else nz
        if n != nz:
            raise GpumrError(f"slice {z} says the volume has {n} slices, others say {nz}")
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
    """
    with FileOutput(path, "gpumr ct", inputs=inputs) as f:
        np.save(f, volume.astype(np.float32, copy=False))
    if tiff:
        import tifffile
        with FileOutput(tiff, "gpumr ct", inputs=inputs, option="--tiff") as f:
            tifffile.imwrite(f, volume.astype(np.float32, copy=False))


def preview(volume, path, inputs=()):
    """A PNG of the three central orthogonal slices (axial, coronal, sagittal), side by side (see :func:`save_volume`)."""
    import cv2
    nz, ny, nx = volume.shape
    views = [volume[nz // 2], volume[:, ny // 2, :], volume[:, :, nx // 2]]
    lo, hi = np.percentile(volume, [1, 99.5])
    hi = hi if hi > lo else lo + 1
    tiles = []
    size = max(nx, ny, nz)
    for v in views:
        img = np.clip((v - lo) / (hi - lo), 0, 1)
        img = cv2.resize((img * 255).astype(np.uint8), (size, size), interpolation=cv2.INTER_NEAREST)
        tiles.append(np.pad(img, 4, constant_values=40))
    ok, buf = cv2.imencode(".png", np.concatenate(tiles, axis=1))
    write_file(path, buf.tobytes(), "gpumr ct", inputs=inputs, option="--preview")
