"""Side files, content-addressed: what every task of a job reads besides its records (a cascade, projections, a
geometry, a user's module), each shipped under a name made of its content's hash."""

import contextlib
import hashlib
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import GpumrError
from ..io.remote import locate, shown
from ..trusted import open_regular

_CHUNK = 4 << 20


@dataclass
class SideFile:
    """One shipped file.

    Attributes
    ----------
    option : str
        The option that named it (``--projections``), or ``workload`` for a user's module.
    path : str
        Its copy in the job's folder, on this machine.
    name : str
        Its content name: ``<sha256, 24 hex digits>-<its file name>``.
    size : int"""

    option: str
    path: str
    name: str
    size: int


def content_name(path, label=None, stop=None):
    """``(name, size)`` of the regular file at ``path``: its SHA-256 (24 hex digits), a dash, then ``label`` (its file
    name by default). ``stop``: a :class:`threading.Event` that, once set, ends the reading (:class:`Stopped`) within
    a chunk (:func:`named_ahead`).

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as f:
    ...     _ = f.write(b"abc")
    >>> content_name(f.name, "a.txt")
    ('ba7816bf8f01cfea414140de-a.txt', 3)
    >>> os.unlink(f.name)
    """
    h, size = hashlib.sha256(), 0
    fd = open_regular(path, what="a side file", any_owner=True)
    with os.fdopen(fd, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            if stop is not None and stop.is_set():
                raise Stopped(path)
            h.update(chunk)
            size += len(chunk)
    base = label or os.path.basename(path)
    return f"{h.hexdigest()[:24]}-{base}", size


class Stopped(Exception):
    """A content name's reading stopped (:func:`named_ahead`'s block ended first)."""


@contextlib.contextmanager
def named_ahead(paths):
    """``{path: future}``: each file's :func:`content_name`, read and hashed in a thread while the block runs.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".txt") as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     with named_ahead([f.name]) as named:
    ...         named[f.name].result()[0][:24]
    'ba7816bf8f01cfea414140de'
    """
    stop = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="gpumr-content-name") as pool:
        try:
            yield {path: pool.submit(content_name, path, stop=stop) for path in dict.fromkeys(paths)}
        finally:
            stop.set()  # (no effect on names already made)


def fetch(loc, folder):
    """A local copy, in ``folder``, of the file at the URI ``loc`` (a :class:`gpumr.io.remote.Location`); its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "fetched-" + (loc.name or "file"))
    n = 1
    while os.path.exists(path):
        path = os.path.join(folder, f"fetched{n}-{loc.name or 'file'}")
        n += 1
    loc.fetch(path)
    return path


def ship(option, value, folder, named=None):
    """The :class:`SideFile` of the file ``value`` (a path or URI) names, its copy made in ``folder``. Raises
    ``GpumrError``: naming the option and the file: missing, not a regular file, unreadable."""
    loc = locate(value)
    os.makedirs(folder, exist_ok=True)
    source = loc.local or fetch(loc, folder)
    try:
        name, size = named.result() if named is not None else content_name(source)
    except FileNotFoundError:
        raise GpumrError(f"{option} {shown(value)}: no such file") from None
    except OSError as exc:
        raise GpumrError(f"{option} {shown(value)}: {exc.strerror or exc}") from None
    except GpumrError as exc:
        raise GpumrError(f"{option} {shown(value)}: {str(exc).rpartition(': ')[2]}") from None
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        try:
            if os.stat(source).st_uid != os.geteuid():
                raise PermissionError  # (copied: see above)
            os.link(source, path)
        except OSError:
            shutil.copyfile(source, path)
    return SideFile(option, path, name, size)
