"""Records of one input split, for every engine: each record, or a note of what was lost.

The engines (mrjob's tasks, Spark's Python workers) read SequenceFiles with
:func:`read_split` and hand each item to the core: a
:class:`seqfile.reader.Record` is processed, a :class:`Lost` becomes one
``error`` output line naming the file and the byte range, so nothing is
skipped silently.
"""

from collections import namedtuple

from seqfile import Reader, SequenceFileError

Lost = namedtuple("Lost", "name start end reason")
Lost.__doc__ = """A stretch of an input that could not be read: ``[start, end)`` bytes of ``name``
(``end`` None when unknown), and why."""


def read_split(path, start=0, end=None, name=None):
    """Yield the records of split ``[start, end)`` of a SequenceFile, and :class:`Lost` stretches.

    Parameters
    ----------
    path : str
        Local path of the file.
    start, end : int, optional
        The split, with Hadoop's semantics (see :class:`seqfile.Reader`); the whole file by default.
    name : str, optional
        How errors name the file (its URI); ``path`` by default.

    Yields
    ------
    seqfile.reader.Record or Lost
    """
    name = name or path
    lost = []
    try:
        reader = Reader(path, start=start, end=end,
                        on_error=lambda exc: lost.append(Lost(name, exc.offset, None, exc.message)))
    except (OSError, SequenceFileError) as exc:
        yield Lost(name, 0, None, getattr(exc, "message", None) or str(exc))
        return
    with reader:
        for record in reader:
            while lost:
                yield lost.pop(0)
            yield record
    yield from lost
