"""Errors that the command line reports as one line, without a traceback."""


class GpumrError(Exception):
    """A user-facing failure: bad input, a missing file, an impossible request."""
