"""Paths and URIs parsed once: :class:`Location`, the one place that tells a URI from a path; its
operations are served by one backend module each (:mod:`.local`, :mod:`.arrow`, :mod:`.boto`, :mod:`.hadoop`)."""

import contextlib
import io
import os
import re
import shutil

from seqfile.atomic import AtomicFile, temp_name

from ...errors import GpumrError, redact
from .base import READ_BUFFER, Unavailable, errors, first_line, shown

S3_SCHEMES = ("s3", "s3a", "s3n")
#: A glob matching every URI (mrjob's manifest patterns), for the engines that hand URIs to their tasks.
ANY_URI = "*://*"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# One backend per (scheme kind, bucket or namenode) in this process: making one costs a request (S3 asks the bucket
# for its region) or a JVM (HDFS).
_BACKENDS = {}

# -- the parser ----------------------------------------------------------------------------------
class Location:
    """One path or URI, parsed once, with the implementation that serves it."""

    __slots__ = ("text", "scheme", "authority", "path", "_impl")

    def __init__(self, text, scheme=None, authority="", path=""):
        self.text = text
        self.scheme = scheme
        self.authority = authority
        self.path = path  # for a URI: the part after the authority, without its leading "/"
        self._impl = None

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"Location({shown(self.text)!r})"

    def __fspath__(self):
        if self.local is None:
            raise TypeError(f"{shown(self.text)} is not a local path")
        return self.local

    @property
    def is_uri(self):
        """Whether it was given as a URI (``file:///PATH`` included)."""
        return self.scheme is not None

    @property
    def local(self):
        """The local path this names, or None (a URI of another filesystem)."""
        if self.scheme is None:
            return self.text
        if self.scheme == "file":
            return "/" + self.path
        return None

    @property
    def shown(self):
        """For messages: user-info hidden, on one line."""
        return shown(self.text)

    @property
    def name(self):
        """The last name of the path (the file's or folder's own name)."""
        if self.scheme is None:
            return os.path.basename(os.path.abspath(self.text))
        return self.text.rstrip("/").rpartition("/")[2]

    def child(self, rel):
        """The location of ``rel`` (``/``-separated) inside this folder; itself for ``""``."""
        if not rel:
            return self
        if self.scheme is None:
            return locate(os.path.join(self.text, *rel.split("/")))
        return _uri(self.scheme, self.authority, f"{self.path.rstrip('/')}/{rel}" if self.path else rel)

    def beside(self, name):
        """The location of ``name`` in the folder holding this one."""
        if self.scheme is None:
            return locate(os.path.join(os.path.dirname(os.path.abspath(self.text)), name))
        head = self.path.rstrip("/").rpartition("/")[0]
        return _uri(self.scheme, self.authority, f"{head}/{name}" if head else name)

    def parent(self):
        """The folder holding this one, or None at the top of its filesystem (``/``, a bucket)."""
        if self.scheme is None:
            real = os.path.abspath(self.text)
            up = os.path.dirname(real)
            return None if up == real else locate(up)
        path = self.path.rstrip("/")
        if not path:
            return None
        return _uri(self.scheme, self.authority, path.rpartition("/")[0])

    def stripped(self):
        """This location without a trailing ``/`` (``out/`` names what a link ``out`` points to)."""
        bare = self.text.rstrip("/")
        if self.scheme is None:
            bare = bare or self.text
        return self if bare == self.text else locate(bare)

    def absolute(self):
        """This location as text that any process here can use: an absolute local path, or the URI."""
        return os.path.abspath(self.local) if self.local is not None else self.text

    def uri(self):
        """This location as a URI: ``file://`` and the absolute path for a local one (for a program, such as
        Hadoop, whose default filesystem may be another), else the URI as given."""
        return "file://" + os.path.abspath(self.local) if self.scheme is None else self.text

    def place(self):
        """Where this points, comparably: a real local path, or the URI with S3's schemes made one."""
        if self.local is not None:
            return os.path.realpath(self.local)
        scheme = "s3" if self.scheme in S3_SCHEMES else self.scheme
        return f"{scheme}://{self.authority}/{self.path.rstrip('/')}".rstrip("/")

    def top(self):
        """The top of this location's filesystem (the bucket of an S3 URI), as a location."""
        if self.scheme is None:
            return locate("/")
        return _uri(self.scheme, self.authority, "")

    # -- the implementation, chosen once ------------------------------------------------------
    @property
    def impl(self):
        """The implementation serving this location, chosen on first use."""
        if self._impl is None:
            self._impl = _choose(self)
        return self._impl

    @property
    def inner(self):
        return self.impl.inner(self)

    def errors(self):
        return errors(self)

    def unavailable(self):
        """Why pyarrow cannot serve this location here (a sentence), or None when it can (or it is local)."""
        return getattr(self.impl, "reason", None)

    @property
    def publish_mode(self):
        """How an output is made visible here: ``"copy"`` (S3, no rename), ``"rename"``, or ``"hadoop"``
        (``hadoop fs -mv``, where only a new destination is written)."""
        return self.impl.publish_mode

    # -- the interface ------------------------------------------------------------------------
    def stat(self):
        """``("file", size)``, ``("folder", None)``, ``(None, None)`` (nothing there) or ``(words, None)`` for
        another kind of local file ("a FIFO (named pipe)")."""
        with errors(self):
            return self.impl.stat(self)

    def exists(self):
        """Whether anything is here."""
        with errors(self):
            return self.impl.exists(self)

    def list_files(self):
        """This file, or a folder's visible files (sorted): ``[(Location, size)]``; sizes None through ``hadoop fs``.
        Raises ``GpumrError`` if nothing is here, or it cannot be listed."""
        with errors(self):
            return self.impl.list_files(self)

    def tree(self):
        """Every entry under this folder, hidden ones too: ``[(relative path, size)]`` sorted, None for a folder."""
        return [(rel, None if what == "folder" else size) for rel, what, size in self.entries()]

    def entries(self):
        """Every entry under this folder, hidden ones too, a folder before what it holds, no link followed:
        ``[(relative path, what, size)]``, ``what`` "file", "folder" or another kind in words ("a symbolic link")."""
        with errors(self):
            return self.impl.entries(self)

    def is_link(self):
        """Whether this is a symbolic link (only local paths have them)."""
        return self.local is not None and os.path.islink(self.local)

    def remove_empty_folder(self):
        """Remove this folder if nothing is in it (S3: its folder marker); return whether nothing is here now."""
        with errors(self):
            return self.impl.remove_empty_folder(self)

    @contextlib.contextmanager
    def open_input(self, buffer_size=READ_BUFFER, follow=True):
        """Open this file for random-access reads; a context manager yielding a seekable binary file."""
        with self.impl.open_input(self, buffer_size, follow) as f:
            yield f

    def read_header(self):
        """The SequenceFile header of this file (:class:`seqfile.header.Header`); its first bytes only."""
        from seqfile.header import read_header as parse
        with self.open_input(buffer_size=64 << 10) as f:
            return parse(f, redact(self.text))

    def fetch(self, path):
        """Copy this file to the local ``path`` (written atomically)."""
        with self.open_input() as src, AtomicFile(path, replace=False) as dst:
            shutil.copyfileobj(src, dst, READ_BUFFER)

    @contextlib.contextmanager
    def open_output(self):
        """Write this file (its folder must exist; S3 has none): a context manager yielding a binary stream."""
        with errors(self):
            stream = self.impl.create(self)
            try:
                yield stream
            finally:
                stream.close()

    def write_bytes(self, data):
        """Write ``data`` as this file, whole, replacing a file here."""
        self.publish_from(io.BytesIO(data), lambda old: True)

    def publish_from(self, f, may_replace):
        """Write what is left in binary file ``f`` as this file, appearing whole; an existing file goes only if
        ``may_replace(old)`` says so (as :meth:`publish_bytes`)."""
        if self.scheme is None:  # (the operating system: atomic files)
            replace = (lambda old: may_replace(locate(old))) if may_replace else False
            try:
                with AtomicFile(self.local, replace=replace) as out:
                    shutil.copyfileobj(f, out, READ_BUFFER)
            except FileExistsError:
                raise
            except OSError as exc:
                raise GpumrError(f"{self.shown}: {exc.strerror or first_line(exc)}") from None
            return
        if self.exists() and not (may_replace and may_replace(self)):
            raise FileExistsError(0, "exists", self.text)
        with errors(self):
            if self.publish_mode == "copy":  # an object appears whole when its stream closes
                with self.open_output() as out:
                    shutil.copyfileobj(f, out, READ_BUFFER)
                return
            tmp = self.beside(temp_name(self.name))
            try:
                with tmp.open_output() as out:
                    shutil.copyfileobj(f, out, READ_BUFFER)
                if self.stat()[0] == "file":
                    self.delete()
                tmp.move(self)
            except BaseException:
                with contextlib.suppress(GpumrError):
                    tmp.delete()
                raise

    def publish_bytes(self, data, may_replace):
        """Write ``data`` as this file, appearing whole; an existing file goes only if ``may_replace(old)`` says so.
        Raises ``FileExistsError`` when a file is here that may not go (it is kept as it was)."""
        self.publish_from(io.BytesIO(data), may_replace)

    def make_folder(self):
        """Make this folder and its parents (nothing on S3, where folders are only key prefixes)."""
        with errors(self):
            self.impl.make_folder(self)

    def upload(self, local):
        """Copy the local file, or folder of files (sub-folders kept), ``local`` here (nothing must be here)."""
        with errors(self):
            self.impl.upload(local, self)

    def copy(self, dst):
        """Copy this file to ``dst`` (same filesystem), replacing a file there (S3: one server-side copy, at most
        :data:`S3_COPY_LIMIT` bytes; the new object appears whole)."""
        with errors(self):
            self.impl.copy(self, locate(dst))

    def move(self, dst):
        """Rename this file or folder to ``dst`` (same filesystem), where nothing must be."""
        with errors(self):
            self.impl.move(self, locate(dst))

    def delete(self):
        """Delete the file or folder (with all it holds) here, if anything is here."""
        with errors(self):
            self.impl.delete(self)


