"""A task's items, typed: a stretch of a SequenceFile (:class:`Split`) or one record a workload planned
(:class:`Record`). The launcher makes them once; engines hand them to tasks as they are, or as one JSON list each
where a task reads text (mrjob's task files: :func:`to_json`, :func:`from_json`).

Examples
--------
>>> from_json(to_json(Split("/data/a.seq", 0, 4096)))
Split(path='/data/a.seq', start=0, end=4096)
>>> to_json(Record("z00016", [16, 32]))
'["record", "z00016", [16, 32]]'
"""

import json
from typing import Any, NamedTuple, Optional

from ..errors import GpumrError


class Split(NamedTuple):
    """The records of SequenceFile ``path`` whose sync-delimited stretch starts in bytes ``[start, end)`` (Hadoop's
    split rule; ``end`` None: to the file's end)."""

    path: str
    start: int
    end: Optional[int]


class Record(NamedTuple):
    """One record the workload planned itself (:meth:`gpumr.Workload.plan`): its key and JSON value."""

    key: str
    value: Any


_KINDS = {"split": Split, "record": Record}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def to_json(item):
    """One line of text for ``item``: ``["split", path, start, end]`` or ``["record", key, value]``."""
    return json.dumps([_NAMES[type(item)], *item])


def from_json(text):
    """The item :func:`to_json` wrote; one line naming what is wrong with anything else."""
    try:
        kind, *fields = json.loads(text)
        return _KINDS[kind](*fields)
    except (ValueError, TypeError, KeyError):
        raise GpumrError(f"not a task item: {text[:80]!r}") from None


def input_bytes(items):
    """The input bytes ``items`` cover (planned records: 0)."""
    return sum((item.end or 0) - item.start for item in items if isinstance(item, Split))


def describe(items):
    """A few words on a task's items, for its log lines."""
    if items and isinstance(items[0], Split):
        first = items[0]
        more = f" and {len(items) - 1} more" if len(items) > 1 else ""
        return f"{first.path} bytes {first.start}-{first.end}{more}"
    return f"{len(items)} record{'s' if len(items) != 1 else ''}"
