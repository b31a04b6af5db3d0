"""Input paths as users give them: files, or folders of files, local or at URIs.

A folder stands for its visible files (not those starting with ``.`` or
``_``, which Hadoop also hides: ``_SUCCESS``, ``.crc`` files), sorted; files
are taken as given. A URI (``s3://``, ``hdfs://``, ``file://`` ...) is listed
the same way through :mod:`gpumr.io.remote`. Every command and job expands
its inputs here.
"""


from seqfile.header import MAGIC

from ..errors import GpumrError
from .remote import READ_FLAGS, locate, shown  # noqa: F401 (READ_FLAGS: where gpumr's callers import it)



def expand_inputs(paths):
    """The files named by ``paths``: files as given, folders' visible files sorted.

    Only regular files are read (a FIFO or a device could block or never
    end); anything else, given or found in a folder, is refused by name
    rather than skipped. Sub-folders of a folder are not entered. URIs
    stay URIs (see :func:`expand_sized`).

    Raises
    ------
    GpumrError
        If a path does not exist, is not a regular file, or no file is found.
    """
    return [path for path, _ in expand_sized(paths)]


def expand_sized(paths):
    """Like :func:`expand_inputs`, as ``(path, size in bytes)`` pairs.

    Each path is listed through the filesystem layer
    (:meth:`gpumr.io.remote.Location.list_files`); a size is None where the
    ``hadoop fs`` fallback listed a URI.
    """
    out = []
    for p in paths:
        out += [(str(loc), size) for loc, size in locate(p).list_files()]
    if not out:
        raise GpumrError(f"no files in {', '.join(shown(p) for p in paths)}")
    return out


def is_file(path):
    """Whether a file is at ``path``, a local path or a URI (False where that cannot be found out)."""
    try:
        return locate(path).stat()[0] == "file"
    except GpumrError:
        return False


def looks_like_sequencefile(path):
    """Whether ``path`` (a path or URI) starts with a SequenceFile's magic bytes ``SEQ``."""
    return _head(path, len(MAGIC)) == MAGIC


def _head(path, n):
    """The first ``n`` bytes of the regular file at ``path`` (through the filesystem layer), or the GpumrError."""
    try:
        with locate(path).open_input(4096) as f:
            return f.read(n)
    except GpumrError as exc:
        return exc


def describe_file(path):
    """A few words on what ``path`` holds, for errors about files that are not SequenceFiles."""
    head = _head(path, 16)
    if isinstance(head, GpumrError):
        return f"unreadable ({str(head).rpartition(': ')[2]})"
    if not head:
        return "empty"
    for magic, kind in ((b"\xff\xd8\xff", "a JPEG image"), (b"\x89PNG", "a PNG image"), (b"II*\x00", "a TIFF image"),
                        (b"MM\x00*", "a TIFF image"), (b"\x1f\x8b", "a gzip file"), (b"PK\x03\x04", "a zip file")):
        if head.startswith(magic):
            return kind
    return f"not a SequenceFile (starts with {head[:4]!r})"