def _uri(scheme, authority, path):
    loc = Location(f"{scheme}://{authority}/{path}", scheme, authority, path)
    return loc


def locate(path):
    """Parse a path or URI once: the :class:`Location`, carrying the implementation that serves it. Raises
    ``GpumrError``: one line, never echoing a secret: for a URI holding user-info (``s3://KEY:SECRET@bucket``), an S3
    URI with a port or without a bucket, a ``file://`` URI naming another host.

    Parameters
    ----------
    path : str, os.PathLike or Location"""
    if isinstance(path, Location):
        return path
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    m = _SCHEME.match(text)
    if m is None:
        return Location(text)
    if redact(text) != text:
        raise GpumrError(f"{shown(text)}: a URI with user-info (a user name or credentials before '@') is refused, "
                         "and never shown; give credentials the way the filesystem's own tools take them (for S3: "
                         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, an instance role)")
    scheme = m.group(1).lower()
    authority, _, rest = text[m.end():].partition("/")
    if scheme in S3_SCHEMES:
        if not authority:
            raise GpumrError(f"{shown(text)}: no bucket ({scheme}://BUCKET/KEY)")
        if ":" in authority:
            raise GpumrError(f"{shown(text)}: an S3 URI names a bucket, not a host and port ({scheme}://BUCKET/KEY); "
                             "an S3-compatible server is chosen with AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL")
    if scheme == "file" and authority not in ("", "localhost"):
        raise GpumrError(f"{shown(text)}: a file:// URI names a file of this machine (file:///PATH)")
    path = _without_dots(rest, text)
    if path != rest:  # the key every check and every write uses is the same one
        text = f"{text[:m.end()]}{authority}/{path}"
    return Location(text, scheme, authority, path)


