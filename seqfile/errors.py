"""The one exception type of the seqfile library."""


class SequenceFileError(Exception):
    """A SequenceFile could not be read or written as the format requires.

    Parameters
    ----------
    path : str
        The file (or a description of the stream) concerned.
    offset : int or None
        Byte offset in the file where the problem was found, if known.
    message : str
        What was expected and what was found instead.
    """

    def __init__(self, path, offset, message):
        self.path = str(path)
        self.offset = offset
        self.message = message
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {message}")
