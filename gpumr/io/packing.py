"""Packing many small files into SequenceFiles and getting them back out."""

import fnmatch
import heapq
import os
import re
import stat
import time

from seqfile import Writer

from .. import __version__
from ..errors import GpumrError, printable
from ..sizes import human
from .inputs import READ_FLAGS, expand_inputs
from .keyfiles import KeyFiles, KeyRefused
from .outputs import PACK_PART as PART
from .outputs import SEQFILE_MARK as OWN
from .outputs import FileOutput, FolderOutput, is_proof, marked_sequencefile
from .records import open_reader
from .remote import kind

# A SequenceFile written by :func:`pack` carries its proof of authorship in its header (metadata
# OWN, "gpumr.pack": gpumr's version), so that an output folder holds nothing but its shards; a
# folder of them inside a packed folder is not packed again.



def collect(sources, include=(), exclude=(), skipped=None, output=None, linked=None):
    """Find the files to pack. Raises ``GpumrError`` for a missing source, a source that is not a regular file or
    folder, a file name that is not UTF-8, two files with one key, or nothing to pack.

    Parameters
    ----------
    sources : list of str
        Files (key: their base name) and directories (walked in sorted order; keys relative to the directory).
    include, exclude : list of str
        Glob patterns matched against keys; a file is kept if it matches some ``include`` (or there are none) and no
        ``exclude``.
    skipped : list, optional
        Receives ``(path, reason)`` for every entry passed over inside a folder.
    linked : list, optional
        Receives the path of every symbolic link followed inside a folder.
    output : str, optional
        The pack's own output: never taken as an input, nor its temporary twins. Folders of shards written by
        :func:`pack` (earlier outputs) are passed over too.

    Returns
    -------
    list of (str, str, int)
        ``(key, path to read, size)`` sorted by key; for a followed link, the path to read is its target's."""
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
            if prefix and entries and all(PART.match(e.name) for e in entries) and marked_sequencefile(entries[0].path):
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
                        if e.name.startswith(".") and e.name.endswith(".gpumr") and is_proof(path):
                            skipped.append((path, "gpumr's proof of authorship of the output beside it"))
                            continue
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
         codec=None, force=False, progress=True, plan=None):
    """Pack files into one SequenceFile, or a directory of ``part-NNNNN.seq`` shards.

    Parameters
    ----------
    plan : callable, optional
        Called with the bytes of the files going into each shard (into the one file), before anything is written: it
        may refuse the plan (``gpumr pack -o URI``: a shard too large to publish there).

    Returns
    -------
    dict
        ``files``, ``bytes``, ``shards``, ``seconds``, the output ``paths``, ``skipped`` (``(path, reason)`` pairs),
        ``linked`` (symbolic links followed) and ``kept`` (an old output folder that held more than its shards, kept,
        or None)."""
    from tqdm import tqdm
    skipped, linked = [], []
    sharded = shards is not None or shard_size is not None
    if sharded:
        output = FolderOutput(out, "gpumr pack", inputs=sources, replace=force, pack_parts=True)
    else:
        output = FileOutput(out, "gpumr pack", inputs=sources, replace=force, proves_itself=True)
    files = collect(sources, include, exclude, skipped=skipped, output=out, linked=linked)
    total = sum(f[2] for f in files)
    if shard_size is not None:
        shards = max(1, -(-total // shard_size))
    t0 = time.perf_counter()
    groups = assign_shards(files, shards) if sharded else [files]
    if plan is not None:
        plan([sum(size for _, _, size in group) for group in groups])
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="pack", disable=None if progress else True, leave=False)
    paths = []

    def write(target, group, through=None):
        with Writer(target, compression=compression, codec=codec, metadata={OWN: __version__}, out=through) as w:
            for key, path, size in group:
                fd, st = _open_regular(path)
                try:
                    # copied by the kernel where it can; else (a file that changed size, a small one) read
                    if not w.append_file(key, fd, st.st_size):
                        w.append(key, _read_fd(path, fd, st.st_size))
                except OSError as exc:
                    raise GpumrError(f"{printable(path)}: cannot read: {exc.strerror}") from None
                finally:
                    os.close(fd)
                bar.update(size)

    try:
        if sharded:
            with output as stage:
                for i, group in enumerate(groups):
                    write(os.path.join(stage, f"part-{i:05d}.seq"), group)
                    paths.append(os.path.join(out, f"part-{i:05d}.seq"))
        else:
            write(out, files, through=output.begin())
            paths.append(out)
    finally:
        bar.close()
    return dict(files=len(files), bytes=total, shards=len(groups), paths=paths, skipped=skipped,
                linked=len(linked), kept=output.kept if sharded else None, seconds=time.perf_counter() - t0)


def _open_regular(path):
    """``(descriptor, fstat)`` of regular file ``path``, opened without blocking on a FIFO or following a link
    swapped in since it was listed; the caller closes it."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        raise GpumrError(f"{printable(path)}: cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GpumrError(f"{printable(path)}: became {kind(st.st_mode)} while packing; pack reads only regular "
                             "files")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_fd(path, fd, size):
    """The bytes of open file ``fd`` from its offset to its end (``size`` expected; a file that grew meanwhile
    is read to its end), straight from the descriptor (no buffered reader's copy)."""
    chunks = [os.read(fd, size + 1)]
    while chunks[-1]:
        chunks.append(os.read(fd, 1 << 20))
    return chunks[0] if len(chunks) == 2 else b"".join(chunks)


def unpack(files, directory, progress=True, force=False, on_refused=None, max_record_size=None):
    """Write every record of ``files`` as ``directory/<key>``, each file atomically. Raises ``GpumrError``: a refused
    key, when ``on_refused`` is None.

    Returns
    -------
    dict
        ``records`` and ``bytes`` written, ``refused`` (how many keys)."""
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