def _without_dots(path, text):
    """A URI's path with its ``.`` and ``..`` segments resolved (RFC 3986's remove_dot_segments); empty segments are
    kept (``a//b`` is an S3 key of its own). GpumrError for a ``..`` above the top (the bucket).

    Examples
    --------
    >>> _without_dots("out/../in/x", "s3://b/out/../in/x")
    'in/x'
    >>> _without_dots("./in", "s3://b/./in")
    'in'
    """
    parts = path.split("/")
    if "." not in parts and ".." not in parts:
        return path
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == ".":
            if last:
                out.append("")
        elif part == "..":
            if not out:
                raise GpumrError(f"{shown(text)}: '..' goes above the top of the filesystem (the bucket)")
            out.pop()
            if last:
                out.append("")
        else:
            out.append(part)
    return "/".join(out)


def _choose(loc):
    """The implementation for ``loc``: the one choice among the operating system, pyarrow, boto3 and ``hadoop fs``."""
    from .arrow import Arrow, connect
    from .boto import Boto
    from .hadoop import Hadoop
    from .local import LOCAL
    if loc.scheme is None:
        return LOCAL
    scheme = "s3" if loc.scheme in S3_SCHEMES else loc.scheme
    key = (scheme, loc.authority)
    impl = _BACKENDS.get(key)
    if impl is None:
        try:
            impl = Arrow(connect(scheme, loc.authority))
        except Unavailable as exc:
            impl = Hadoop(str(exc))
        _BACKENDS[key] = impl
    if scheme == "s3" and "//" in loc.path.rstrip("/") and isinstance(impl, Arrow):
        return Boto.get(loc)  # a key pyarrow cannot name
    return impl


# -- the same operations by path or URI (each parses once and calls the location) ------------------
def list_files(path):
    """:meth:`Location.list_files` of ``path``, as ``[(path or URI, size)]``."""
    return [(str(loc), size) for loc, size in locate(path).list_files()]


def open_output(path):
    """:meth:`Location.open_output` of ``path``."""
    return locate(path).open_output()


def write_bytes(path, data):
    """:meth:`Location.write_bytes` of ``path``."""
    locate(path).write_bytes(data)


def upload(local, path):
    """:meth:`Location.upload` of ``path``."""
    locate(path).upload(local)

