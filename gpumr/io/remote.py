"""Files where the cluster keeps them: one filesystem layer for ``s3://``, ``hdfs://`` and ``file://`` URIs.

Every part of gpumr that reads or writes at a URI comes here: the commands
(``pack -o``, ``ls``, ``info``, ``cat``, ``unpack``), the split reader of
every engine (:func:`gpumr.io.records.read_split`), the Spark driver and the
mrjob jobs' map tasks. The talking is done by pyarrow's filesystems:

* ``s3://``, ``s3a://``, ``s3n://``: :class:`pyarrow.fs.S3FileSystem` (the
  AWS SDK for C++). Credentials come from where every AWS SDK looks
  (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``,
  ``~/.aws/credentials`` and ``config`` with ``AWS_PROFILE``, an instance or
  container role); the bucket's region is asked of the bucket; an
  S3-compatible store is reached with the SDK's own endpoint variables
  ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (``http://host:port``).
* ``hdfs://`` and ``viewfs://``: :class:`pyarrow.fs.HadoopFileSystem`,
  i.e. ``libhdfs`` and the JVM, as Hadoop and EMR nodes have them
  (``JAVA_HOME``; ``HADOOP_HOME`` or ``ARROW_LIBHDFS_DIR``; pyarrow sets
  ``CLASSPATH`` from ``hadoop classpath --glob`` when it is unset).
* ``file://`` (``file:///path``): :class:`pyarrow.fs.LocalFileSystem`.

What the layer does: list a file or a folder's visible files with their
sizes (:func:`list_files`, :func:`stat`), open a file for byte-range reads
(:func:`open_input`: a buffered random-access file, each refill one ranged
read), read a SequenceFile header (:func:`read_header`), copy a file here
(:func:`fetch`), write a file or a folder complete under a hidden name and
only then make it visible, replacing what was there only with the caller's
proof that gpumr made it (:func:`check_put`, :func:`put`).

Where pyarrow cannot serve a URI here (:func:`unavailable` says why: no
pyarrow, as in ``gpumr bundle``'s archive; no ``libhdfs`` on this node; a
scheme pyarrow lacks, e.g. ``gs://`` or ``abfs://`` through Hadoop's
connectors), the ``hadoop fs`` command is the fallback: one JVM per call,
whole files copied to a local temporary file (:func:`open_input`,
:func:`list_files`), uploads by ``-put`` under a hidden name and ``-mv``
(:func:`put`). The Spark engine has no fallback: its tasks read byte ranges.
"""

import contextlib
import functools
import io
import os
import posixpath
import shutil
import subprocess
import tempfile

from seqfile.atomic import AtomicFile, aside_name, temp_name

from ..errors import GpumrError, printable

S3_SCHEMES = ("s3", "s3a", "s3n")
HDFS_SCHEMES = ("hdfs", "viewfs")
#: Bytes fetched per ranged read of a remote file (the read buffer): large enough that S3's
#: per-request latency is a small part of the time, small enough to hold per task.
READ_BUFFER = 4 << 20
#: The largest object S3 copies in one request (CopyObject); publishing is a copy there.
S3_COPY_LIMIT = 5 << 30

# One pyarrow filesystem per (scheme kind, bucket or namenode) in this process: making one costs a
# request (S3 asks the bucket for its region) or a JVM (HDFS).
_FILESYSTEMS = {}


class Unavailable(GpumrError):
    """pyarrow cannot serve a URI from here; the message says why, without the URI (``hadoop fs`` may still)."""


def is_remote(path):
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path and path.split("://", 1)[0].isalnum()


def local_path(uri):
    """The local path a ``file://`` URI names (``file:///PATH``), or None for any other URI.

    Raises
    ------
    GpumrError
        For a ``file://`` URI naming another host.
    """
    scheme, _, rest = uri.partition("://")
    if scheme.lower() != "file":
        return None
    authority, _, path = rest.partition("/")
    if authority not in ("", "localhost"):
        raise GpumrError(f"{printable(uri)}: a file:// URI names a file of this machine (file:///PATH)")
    return "/" + path


def _hidden(name):
    """Whether a file name is one Hadoop's input formats pass over (``_SUCCESS``, ``.crc``, temporaries)."""
    return name.startswith((".", "_"))


def _first_line(exc):
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def _errors(uri):
    """Turn the filesystem's errors about ``uri`` into one-line :class:`GpumrError`\\ s."""
    try:
        yield
    except GpumrError:
        raise
    except FileNotFoundError:
        raise GpumrError(f"{printable(uri)}: no such file or directory") from None
    except OSError as exc:
        raise GpumrError(f"{printable(uri)}: {_first_line(exc)}") from None


