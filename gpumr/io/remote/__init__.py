r"""The one filesystem layer: local paths and URIs (``s3://``, ``hdfs://``, ``file://`` ...) behind one interface.

Schemes, credentials and the fallback: :doc:`/how-to/remote-data`."""

from .base import HDFS_SCHEMES, READ_BUFFER, READ_FLAGS, S3_COPY_LIMIT, ReadFailed, Unavailable, kind, shown
from .location import ANY_URI, S3_SCHEMES, Location, list_files, locate, open_output, upload, write_bytes

__all__ = ["locate", "Location", "shown", "kind", "Unavailable", "ReadFailed", "list_files", "open_output",
           "write_bytes", "upload", "READ_FLAGS", "READ_BUFFER", "S3_COPY_LIMIT", "S3_SCHEMES", "HDFS_SCHEMES",
           "ANY_URI"]
