"""Packing many small files into SequenceFiles and getting them back out.

Keys are the files' paths relative to the root they were found under,
``/``-separated; values are the files' bytes. Sharding balances shards by
bytes, placing the largest files first, each on the lightest shard so far.
"""

import fnmatch
import heapq
import os
import re
import shutil
import stat
import time

from seqfile import Reader, SequenceFileError, Writer
from seqfile.atomic import swap_into_place, temp_dir_beside
from seqfile.header import MAGIC

from .. import __version__
from ..errors import GpumrError, printable
from ..sizes import human
from .inputs import expand_inputs, kind
from .keyfiles import KeyFiles, KeyRefused
from .records import open_reader
from .remote import is_remote, read_header

#: The SequenceFile header metadata key that marks a file as written by :func:`pack` (its value:
#: gpumr's version). Only such files, and folders of them, are replaced by ``--force``, and a
#: folder of them inside a packed folder is not packed again. A header entry, not a marker file,
#: so that an output folder holds nothing but its shards.
OWN = "gpumr.pack"
#: The names of the shards in a folder written by :func:`pack`.
PART = re.compile(r"part-[0-9]{5}\.seq\Z")

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def collect(sources, include=(), exclude=(), skipped=None, output=None, linked=None):
    """Find the files to pack.

    Only regular files are packed, so that packing never blocks on a FIFO
    or reads a device forever. Inside a folder, the symbolic-link policy is:
    a link to a file is followed only when its target is a regular file
    inside the same folder given as a source (the key is the link's own path);
    any other link (to a folder, outside that folder, broken, to a device) is
    skipped, and so are FIFOs, sockets and devices, each named in
    ``skipped``. A source named directly (not found by walking) is read
    wherever a link points, as long as it ends at a regular file.

    Parameters
    ----------
    sources : list of str
        Files (key: their base name) and directories (walked in sorted order;
        keys relative to the directory).
    include, exclude : list of str
        Glob patterns matched against keys; a file is kept if it matches some
        ``include`` (or there are none) and no ``exclude``.
    skipped : list, optional
        Receives ``(path, reason)`` for every entry passed over inside a folder.
    linked : list, optional
        Receives the path of every symbolic link followed inside a folder.
    output : str, optional
        The pack's own output: never taken as an input, nor its temporary twins.
        Folders of shards written by :func:`pack` (earlier outputs) are passed over too.

    Returns
    -------
    list of (str, str, int)
        ``(key, path to read, size)`` sorted by key; for a followed link, the
        path to read is its target's.

    Raises
    ------
    GpumrError
        For a missing source, a source that is not a regular file or folder,
        a file name that is not UTF-8, two files with one key, or nothing to pack.
    """
    found = {}
    skipped = [] if skipped is None else skipped
    linked = [] if linked is None else linked
    out_parent = out_name = None
    if output is not None:
        out_parent, out_name = os.path.split(os.path.realpath(output))
        twin = re.compile(r"\." + re.escape(os.fsdecode(os.fsencode(out_name)[:40])) + r"\.[0-9a-f]{8}\.(tmp|old)\Z")

    def add(key, path, size, shown_path):
        if include and not any(fnmatch.fnmatchcase(key, g) for g in include):
            return
        if any(fnmatch.fnmatchcase(key, g) for g in exclude):
            return
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise GpumrError(f"{printable(shown_path)}: the file name is not valid UTF-8, and SequenceFile keys are "
                             "UTF-8 text; rename the file or leave it out with --exclude") from None
        if key in found:
            raise GpumrError(f"duplicate key '{printable(key)}': {printable(found[key][2])} and {printable(shown_path)}")
        found[key] = (path, size, shown_path)

    def walk(top):
        real_top = os.path.realpath(top)
        stack = [(top, "")]
        while stack:
            folder, prefix = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                raise GpumrError(f"{printable(folder)}: cannot list: {exc.strerror}") from None
            if prefix and entries and all(PART.match(e.name) for e in entries) and written_by_pack(entries[0].path):
                skipped.append((folder, "an earlier gpumr pack output"))
                continue
            beside_output = out_parent is not None and os.path.realpath(folder) == out_parent
            subfolders = []
            for e in entries:
                if beside_output and (e.name == out_name or twin.match(e.name)):
                    continue
                path = e.path
                try:
                    if e.is_dir(follow_symlinks=False):
                        subfolders.append((path, prefix + e.name + "/"))
                    elif e.is_file(follow_symlinks=False):
                        add(prefix + e.name, path, e.stat(follow_symlinks=False).st_size, path)
                    elif e.is_symlink():
                        link(prefix + e.name, path, real_top)
                    else:
                        skipped.append((path, kind(e.stat(follow_symlinks=False).st_mode)))
                except FileNotFoundError:
                    skipped.append((path, "vanished while listing"))
            stack.extend(reversed(subfolders))

    def link(key, path, real_top):
        try:
            st = os.stat(path)
        except OSError:
            skipped.append((path, "a broken symbolic link"))
            return
        target = os.path.realpath(path)
        if stat.S_ISDIR(st.st_mode):
            skipped.append((path, "a symbolic link to a folder (folder links are not followed)"))
        elif not stat.S_ISREG(st.st_mode):
            skipped.append((path, f"a symbolic link to {kind(st.st_mode)}"))
        elif not target.startswith(real_top.rstrip(os.sep) + os.sep):
            skipped.append((path, f"a symbolic link to {printable(target)}, outside the folder being packed"))
        else:
            add(key, target, st.st_size, path)
            linked.append(path)

    for src in sources:
        try:
            st = os.stat(src)
        except FileNotFoundError:
            what = "a broken symbolic link" if os.path.islink(src) else "no such file or directory"
            raise GpumrError(f"{printable(src)}: {what}") from None
        except OSError as exc:
            raise GpumrError(f"{printable(src)}: cannot read: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            walk(src)
        elif stat.S_ISREG(st.st_mode):
            add(os.path.basename(src), os.path.realpath(src) if os.path.islink(src) else src, st.st_size, src)
        else:
            raise GpumrError(f"{printable(src)}: {kind(st.st_mode)}, not a regular file or folder; "
                             "pack reads only regular files")
    if not found:
        raise GpumrError(f"no input files in {', '.join(map(printable, sources))}"
                         + (" matching the --include/--exclude patterns" if include or exclude else ""))
    return sorted((k, p, s) for k, (p, s, _) in found.items())


def assign_shards(files, shards):
    """Split ``files`` into ``shards`` groups of near-equal bytes, each sorted by key."""
    shards = max(1, min(shards, len(files)))
    heap = [(0, i) for i in range(shards)]
    groups = [[] for _ in range(shards)]
    for item in sorted(files, key=lambda f: (-f[2], f[0])):
        load, i = heapq.heappop(heap)
        groups[i].append(item)
        heapq.heappush(heap, (load + item[2], i))
    return [sorted(g) for g in groups]


def pack(sources, out, shards=None, shard_size=None, include=(), exclude=(), compression="NONE",
         codec=None, force=False, progress=True):
    """Pack files into one SequenceFile, or a directory of ``part-NNNNN.seq`` shards.

    Output appears only when complete: a single file is written to a temporary
    name and renamed; shards are written into a temporary
    folder beside ``out`` that is then renamed to ``out``. With ``force``, an
    existing ``out`` is replaced only if it is an earlier output of this
    function (see :func:`check_replaceable`), and it is removed only once the
    new output is in place. What is packed follows :func:`collect`'s policy.

    Returns
    -------
    dict
        ``files``, ``bytes``, ``shards``, ``seconds``, the output ``paths``,
        ``skipped`` (``(path, reason)`` pairs), ``linked`` (symbolic links
        followed) and ``kept`` (an old output that could not be removed, or None).
    """
    from tqdm import tqdm
    skipped, linked = [], []
    sharded = shards is not None or shard_size is not None
    if os.path.lexists(out):
        if not force:
            raise GpumrError(f"{printable(out)}: already exists (use --force to replace it)")
        check_replaceable(out, sharded, sources)
    files = collect(sources, include, exclude, skipped=skipped, output=out, linked=linked)
    total = sum(f[2] for f in files)
    if shard_size is not None:
        shards = max(1, -(-total // shard_size))
    t0 = time.perf_counter()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    groups = assign_shards(files, shards) if sharded else [files]
    stage = temp_dir_beside(out) if sharded else None
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="pack", disable=None if progress else True, leave=False)
    paths = []
    kept = None
    try:
        for i, group in enumerate(groups):
            target = os.path.join(stage, f"part-{i:05d}.seq") if sharded else out
            with Writer(target, compression=compression, codec=codec, metadata={OWN: __version__}) as w:
                for key, path, size in group:
                    w.append(key, _read_regular(path))
                    bar.update(size)
            paths.append(os.path.join(out, os.path.basename(target)) if sharded else out)
        if sharded:
            old = swap_into_place(stage, out)
            stage = None
            if old is not None:
                kept = _remove_output(old)
    finally:
        bar.close()
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    return dict(files=len(files), bytes=total, shards=len(groups), paths=paths, skipped=skipped,
                linked=len(linked), kept=kept, seconds=time.perf_counter() - t0)


def _read_regular(path):
    """The bytes of regular file ``path``; never blocks on a FIFO or follows a link swapped in since."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise GpumrError(f"{printable(path)}: cannot read: {exc.strerror}") from None
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise GpumrError(f"{printable(path)}: became {kind(mode)} while packing; pack reads only regular files")
        try:
            return f.read()
        except OSError as exc:
            raise GpumrError(f"{printable(path)}: cannot read: {exc.strerror}") from None


def check_replaceable(out, sharded, sources):
    """Refuse to replace ``out`` unless it is an earlier output of :func:`pack` that holds no input.

    Replaceable are: for shards, a real folder holding nothing but
    ``part-NNNNN.seq`` regular files written by :func:`pack` (their headers
    carry :data:`OWN`); for one file, a regular file that is a SequenceFile. Never the current folder or one holding it,
    and never a path that is, or holds, one of ``sources``.

    Raises
    ------
    GpumrError
        Saying why ``out`` is not replaced.
    """
    shown = printable(out)
    real = os.path.realpath(out)
    here = os.path.realpath(os.getcwd())
    if here == real or here.startswith(real.rstrip(os.sep) + os.sep):
        raise GpumrError(f"{shown}: is the current folder or holds it; --force never replaces it")
    for src in sources:
        src_real = os.path.realpath(src)
        if src_real == real or src_real.startswith(real.rstrip(os.sep) + os.sep):
            raise GpumrError(f"{shown}: is or holds the input {printable(src)}; --force never replaces the inputs")
    st = os.lstat(out)
    if sharded:
        if not stat.S_ISDIR(st.st_mode):
            raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not an earlier gpumr pack output folder; "
                             "--force replaces only those")
        for name in sorted(os.listdir(out)):
            path = os.path.join(out, name)
            if not (PART.match(name) and stat.S_ISREG(os.lstat(path).st_mode)):
                raise GpumrError(f"{shown}: holds {printable(name)}, which gpumr pack did not make; --force replaces "
                                 "only a folder of part-NNNNN.seq files written by gpumr pack: remove it yourself "
                                 "or choose another folder")
            if not written_by_pack(path):
                raise GpumrError(f"{shown}: {printable(name)} was not written by gpumr pack (its header has no "
                                 f"{OWN} entry); --force replaces only gpumr pack's own output: remove it yourself "
                                 "or choose another folder")
    else:
        if not stat.S_ISREG(st.st_mode):
            raise GpumrError(f"{shown}: is {kind(st.st_mode)}, not a SequenceFile; --force replaces only SequenceFiles")
        with open(out, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise GpumrError(f"{shown}: not a SequenceFile; --force replaces only SequenceFiles")


def written_by_pack(path):
    """Whether ``path`` (a local path or a URI) is a SequenceFile whose header says :func:`pack` wrote it."""
    try:
        if is_remote(path):
            return OWN in read_header(path).metadata
        with Reader(path) as reader:
            return OWN in reader.header.metadata
    except (OSError, SequenceFileError, GpumrError):
        return False


def check_replaceable_uri(uri, kind, names, sharded):
    """Refuse to replace what is at ``uri`` unless it is an earlier :func:`pack` output (``pack -o URI --force``).

    Replaceable are: for shards, a folder holding nothing but ``part-NNNNN.seq``
    files; for one file, a file; either way every file's SequenceFile header
    (read through :mod:`gpumr.io.remote`) must carry :data:`OWN`. ``kind`` and
    ``names`` say what is there (see :func:`gpumr.io.remote.put`).

    Raises
    ------
    GpumrError
        Saying why ``uri`` is not replaced.
    """
    shown = printable(uri)
    want = "folder" if sharded else "file"
    if kind != want:
        raise GpumrError(f"{shown}: is a {kind}, not an earlier gpumr pack output {want}; --force replaces only those")
    for name in names:
        if sharded and not PART.match(name):
            raise GpumrError(f"{shown}: holds {printable(name)}, which gpumr pack did not make; --force replaces only "
                             "a folder of part-NNNNN.seq files written by gpumr pack: remove it yourself or choose "
                             "another destination")
        path = f"{uri.rstrip('/')}/{name}" if name else uri
        if not written_by_pack(path):
            raise GpumrError(f"{printable(path)}: was not written by gpumr pack (its header has no {OWN} entry); "
                             "--force replaces only gpumr pack's own output")


def _remove_output(old):
    """Remove an old pack output folder set aside by the swap: only the files pack makes.

    Returns ``old`` if something else appeared in it meanwhile (it is then kept), else None.
    """
    for name in os.listdir(old):
        if PART.match(name):
            os.unlink(os.path.join(old, name))
    try:
        os.rmdir(old)
    except OSError:
        return old
    return None


def unpack(files, directory, progress=True, force=False, on_refused=None, max_record_size=None):
    """Write every record of ``files`` as ``directory/<key>``, each file atomically.

    ``max_record_size`` is the reader's size cap (256 MiB by default).

    Nothing is written outside ``directory``, through a symbolic link, or
    over an existing file (unless ``force``, and then only over a regular
    file); see :class:`gpumr.io.keyfiles.KeyFiles`. A refused key (and a
    duplicate key: the first record is kept) is passed to ``on_refused``
    as a one-line message and the other records are still written.

    Returns
    -------
    dict
        ``records`` and ``bytes`` written, ``refused`` (how many keys).

    Raises
    ------
    GpumrError
        A refused key, when ``on_refused`` is None.
    """
    from tqdm import tqdm
    count = nbytes = refused = 0
    with KeyFiles(directory, force=force) as out:
        for path in expand_inputs(files):
            with open_reader(path, max_record_size=max_record_size) as reader:
                _require_text_keys(reader, path)
                for rec in tqdm(reader, desc=os.path.basename(path), unit="rec", disable=None if progress else True,
                                leave=False):
                    try:
                        out.write(rec.key, rec.value)
                    except KeyRefused as exc:
                        if on_refused is None:
                            raise
                        refused += 1
                        on_refused(str(exc))
                        continue
                    count += 1
                    nbytes += len(rec.value)
    return dict(records=count, bytes=nbytes, refused=refused)


def _require_text_keys(reader, path):
    if reader.header.key_class != "org.apache.hadoop.io.Text":
        raise GpumrError(f"{path}: keys are {reader.header.key_class}, not Text file names")


def info(path, max_record_size=None):
    """Header facts, record count and byte totals of one SequenceFile, path or URI (values measured, not read)."""
    with open_reader(path, values=False, max_record_size=max_record_size) as reader:
        h = reader.header
        count = value_bytes = 0
        for rec in reader:
            count += 1
            value_bytes += rec.value
    return dict(path=path, version=6, key_class=h.key_class, value_class=h.value_class,
                compression=h.compression, codec=h.codec, metadata=h.metadata,
                sync=h.sync.hex(), header_bytes=h.size, records=count,
                value_bytes=value_bytes, file_bytes=reader.file_size)


def describe(stats):
    """One line about a finished pack."""
    rate = stats["bytes"] / max(stats["seconds"], 1e-9)
    return (f"packed {stats['files']} files ({human(stats['bytes'])}) into {stats['shards']} "
            f"SequenceFile{'s' if stats['shards'] != 1 else ''} in {stats['seconds']:.2f} s "
            f"({human(rate)}/s)")


__all__ = ["collect", "assign_shards", "pack", "unpack", "info", "describe"]
