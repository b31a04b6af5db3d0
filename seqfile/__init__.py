"""Hadoop SequenceFiles in pure Python.

>>> with Writer("frames.seq") as w:              # doctest: +SKIP
...     w.append("frame_0001.jpg", jpeg_bytes)
>>> for key, value, offset in Reader("frames.seq"):  # doctest: +SKIP
...     ...
"""

from .errors import RecordError, SequenceFileError
from .header import BLOCK, NONE, RECORD, SYNC_INTERVAL, Header
from .reader import DEFAULT_MAX_RECORD_SIZE, Reader, Record, read_records
from .writer import Writer

__all__ = ["SequenceFileError", "RecordError", "Header", "Reader", "Record", "Writer", "read_records",
           "NONE", "RECORD", "BLOCK", "SYNC_INTERVAL", "DEFAULT_MAX_RECORD_SIZE"]