def filesystem(uri):
    """``(pyarrow filesystem, path inside it)`` for ``uri``.

    Raises
    ------
    Unavailable
        If pyarrow is not importable, has no filesystem for the scheme, or
        cannot start it here (HDFS without ``libhdfs`` or a JVM).
    GpumrError
        For a malformed URI (an S3 URI without a bucket, ``file://`` naming another host).
    """
    scheme, _, rest = uri.partition("://")
    scheme = scheme.lower()
    authority, _, path = rest.partition("/")
    if scheme in S3_SCHEMES:
        if not authority:
            raise GpumrError(f"{printable(uri)}: no bucket (s3://BUCKET/KEY)")
        key, inner = ("s3", authority), posixpath.join(authority, path).rstrip("/")
    elif scheme in HDFS_SCHEMES:
        key, inner = (scheme, authority), "/" + path
    elif scheme == "file":
        key, inner = ("file", ""), local_path(uri)
    else:
        raise Unavailable(f"pyarrow has no filesystem for {scheme}://")
    fs = _FILESYSTEMS.get(key)
    if fs is None:
        fs = _FILESYSTEMS[key] = _connect(*key)
    return fs, inner


def _connect(kind, authority):
    try:
        from pyarrow import fs
    except ImportError:
        raise Unavailable("pyarrow is not installed (pip install pyarrow)") from None
    try:
        if kind == "s3":
            # from_uri asks the bucket for its region and honours AWS_ENDPOINT_URL(_S3).
            return fs.FileSystem.from_uri(f"s3://{authority}")[0]
        if kind == "file":
            return fs.LocalFileSystem()
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
        if kind == "viewfs":
            return fs.HadoopFileSystem(f"viewfs://{host}", int(port or 0))
        return fs.HadoopFileSystem(f"hdfs://{host}" if host else "default", int(port or 0))
    except (OSError, ValueError) as exc:
        raise Unavailable(f"pyarrow cannot reach {kind}://{authority}: {_first_line(exc)}") from None


def unavailable(uri):
    """Why pyarrow cannot serve ``uri`` here (a sentence), or None when it can."""
    try:
        filesystem(uri)
    except Unavailable as exc:
        return str(exc)
    return None


def _uri(uri, fs, inner):
    """The URI of ``inner`` (a path in ``fs``) in the scheme and authority of ``uri``."""
    scheme, _, rest = uri.partition("://")
    if fs.type_name == "s3":
        return f"{scheme}://{inner}"
    return f"{scheme}://{rest.partition('/')[0]}{inner}"


def stat(uri):
    """``("file", size)``, ``("folder", None)`` or ``(None, None)`` (nothing there) for ``uri``."""
    fs, inner = filesystem(uri)
    from pyarrow.fs import FileType
    with _errors(uri):
        info = fs.get_file_info(inner)
    if info.type == FileType.File:
        return "file", info.size
    if info.type == FileType.Directory:
        return "folder", None
    return None, None


def list_files(uri):
    """The files ``uri`` names: itself if a file, else a folder's visible files (sorted); ``[(uri, size)]``.

    Visible: not starting with ``.`` or ``_`` (Hadoop hides those). Sub-folders
    are not entered. Sizes are None when ``hadoop fs`` listed them.

    Raises
    ------
    GpumrError
        If nothing is at ``uri``, or it cannot be listed.
    """
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        return [(u, None) for u in _hadoop_list(uri)]
    from pyarrow.fs import FileSelector, FileType
    with _errors(uri):
        info = fs.get_file_info(inner)
        if info.type == FileType.File:
            return [(uri, info.size)]
        if info.type != FileType.Directory:
            raise GpumrError(f"{printable(uri)}: no such file or directory")
        found = fs.get_file_info(FileSelector(inner))
    base = uri.rstrip("/")
    return sorted((f"{base}/{i.base_name}", i.size) for i in found
                  if i.type == FileType.File and not _hidden(i.base_name))


@contextlib.contextmanager
def open_input(uri, buffer_size=READ_BUFFER):
    """Open the file at ``uri`` for random-access reads; a context manager yielding a binary file.

    Through pyarrow, only the byte ranges read are fetched (``buffer_size``
    at a time); where pyarrow cannot serve ``uri``, ``hadoop fs`` copies the
    whole file to a local temporary file first, removed on leaving.
    """
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        with tempfile.TemporaryDirectory(prefix="gpumr-get-") as folder:
            local = os.path.join(folder, "copy")
            _hadoop(["-copyToLocal", uri, local], uri)
            with open(local, "rb") as f:
                yield f
        return
    with _errors(uri):
        raw = fs.open_input_file(inner)
    with io.BufferedReader(raw, buffer_size) as f:  # seekable; each refill is one ranged read
        yield f


