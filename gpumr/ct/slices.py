"""The CT job's output read back: slabs of binary float32, joined into one volume at disk speed."""

import hashlib

import numpy as np

from .. import limits
from ..errors import GpumrError
from ..io.outputs import FileOutput, Proof, proof_path, write_file

_COPY = 8 << 20
#: The .npy versions numpy writes with a plain header (1.0; 2.0 where the header is over 64 KiB).
_VERSIONS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def slab_key(z0):
    """The output key of the slab starting at slice ``z0``: zero-padded, so that sorting keys sorts slabs.

    Examples
    --------
    >>> slab_key(16)
    'z00016'
    """
    return f"z{z0:05d}"


def _proof(folder, proofs):
    """The proof beside the job output ``folder`` (read once, kept in ``proofs``). Raises ``GpumrError`` when there is
    none: without it no slab can be checked."""
    if folder not in proofs:
        from ..io.remote import shown
        where = proof_path(folder)
        proofs[folder] = Proof.load(where)
        if proofs[folder] is None:
            raise GpumrError(f"{shown(folder)}: no proof beside it ({shown(where)}), so its slabs cannot be checked: "
                             "assemble the output with the proof the job wrote beside it")
    return proofs[folder]


def slabs(results, folders):
    """``[(z0, z1, nz, location of the .npy, the proof beside its output, its name there)]`` of a job's slab lines,
    sorted, and the volume's shape, after checking they cover the volume. Raises ``GpumrError`` naming what is wrong:
    a line that is not a slab (an ``error`` line's reason included), slabs of different volumes or sizes, missing or
    overlapping slices, a volume over :data:`gpumr.limits.MAX_VOXELS`, an output without its proof, a slab its proof
    does not list at that size.

    Parameters
    ----------
    results : iterable of (str, dict)
        ``(key, value)`` of every line of the job's output (:func:`gpumr.io.joboutput.read_job_output`).
    folders : list of str
        The output folders (or URIs) the lines came from: their ``arrays/`` hold the slabs."""
    from ..io.remote import locate
    found, nz, shape, proofs = [], None, None, {}
    for key, value in results:
        slab = value.get("slab") if isinstance(value, dict) else None
        if not isinstance(slab, dict) or "array" not in slab or "z" not in value or "nz" not in value:
            err = value.get("error") if isinstance(value, dict) else None
            raise GpumrError(f"record {key!r} is not a slab" + (f" (the job reported: {err})" if err else ""))
        n = limits.number(f"record {key!r}: nz", value["nz"], 1, limits.MAX_VOXEL_SIDE, integer=True)
        z0, z1 = (limits.number(f"record {key!r}: z", z, 0, n, integer=True) for z in value["z"])
        dims = slab.get("shape")
        if not (isinstance(dims, list) and len(dims) == 3 and dims[0] == z1 - z0 and z0 < z1):
            raise GpumrError(f"record {key!r}: shape {limits.shown(dims)} does not hold slices {z0}-{z1}")
        ny, nx = (limits.number(f"record {key!r}: shape", d, 1, limits.MAX_VOXEL_SIDE, integer=True) for d in dims[1:])
        if nz is None:
            nz, shape = n, (ny, nx)
            limits.at_most(f"record {key!r}: {nz} slices of {ny}x{nx}", nz * ny * nx, limits.MAX_VOXELS, "voxels")
        if (n, (ny, nx)) != (nz, shape):
            raise GpumrError(f"record {key!r}: a slab of a {n}x{ny}x{nx} volume; others are of {nz}x{shape[0]}x{shape[1]}")
        if slab.get("dtype") != "<f4":
            raise GpumrError(f"record {key!r}: slab of dtype {limits.shown(slab.get('dtype'))}, not float32 (<f4)")
        name = slab["array"]
        if not isinstance(name, str) or not name.startswith("arrays/") or ".." in name.split("/"):
            raise GpumrError(f"record {key!r}: names {limits.shown(name)}, not a file of the output's arrays/")
        own = f"arrays/{slab_key(z0)}.slab.npy"
        if key != slab_key(z0) or name != own:  # (each slab in the file named for its first slice)
            raise GpumrError(f"record {key!r}: slices {z0}-{z1} in {limits.shown(name)}; the job writes them as "
                             f"record {slab_key(z0)!r}, in {own}")
        here = None
        for folder in folders:
            loc = locate(folder).child(name)
            what, size = loc.stat()
            if what == "file":
                here = loc
                break
        if here is None:
            raise GpumrError(f"record {key!r}: its slab {name} is in none of {', '.join(map(str, folders))}")
        proof = _proof(folder, proofs)
        if not proof.lists(name):
            raise GpumrError(f"{here.shown}: not a slab the output's proof lists")
        if size is not None and not proof.has_size(name, size):  # (through ``hadoop fs``: no size, the hash tells)
            raise GpumrError(f"{here.shown}: {size} bytes, not the size the output's proof lists")
        found.append((z0, z1, nz, here, proof, name))
    if not found:
        raise GpumrError("no slabs in the job output")
    found.sort(key=lambda s: s[0])
    at = 0
    for z0, z1, *_ in found:
        if z0 != at:
            raise GpumrError(f"slices {at}-{z0} are missing" if z0 > at else f"slices {z0}-{min(z1, at)} come twice")
        at = z1
    if at != nz:
        raise GpumrError(f"slices {at}-{nz} are missing")
    return found, (nz, *shape)


