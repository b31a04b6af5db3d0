"""Input paths as users give them: files, or folders of files, local or at URIs."""


import os

from seqfile.header import MAGIC

from .. import limits
from ..errors import GpumrError
from ..sizes import human
from .remote import READ_FLAGS, locate, shown  # noqa: F401 (READ_FLAGS: where gpumr's callers import it)


def expand_inputs(paths):
    """The files named by ``paths``: files as given, folders' visible files sorted. Raises ``GpumrError`` if a path
    does not exist, is not a regular file, or no file is found."""
    return [path for path, _ in expand_sized(paths)]


def expand_sized(paths):
    """Like :func:`expand_inputs`, as ``(path, size in bytes)`` pairs."""
    out = []
    for p in paths:
        out += [(str(loc), size) for loc, size in locate(p).list_files()]
    if not out:
        folders = [p for p in paths if locate(p).local is not None and os.path.isdir(locate(p).local)]
        if folders and any(os.path.isdir(os.path.join(locate(f).local, n)) for f in folders
                           for n in os.listdir(locate(f).local)):
            f = folders[0]
            raise GpumrError(f"{shown(f)}: holds folders, no files: the inputs are SequenceFiles (a folder's files "
                             f"are read, not its subfolders); pack the images first: {pack_command(f)}")
        raise GpumrError(f"no files in {', '.join(shown(p) for p in paths)}")
    return out


def splits(files, split_size):
    """``(path, start, end)`` byte ranges of at most ``split_size`` covering each file, Hadoop's splits. Raises
    ``GpumrError``: naming the split size that keeps the job within the limit.

    Examples
    --------
    >>> splits([("a.seq", 100), ("b.seq", 0)], 64)
    [('a.seq', 0, 64), ('a.seq', 64, 100), ('b.seq', 0, 0)]
    """
    if len(files) > limits.MAX_SPLITS:
        raise GpumrError(f"{len(files)} input files: each is at least one task, over the limit of "
                         f"{limits.MAX_SPLITS}; pack them into fewer SequenceFiles (gpumr pack --shards N)")
    count = sum(1 if size is None else max(1, -(-size // split_size)) for _, size in files)
    if count > limits.MAX_SPLITS:
        total = sum(size or 0 for _, size in files)
        need = -(-total // max(1, limits.MAX_SPLITS - len(files)) // (1 << 20)) << 20  # enough, in whole MiB
        raise GpumrError(f"--split-size {split_size}: {count} splits of {human(total)} of input, over the limit of "
                         f"{limits.MAX_SPLITS} tasks; use --split-size {need >> 20}MiB or more")
    out = []
    for path, size in files:
        if size is None:
            out.append((path, 0, None))
            continue
        for start in range(0, max(size, 1), split_size):
            out.append((path, start, min(start + split_size, size)))
    return out


def pack_command(folder):
    """The ``gpumr pack`` command that packs ``folder``'s files into one SequenceFile beside the folder.

    Examples
    --------
    >>> pack_command("frames/")
    'gpumr pack frames/ -o frames.seq'
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as top:
    ...     os.mkdir(os.path.join(top, "frames"))
    ...     here = os.getcwd()
    ...     os.chdir(os.path.join(top, "frames"))
    ...     try:
    ...         print(pack_command("."))
    ...     finally:
    ...         os.chdir(here)
    gpumr pack . -o ../frames.seq
    """
    name = shown(folder)
    stem = name.rstrip("/")
    if os.path.basename(stem) in ("", ".", ".."):
        local = locate(folder).local
        own = os.path.basename(os.path.abspath(local)) if local else ""
        stem = os.path.normpath(os.path.join(stem or "/", "..", own or "images"))
    return f"gpumr pack {name} -o {stem}.seq"


def require_sequencefiles(files, given=None):
    """Refuse inputs none of which is a SequenceFile (their first bytes are read until one is), with the hint to pack
    (the folder of ``given``, the first input as the user gave it, where there is one). Raises ``GpumrError``: ``no
    SequenceFile among the inputs: a.jpg (a JPEG image), ...; pack files first: gpumr pack ...``."""
    if any(looks_like_sequencefile(f) for f in files):
        return
    kinds = [describe_file(f) for f in files]
    shown_files = ", ".join(f"{shown(f)} ({k})" for f, k in zip(files[:3], kinds)) + (" ..." if len(files) > 3 else "")
    if any(k == GEOMETRY for k in kinds):
        fix = ("a CT geometry is read by gpumr run backproject --projections SEQ --geometry JSON (it makes its own "
               "records: no inputs)")
    elif any(k.endswith(" image") for k in kinds):
        first = given or files[0]
        local = locate(first).local
        if local is not None and not os.path.isdir(local) and not os.path.dirname(first):  # (a file here: not all here)
            fix = f"pack files first: gpumr pack {shown(first)} -o {os.path.splitext(shown(first))[0]}.seq"
        else:
            fix = f"pack files first: {pack_command(first if local is not None and os.path.isdir(local) else os.path.dirname(first))}"
    else:
        fix = "inputs are SequenceFiles of records: gpumr pack FOLDER -o FILE.seq makes one of a folder of files"
    raise GpumrError(f"no SequenceFile among the inputs: {shown_files}; {fix}")


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
    if head.lstrip()[:1] in (b"{", b"["):
        text = _head(path, 4096)
        return GEOMETRY if shown(path).endswith(".geometry.json") or b'"DSO"' in bytes(text or b"") else "JSON text"
    return f"not a SequenceFile (starts with {head[:4]!r})"


#: What :func:`describe_file` calls a CT geometry file.
GEOMETRY = "a CT geometry (JSON)"