def read_header(uri):
    """The SequenceFile header of the file at ``uri`` (:class:`seqfile.header.Header`); reads its first bytes only."""
    from seqfile.header import read_header as parse
    with open_input(uri, buffer_size=64 << 10) as f:
        return parse(f, uri)


def fetch(uri, path):
    """Copy the file at ``uri`` to the local ``path`` (written atomically)."""
    with open_input(uri) as src, AtomicFile(path, replace=False) as dst:
        shutil.copyfileobj(src, dst, READ_BUFFER)


def _tree(fs, inner):
    """Every file under folder ``inner`` (hidden ones too), as paths relative to it."""
    from pyarrow.fs import FileSelector, FileType
    found = fs.get_file_info(FileSelector(inner, recursive=True))
    return sorted(i.path[len(inner) + 1:] for i in found if i.type == FileType.File)


def check_put(uri, replace=None):
    """Check that :func:`put` may write at ``uri``; ``(kind, names)`` of what is there (see :func:`put`).

    Raises
    ------
    GpumrError
        If something is at ``uri`` and ``replace`` is None, or ``replace`` refuses it.
    """
    uri = uri.rstrip("/")
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        if _hadoop(["-test", "-e", uri], uri, ok=(0, 1)) == 0:
            raise GpumrError(f"{printable(uri)}: already exists; through hadoop fs gpumr replaces nothing: "
                             "remove it first") from None
        return None, []
    kind, _ = stat(uri)
    with _errors(uri):
        names = [""] if kind == "file" else _tree(fs, inner) if kind == "folder" else []
    if kind is not None:
        if replace is None:
            raise GpumrError(f"{printable(uri)}: already exists (use --force to replace an earlier gpumr output)")
        replace(uri, kind, names)
    return kind, names


def put(local, uri, replace=None):
    """Put the local file or folder ``local`` at ``uri``: written under a hidden name, then made visible.

    The upload goes to ``.NAME.<random>.tmp`` beside the destination (a name
    Hadoop's input formats pass over) and is then published: renamed on
    HDFS and local file systems, copied object by object on S3 (which has
    no rename; each object appears whole). A failure or Ctrl-C before the
    end removes the temporary upload and anything already published, so
    nothing is left visible (a kill -9 can leave the hidden temporary).

    Parameters
    ----------
    local : str
        A local file, or a folder of files (sub-folders kept).
    uri : str
    replace : callable, optional
        Without it an existing ``uri`` is refused. With it, ``replace(uri,
        kind, names)`` is called with what is there (``kind`` "file" or
        "folder", ``names`` every file under a folder, relative) and must
        raise :class:`GpumrError` unless gpumr may replace it; the old
        files are removed once the new ones are visible.

    Returns
    -------
    str or None
        Where an old folder was set aside and kept because files other than
        ``names`` appeared in it meanwhile (HDFS, local), else None.
    """
    uri = uri.rstrip("/")
    files = [""] if os.path.isfile(local) else sorted(
        os.path.relpath(os.path.join(d, f), local).replace(os.sep, "/") for d, _, fs_ in os.walk(local) for f in fs_)
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        return _hadoop_put(local, uri, replace)
    s3 = fs.type_name == "s3"
    kind, old = check_put(uri, replace)
    with _errors(uri):
        if s3:
            big = [f for f in files if os.path.getsize(_at(local, f, os.path.join)) > S3_COPY_LIMIT]
            if big:
                raise GpumrError(f"{printable(uri)}: {big[0] or os.path.basename(local)} is over 5 GiB, the most S3 "
                                 "publishes in one copy; cut the output into smaller shards (--shard-size)")
        parent, name = posixpath.split(inner)
        tmp = posixpath.join(parent, temp_name(name))
        if not s3:
            fs.create_dir(parent, recursive=True)
        published, kept, done = [], None, False
        try:
            for rel in files:
                target = _at(tmp, rel)
                if rel and not s3:
                    fs.create_dir(posixpath.dirname(target), recursive=True)
                with open(_at(local, rel, os.path.join), "rb") as src, fs.open_output_stream(target) as dst:
                    shutil.copyfileobj(src, dst, READ_BUFFER)
            if s3:
                for rel in files:  # a copy replaces an object atomically
                    fs.move(_at(tmp, rel), _at(inner, rel))
                    published.append(rel)
                for rel in sorted(set(old) - set(files)):
                    fs.delete_file(_at(inner, rel))
            else:
                kept = _swap(fs, tmp, inner, kind, old)
            done = True
        finally:
            # The temporary upload (or, on S3, the empty "folder" marker pyarrow leaves for it) goes.
            _discard(fs, tmp, kind="folder" if files != [""] else "file")
            if not done and kind is None:  # a fresh destination: what was published so far goes too
                for rel in published:
                    _discard(fs, _at(inner, rel), "file")
            elif not done and published:
                raise GpumrError(f"{printable(uri)}: the upload failed after replacing {len(published)} of "
                                 f"{len(files)} files; the output there is incomplete: run again") from None
    return _uri(uri, fs, kept) if kept else None


