r"""The one filesystem layer: local paths and URIs (``s3://``, ``hdfs://``, ``file://`` ...) behind one interface.

:func:`locate` parses a path or URI once and returns a :class:`Location`
served by one backend module each behind one interface: the operating system
(:mod:`.local`), pyarrow's filesystems (:mod:`.arrow`), boto3 for S3 keys
pyarrow cannot name (:mod:`.boto`) or the ``hadoop fs`` command (:mod:`.hadoop`); it is the only place that
tells a URI from a path, and every command, engine and the output
transaction (:mod:`gpumr.io.outputs`) come here. A URI holding user-info is
refused without echoing it; errors are one-line :class:`GpumrError`\ s, and
a file that changes size under a reader is :class:`ReadFailed`. Schemes,
credentials and the fallback: :doc:`/how-to/remote-data`.
"""

from .base import HDFS_SCHEMES, READ_BUFFER, READ_FLAGS, S3_COPY_LIMIT, ReadFailed, Unavailable, kind, shown
from .location import ANY_URI, S3_SCHEMES, Location, list_files, locate, open_output, upload, write_bytes

__all__ = ["locate", "Location", "shown", "kind", "Unavailable", "ReadFailed", "list_files", "open_output",
           "write_bytes", "upload", "READ_FLAGS", "READ_BUFFER", "S3_COPY_LIMIT", "S3_SCHEMES", "HDFS_SCHEMES",
           "ANY_URI"]
