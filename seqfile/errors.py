"""The exception types of the seqfile library: :class:`SequenceFileError` and its :class:`RecordError`."""


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

    Attributes
    ----------
    lost : (int, int) or None
        Set by a :class:`seqfile.Reader` that went on past this error (given ``on_error``): the byte range ``[start,
        end)`` it could not read, from the start of the record or block where it gave up to the sync marker where it
        resumed. None for an error that lost no bytes."""

    def __init__(self, path, offset, message):
        self.path = str(path)
        self.offset = offset
        self.message = message
        self.lost = None
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {message}")


class RecordError(SequenceFileError):
    """One record whose framing is intact but whose key or value cannot be read.

    Parameters
    ----------
    path, offset, message
        As :class:`SequenceFileError`; ``offset`` is the record's (or, in a block-compressed file, its block's)
        offset.
    key : bytes or None
        The key's bytes as stored (a Text key without its length prefix), so that the record can be named even when
        the key cannot be decoded; None when the key itself could not be read."""

    def __init__(self, path, offset, message, key=None):
        super().__init__(path, offset, message)
        self.key = key
