"""The job output format, written and read here only: ``json(key)<TAB>json(value)`` lines.

Every engine's tasks write each record's line with :func:`line`, and everything that reads output lines back reads
them with :func:`key_of`, :func:`parse` or :func:`read_job_output`: one format, the same bytes everywhere."""

import io
import json

from ..errors import GpumrError
from .inputs import expand_inputs
from .remote import locate

#: A numpy array of at most this many elements nested inside a result (not a top-level field) becomes a JSON list.
NESTED_ELEMENTS = 65536


def _default(value):
    """JSON for numpy scalars and small nested arrays (``json.dumps``'s ``default``)."""
    import numpy as np  # (only for values JSON cannot take; readers of the format never import numpy)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size <= NESTED_ELEMENTS:
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} is not JSON (return numbers, strings, lists, dicts or numpy arrays)")


def line(key, value):
    """One output line, without its newline: ``json(key)<TAB>json(value)``.

    Examples
    --------
    >>> line("a.jpg", {"faces": [], "device": "cpu"})
    '"a.jpg"\\t{"faces": [], "device": "cpu"}'
    """
    return json.dumps(key) + "\t" + json.dumps(value, default=_default, allow_nan=False)


def key_of(text):
    """The JSON key of an output line, as text (what the lines are sorted and split by)."""
    return text.partition("\t")[0]


def parse(text):
    """``(key, value)`` of one output line; ValueError where it is not one.

    Examples
    --------
    >>> parse('"a.jpg"\\t{"faces": [], "device": "cpu"}\\n')
    ('a.jpg', {'faces': [], 'device': 'cpu'})
    """
    key, tab, value = text.rstrip("\n").partition("\t")
    if not tab:
        raise ValueError("no tab")
    return json.loads(key), json.loads(value)


def read_job_output(paths):
    """Yield ``(key, value)`` from job output files or folders (local paths or URIs), in file order, duplicates kept.
    Raises ``GpumrError`` for a line that is not a job output line (file and line named)."""
    for path in expand_inputs(paths):
        loc = locate(path)
        with loc.open_input() as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
            try:
                for n, text in enumerate(f, 1):
                    if not text.strip():
                        continue
                    try:
                        yield parse(text)
                    except ValueError:
                        raise GpumrError(f"{loc.shown}: line {n} is not a job output line (\"key\"<TAB>{{json}})") \
                            from None
            except UnicodeDecodeError as exc:
                raise GpumrError(f"{loc.shown}: not UTF-8 text ({exc.reason}), not a job's output") from None
