"""Records of one input split, for every engine: each record, or a note of what could not be read."""

import contextlib
from collections import namedtuple

from seqfile import Reader, SequenceFileError
from seqfile.errors import RecordError
from seqfile.reader import DEFAULT_MAX_RECORD_SIZE, MAX_BUFFER

from ..errors import GpumrError, redact
from ..sizes import parse_size
from . import remote

Lost = namedtuple("Lost", "name start end reason")
Lost.__doc__ = """A stretch of an input that could not be read: bytes ``[start, end)`` of ``name``
(``end`` None when unknown), and why. Only broken framing (or a file that is not a readable
SequenceFile) loses a stretch; the records in it cannot be named."""


class Unreadable(namedtuple("Unreadable", "name key offset reason")):
    """One record whose framing is intact but whose key or value cannot be read (or is over the size cap)."""

    __slots__ = ()

    @property
    def label(self):
        """The key for an error line: its bytes as UTF-8, undecodable bytes escaped (``\\xff``)."""
        if self.key is None:
            return f"{self.name}@{self.offset}"
        return self.key.decode("utf-8", "backslashreplace")


def max_record_size_arg(text):
    """``argparse`` type of ``--max-record-size``: a size (``256MiB``) from 1 byte to 2 GiB - 1."""
    import argparse
    try:
        n = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 < n <= MAX_BUFFER:
        raise argparse.ArgumentTypeError(f"{text}: the size cap must be from 1 byte to {MAX_BUFFER} bytes")
    return int(n)


@contextlib.contextmanager
def open_reader(path, **kwargs):
    """A :class:`seqfile.Reader` of the SequenceFile at ``path``, a local path or a URI; a context manager."""
    loc = remote.locate(path)
    if loc.local is not None:
        with Reader(loc.local, **{"name": kwargs.pop("name", None) or str(path), **kwargs}) as reader:
            yield reader
        return
    with loc.open_input() as f, Reader(f, **{"name": loc.shown, **kwargs}) as reader:
        yield reader


def size(path):
    """The size in bytes of the file at ``path`` (a local path or a URI), or None if it cannot be found."""
    try:
        return remote.locate(path).stat()[1]
    except GpumrError:
        return None


def read_split(path, start=0, end=None, name=None, max_record_size=DEFAULT_MAX_RECORD_SIZE):
    """Yield the records of split ``[start, end)`` of a SequenceFile, and what could not be read.

    Parameters
    ----------
    path : str
        Local path or URI of the file (a URI is read through :mod:`gpumr.io.remote`, fetching only the byte ranges the
        split needs).
    start, end : int, optional
        The split, with Hadoop's semantics (see :class:`seqfile.Reader`); the whole file by default.
    name : str, optional
        How errors name the file (its URI); ``path`` by default.
    max_record_size : int, optional
        The reader's size cap on a record and a block (256 MiB by default).

    Yields
    ------
    seqfile.reader.Record, Unreadable or Lost
        In file order. A file that cannot be opened or has no valid header gives one :class:`Lost` covering the whole
        file, from the split that starts at byte 0 only (so it is reported once over all splits)."""
    name = redact(str(name or path))
    problems = []

    def on_error(exc):
        if isinstance(exc, RecordError):
            problems.append(Unreadable(name, exc.key, exc.offset, exc.message))
        else:
            lo, hi = exc.lost if exc.lost else (exc.offset, None)
            problems.append(Lost(name, lo, hi, exc.message))

    with contextlib.ExitStack() as stack:
        try:
            reader = stack.enter_context(open_reader(path, start=start, end=end, on_error=on_error,
                                                     max_record_size=max_record_size, name=name))
        except (OSError, SequenceFileError, GpumrError) as exc:
            if start == 0:
                yield Lost(name, 0, size(path), getattr(exc, "message", None) or getattr(exc, "strerror", None)
                           or str(exc))
            return
        after = start
        try:
            for record in reader:
                while problems:
                    yield problems.pop(0)
                yield record
                after = record.offset + 1
        except (OSError, SequenceFileError, GpumrError) as exc:
            # The file changed (shrank, went away) under the reader: the rest of the split is lost, and named.
            yield from problems
            problems = []
            why = getattr(exc, "message", None) or getattr(exc, "strerror", None) or str(exc)
            yield Lost(name, after, reader.end if end is None else end, f"reading stopped: {why}")
    yield from problems


def process(processor, items, at=None):
    """Hand every item :func:`read_split` yields to ``processor``; yield the outputs ready.

    Parameters
    ----------
    processor : gpumr.core.Processor
    items : iterable
        What :func:`read_split` yields.
    at : callable, optional
        ``at(offset)`` before each record (progress)."""
    for item in items:
        if isinstance(item, Lost):
            yield processor.lost(item)
        elif isinstance(item, Unreadable):
            yield processor.unreadable(item)
        else:
            if at is not None:
                at(item.offset)
            yield from processor.feed(item.key, item.value)
