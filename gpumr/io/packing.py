"""Packing many small files into SequenceFiles and getting them back out.

Keys are the files' paths relative to the root they were found under,
``/``-separated; values are the files' bytes. Sharding balances shards by
bytes, placing the largest files first, each on the lightest shard so far.
"""

import fnmatch
import heapq
import os
import shutil
import time

from seqfile import Reader, Writer
from seqfile.atomic import temp_dir_beside, write_bytes

from ..errors import GpumrError
from ..sizes import human
from .inputs import expand_inputs


def collect(sources, include=(), exclude=()):
    """Find the files to pack.

    Parameters
    ----------
    sources : list of str
        Files (key: their base name) and directories (walked in sorted order;
        keys relative to the directory).
    include, exclude : list of str
        Glob patterns matched against keys; a file is kept if it matches some
        ``include`` (or there are none) and no ``exclude``.

    Returns
    -------
    list of (str, str, int)
        ``(key, path, size)`` sorted by key.

    Raises
    ------
    GpumrError
        For a missing source, two files with one key, or nothing to pack.
    """
    found = {}

    def add(key, path):
        if include and not any(fnmatch.fnmatchcase(key, g) for g in include):
            return
        if any(fnmatch.fnmatchcase(key, g) for g in exclude):
            return
        if key in found:
            raise GpumrError(f"duplicate key {key!r}: {found[key][0]} and {path}")
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise GpumrError(f"{path}: cannot read: {exc.strerror}") from None
        found[key] = (path, size)

    for src in sources:
        if os.path.isdir(src):
            for root, dirs, files in os.walk(src):
                dirs.sort()
                for name in sorted(files):
                    path = os.path.join(root, name)
                    add(os.path.relpath(path, src).replace(os.sep, "/"), path)
        elif os.path.exists(src):
            add(os.path.basename(src), src)
        else:
            raise GpumrError(f"{src}: no such file or directory")
    if not found:
        raise GpumrError(f"no input files in {', '.join(sources)}"
                         + (" matching the --include/--exclude patterns" if include or exclude else ""))
    return sorted((k, p, s) for k, (p, s) in found.items())


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
    name and renamed; shards are written into a temporary directory that is
    renamed to ``out``.

    Returns
    -------
    dict
        ``files``, ``bytes``, ``shards``, ``seconds`` and the output ``paths``.
    """
    from tqdm import tqdm
    files = collect(sources, include, exclude)
    total = sum(f[2] for f in files)
    sharded = shards is not None or shard_size is not None
    if shard_size is not None:
        shards = max(1, -(-total // shard_size))
    if os.path.exists(out) and not force:
        raise GpumrError(f"{out}: already exists (use --force to replace it)")
    t0 = time.perf_counter()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    groups = assign_shards(files, shards) if sharded else [files]
    stage = temp_dir_beside(out) if sharded else None
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="pack", disable=None if progress else True, leave=False)
    paths = []
    try:
        for i, group in enumerate(groups):
            target = os.path.join(stage, f"part-{i:05d}.seq") if sharded else out
            with Writer(target, compression=compression, codec=codec) as w:
                for key, path, size in group:
                    try:
                        with open(path, "rb") as f:
                            data = f.read()
                    except OSError as exc:
                        raise GpumrError(f"{path}: cannot read: {exc.strerror}") from None
                    w.append(key, data)
                    bar.update(size)
            paths.append(os.path.join(out, os.path.basename(target)) if sharded else out)
        if sharded:
            if os.path.exists(out):
                _remove(out)
            os.rename(stage, out)
            stage = None
    finally:
        bar.close()
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    return dict(files=len(files), bytes=total, shards=len(groups), paths=paths,
                seconds=time.perf_counter() - t0)


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def safe_target(directory, key):
    """Where record ``key`` unpacks under ``directory``.

    Raises
    ------
    GpumrError
        If the key is empty, absolute, or climbs out of ``directory``.
    """
    parts = key.split("/")
    if not key or key.startswith("/") or os.path.isabs(key) or any(p in ("", ".", "..") for p in parts):
        raise GpumrError(f"refusing key {key!r}: it is empty, absolute or climbs out of {directory} with '..'")
    return os.path.join(directory, *parts)


def unpack(files, directory, progress=True, max_record_size=None):
    """Write every record of ``files`` as ``directory/<key>``, each file atomically.

    ``max_record_size`` is the reader's size cap (256 MiB by default).

    Returns
    -------
    dict
        ``records`` and ``bytes`` written.
    """
    from tqdm import tqdm
    count = nbytes = 0
    for path in expand_inputs(files):
        with Reader(path, max_record_size=max_record_size) as reader:
            _require_text_keys(reader, path)
            for rec in tqdm(reader, desc=os.path.basename(path), unit="rec", disable=None if progress else True, leave=False):
                target = safe_target(directory, rec.key)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                write_bytes(target, rec.value)
                count += 1
                nbytes += len(rec.value)
    return dict(records=count, bytes=nbytes)


def _require_text_keys(reader, path):
    if reader.header.key_class != "org.apache.hadoop.io.Text":
        raise GpumrError(f"{path}: keys are {reader.header.key_class}, not Text file names")


def info(path, max_record_size=None):
    """Header facts, record count and byte totals of one SequenceFile (values are measured, not read)."""
    with Reader(path, values=False, max_record_size=max_record_size) as reader:
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


__all__ = ["collect", "assign_shards", "pack", "unpack", "info", "safe_target", "describe"]