def _at(base, rel, join=posixpath.join):
    """``rel`` under ``base``; ``base`` itself for ``""`` (the one file of a single-file output)."""
    return join(base, rel) if rel else base


def _swap(fs, tmp, inner, old_kind, old_names):
    """Rename ``tmp`` to ``inner``; an existing ``inner`` is set aside first, and its ``old_names`` removed after.

    Returns the set-aside folder's path if something else appeared in it meanwhile (it is then kept), else None.
    """
    if old_kind is None:
        fs.move(tmp, inner)
        return None
    parent, name = posixpath.split(inner)
    aside = posixpath.join(parent, aside_name(name))
    fs.move(inner, aside)
    try:
        fs.move(tmp, inner)
    except BaseException:
        fs.move(aside, inner)
        raise
    if old_kind == "file":
        fs.delete_file(aside)
        return None
    for rel in old_names:
        _discard(fs, posixpath.join(aside, rel), "file")
    if _tree(fs, aside):
        return aside
    fs.delete_dir(aside)
    return None


def _discard(fs, inner, kind):
    """Remove ``inner`` if it is there, quietly (clean-up after a failure)."""
    try:
        if kind == "file":
            fs.delete_file(inner)
        else:
            fs.delete_dir(inner)
    except OSError:
        pass


# -- the fallback: the `hadoop fs` command ------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _hadoop_fs():
    """mrjob's ``hadoop fs`` wrapper (one per process: it remembers the Hadoop version it asked for)."""
    from mrjob.fs.hadoop import HadoopFilesystem
    return HadoopFilesystem()


def _hadoop(args, uri, ok=(0,)):
    """Run ``hadoop fs ARGS``; its exit status; GpumrError naming ``uri`` when it fails."""
    try:
        return _hadoop_fs().invoke_hadoop(["fs", *args], ok_returncodes=list(ok))
    except (subprocess.CalledProcessError, OSError) as exc:
        raise GpumrError(f"{printable(uri)}: hadoop fs {args[0]} failed ({_first_line(exc)}), and {unavailable(uri)}") \
            from None


def _hadoop_list(uri):
    """Through ``hadoop fs -ls -R``: ``uri`` if it is a file, else its visible files (no sub-folders), sorted."""
    base = uri.rstrip("/")
    try:
        found = list(_hadoop_fs().ls(base))
    except (IOError, OSError) as exc:
        raise GpumrError(f"{printable(uri)}: hadoop fs cannot list it ({_first_line(exc)}), and {unavailable(uri)}") \
            from None
    if not found:
        raise GpumrError(f"{printable(uri)}: no such file or directory")
    if found == [base]:  # a file
        return found
    direct = [u for u in found if u.startswith(base + "/") and "/" not in u[len(base) + 1:]]
    return sorted(u for u in direct if not _hidden(posixpath.basename(u)))


def _hadoop_put(local, uri, replace):
    """:func:`put` through ``hadoop fs``: ``-put`` under a hidden name beside ``uri``, then ``-mv``."""
    check_put(uri, replace)
    parent, name = posixpath.split(uri)
    tmp = posixpath.join(parent, temp_name(name))
    _hadoop(["-mkdir", "-p", parent], uri)
    try:
        _hadoop(["-put", local, tmp], uri)
        _hadoop(["-mv", tmp, uri], uri)
    except BaseException:
        try:
            _hadoop_fs().invoke_hadoop(["fs", "-rm", "-r", "-f", tmp], ok_returncodes=[0, 1])
        except (subprocess.CalledProcessError, OSError):
            pass
        raise
    return None
