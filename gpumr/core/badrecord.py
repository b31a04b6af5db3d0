"""The one exception of the workload contract: a record that cannot be processed."""


class BadRecord(Exception):
    """The record cannot be processed: the message becomes its ``error`` output line; the job goes on.

    Examples
    --------
    >>> str(BadRecord("truncated PNG"))
    'truncated PNG'
    """
