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
sizes (:func:`list_files`, :func:`stat`, :func:`tree`), open a file for
byte-range reads (:func:`open_input`: a buffered random-access file, each
refill one ranged read), read a SequenceFile header (:func:`read_header`),
copy a file here (:func:`fetch`), and the filesystem operations that
:mod:`gpumr.io.outputs` writes an output with, under gpumr's ownership rule
(the layer itself decides nothing about what may be replaced): write a file
(:func:`open_output`, :func:`write_bytes`), upload a local file or folder
(:func:`upload`), make a folder, copy, rename and delete
(:func:`make_folder`, :func:`copy`, :func:`move`, :func:`delete`).
:func:`publish_mode` says how an output is made visible there: by a copy
per object on S3, which has no rename, by a rename elsewhere.

Where pyarrow cannot serve a URI here (:func:`unavailable` says why: no
pyarrow, as in ``gpumr bundle``'s archive; no ``libhdfs`` on this node; a
scheme pyarrow lacks, e.g. ``gs://`` or ``abfs://`` through Hadoop's
connectors), the ``hadoop fs`` command is the fallback: one JVM per call,
whole files copied to a local temporary file (:func:`open_input`,
:func:`list_files`), ``-put``, ``-mkdir -p``, ``-mv``, ``-rm -r`` and
``-test -e`` (:func:`upload`, :func:`make_folder`, :func:`move`,
:func:`delete`, :func:`exists`). The Spark engine has no fallback: its tasks read byte ranges
and write their parts through pyarrow.
"""

import contextlib
import functools
import io
import os
import posixpath
import shutil
import subprocess
import tempfile

from seqfile.atomic import AtomicFile, temp_name

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


def publish_mode(uri):
    """How an output is made visible at ``uri``: ``"copy"`` (S3, which has no rename), ``"rename"`` (HDFS,
    ``file://``) or ``"hadoop"`` (pyarrow cannot serve ``uri``: ``hadoop fs -mv``)."""
    try:
        fs, _ = filesystem(uri)
    except Unavailable:
        return "hadoop"
    return "copy" if fs.type_name == "s3" else "rename"


def exists(uri):
    """Whether anything is at ``uri`` (through ``hadoop fs -test -e`` where pyarrow cannot serve it)."""
    try:
        return stat(uri)[0] is not None
    except Unavailable:
        return _hadoop(["-test", "-e", uri], uri, ok=(0, 1)) == 0


def tree(uri):
    """Every entry under folder ``uri``, hidden ones too: ``[(relative path, size)]`` sorted, size None for a folder."""
    fs, inner = filesystem(uri)
    from pyarrow.fs import FileSelector, FileType
    with _errors(uri):
        found = fs.get_file_info(FileSelector(inner, recursive=True))
    return sorted((i.path[len(inner) + 1:], i.size if i.type == FileType.File else None) for i in found
                  if i.type in (FileType.File, FileType.Directory))


def _create(fs, inner):
    """A new stream writing ``inner`` byte for byte (pyarrow's default would compress a name ending ``.gz``,
    ``.bz2``, ``.zst``... as it wrote: a user's file garbled by its name)."""
    return fs.open_output_stream(inner, compression=None)


@contextlib.contextmanager
def open_output(uri):
    """Write the file at ``uri`` (its folder must exist; S3 has none): a context manager yielding a binary stream.

    On S3 the object appears whole when the stream closes; elsewhere the file
    is there from the start, so write it under a hidden name.
    """
    fs, inner = filesystem(uri)
    with _errors(uri):
        stream = _create(fs, inner)
        try:
            yield stream
        finally:
            stream.close()


def write_bytes(uri, data):
    """Write ``data`` as the file at ``uri``, whole, replacing a file there.

    S3: one request (an object appears whole). Elsewhere: written under a
    hidden name beside it, the old file deleted, then renamed (HDFS renames
    onto no existing file).
    """
    fs, inner = filesystem(uri)
    if fs.type_name == "s3":
        with open_output(uri) as f:
            f.write(data)
        return
    parent, name = posixpath.split(inner)
    tmp = posixpath.join(parent, temp_name(name))
    with _errors(uri):
        try:
            with _create(fs, tmp) as f:
                f.write(data)
            _discard(fs, inner)
            fs.move(tmp, inner)
        except BaseException:
            _discard(fs, tmp)
            raise


def make_folder(uri):
    """Make folder ``uri`` and its parents (nothing on S3, where folders are only key prefixes)."""
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        _hadoop(["-mkdir", "-p", uri], uri)
        return
    if fs.type_name != "s3":
        with _errors(uri):
            fs.create_dir(inner, recursive=True)


def upload(local, uri):
    """Copy the local file, or folder of files (sub-folders kept), ``local`` to ``uri`` (nothing must be there)."""
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        _hadoop(["-put", local, uri], uri)
        return
    with _errors(uri):
        folders = fs.type_name != "s3"  # S3 has none to make
        made = set()  # the folders made
        if os.path.isfile(local):
            files = [("", local)]
        else:
            files = [(posixpath.join(*os.path.relpath(os.path.join(d, f), local).split(os.sep)), os.path.join(d, f))
                     for d, _, names in os.walk(local) for f in names]
            if folders:
                fs.create_dir(inner, recursive=True)
                made.add(inner)
        for rel, path in sorted(files):
            target = posixpath.join(inner, rel) if rel else inner
            if rel and folders and posixpath.dirname(target) not in made:
                fs.create_dir(posixpath.dirname(target), recursive=True)
                made.add(posixpath.dirname(target))
            with open(path, "rb") as src, _create(fs, target) as dst:
                shutil.copyfileobj(src, dst, READ_BUFFER)


def copy(src, dst):
    """Copy the file at ``src`` to ``dst`` within one filesystem, replacing a file there (S3: one
    server-side copy, at most :data:`S3_COPY_LIMIT` bytes; the new object appears whole)."""
    fs, inner = filesystem(src)
    with _errors(src):
        fs.copy_file(inner, filesystem(dst)[1])


def move(src, dst):
    """Rename ``src`` (a file or folder) to ``dst``, where nothing must be (``hadoop fs -mv`` where pyarrow cannot)."""
    try:
        fs, inner = filesystem(src)
    except Unavailable:
        _hadoop(["-mv", src, dst], src)
        return
    with _errors(src):
        fs.move(inner, filesystem(dst)[1])


def delete(uri):
    """Delete the file or folder (with all it holds) at ``uri``, if anything is there."""
    try:
        fs, inner = filesystem(uri)
    except Unavailable:
        _hadoop(["-rm", "-r", "-f", uri], uri)
        return
    kind, _ = stat(uri)
    with _errors(uri):
        if kind == "file":
            fs.delete_file(inner)
        elif kind == "folder":
            fs.delete_dir(inner)


def _discard(fs, inner):
    """Delete the file ``inner`` if it is there."""
    try:
        fs.delete_file(inner)
    except FileNotFoundError:
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