def assemble(results, folders, path, inputs=()):
    """Join a job's slabs into the volume ``path`` (.npy, float32 ``[z, y, x]``), copying their bytes in order. Raises
    ``GpumrError`` as :func:`slabs`; and naming a slab that is not the one its job wrote.

    Returns
    -------
    tuple of int
        The volume's shape."""
    from concurrent.futures import ThreadPoolExecutor
    parts, shape = slabs(results, folders)
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    buffer = memoryview(bytearray(_COPY))
    with FileOutput(path, "gpumr ct", inputs=inputs) as out, ThreadPoolExecutor(1) as hasher:
        np.lib.format.write_array_header_1_0(out, header)
        for z0, z1, _, loc, proof, rel in parts:
            with loc.open_input(follow=False) as raw:
                f = _Hashed(raw)
                _check_header(f, loc, z0, z1, shape)
                left = (z1 - z0) * shape[1] * shape[2] * 4
                while left:
                    n = raw.readinto(buffer[:min(_COPY, left)])
                    if not n:
                        raise GpumrError(f"{loc.shown}: ends before its {z1 - z0} slices")
                    hashed = hasher.submit(f.sha.update, buffer[:n])  # (while it is written: a second core)
                    try:
                        out.write(buffer[:n])
                    finally:
                        hashed.result()
                    f.size += n
                    left -= n
                if raw.read(1) or not proof.vouches(rel, (f.size, f.sha.hexdigest())):
                    raise GpumrError(f"{loc.shown}: not the slab its job wrote (its SHA-256 is not the one the "
                                     "output's proof lists): copied from another output, or changed since")
    return shape


class _Hashed:
    """A binary file read through: :attr:`size` and :attr:`sha` (SHA-256) of what was read."""

    def __init__(self, f):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def read(self, n=-1):
        data = self.f.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def readinto(self, buffer):
        n = self.f.readinto(buffer)
        self.sha.update(buffer[:n])
        self.size += n
        return n


def _check_header(f, loc, z0, z1, shape):
    """Read the .npy header of slab ``loc`` (slices ``z0``-``z1``) from ``f``; GpumrError naming the slab unless it is
    a plain float32 array of the slab's shape (nothing is ever unpickled)."""
    try:
        version = np.lib.format.read_magic(f)
    except ValueError:
        raise GpumrError(f"{loc.shown}: does not begin as a .npy file does, not a slab gpumr wrote") from None
    try:
        got, fortran, dtype = _VERSIONS[version](f)
    except (KeyError, ValueError, TypeError, SyntaxError):
        raise GpumrError(f"{loc.shown}: not the .npy header of a float32 slab (version {version[0]}.{version[1]}, "
                         "a header numpy does not read as it writes a slab's)") from None
    if got != (z1 - z0, *shape[1:]) or fortran or dtype != np.dtype("<f4"):
        raise GpumrError(f"{loc.shown}: holds a {dtype} array of shape {got}, not the slab "
                         f"{z0}-{z1} of {shape[1]}x{shape[2]} its line names")


def save_volume(volume, path, tiff=None, inputs=()):
    """Write ``volume`` [z, y, x] as the .npy file ``path`` (and a float32 multi-page TIFF at ``tiff``) under gpumr's
    output rule: the command's ``inputs`` are never replaced. Raises ``GpumrError`` if a file is in the way that gpumr
    did not write, or is an input."""
    with FileOutput(path, "gpumr ct", inputs=inputs) as f:
        np.save(f, volume.astype(np.float32, copy=False))
    if tiff:
        save_tiff(volume, tiff, inputs)


def save_tiff(volume, path, inputs=()):
    """Write ``volume`` as a float32 multi-page TIFF under gpumr's output rule (``--tiff``)."""
    import tifffile
    with FileOutput(path, "gpumr ct", inputs=inputs, option="--tiff") as f:
        tifffile.imwrite(f, np.asarray(volume, dtype=np.float32))


def preview(volume, path, inputs=()):
    """Write a PNG of ``volume``'s three central orthogonal slices (axial, coronal, sagittal), labelled, with a colour
    bar, at ``path`` under gpumr's output rule: the command's ``inputs`` are never replaced. Raises ``GpumrError`` if
    a file is in the way that gpumr did not write, or is an input."""
    from .preview import preview_png
    write_file(path, preview_png(volume), "gpumr ct", inputs=inputs, option="--preview")
