"""Input paths as users give them: files, or folders of files.

A folder stands for its visible files (not those starting with ``.`` or
``_``, which Hadoop also hides: ``_SUCCESS``, ``.crc`` files), sorted; files
are taken as given. Every command and job expands its inputs here.
"""

import os
import stat

from seqfile.header import MAGIC

from ..errors import GpumrError, printable

#: Flags to open an input for reading: never through a symbolic link, never blocking on a FIFO.
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def expand_inputs(paths):
    """The files named by ``paths``: files as given, folders' visible files sorted.

    Only regular files are read (a FIFO or a device could block or never
    end); anything else, given or found in a folder, is refused by name
    rather than skipped. Sub-folders of a folder are not entered.

    Raises
    ------
    GpumrError
        If a path does not exist, is not a regular file, or no file is found.
    """
    out = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if not n.startswith((".", "_")))
            found = [os.path.join(p, n) for n in names if not os.path.isdir(os.path.join(p, n))]
        elif os.path.lexists(p):
            found = [p]
        else:
            raise GpumrError(f"{printable(p)}: no such file or directory")
        for f in found:
            try:
                mode = os.stat(f).st_mode
            except OSError as exc:
                raise GpumrError(f"{printable(f)}: {exc.strerror}") from None
            if not stat.S_ISREG(mode):
                raise GpumrError(f"{printable(f)}: {kind(mode)}, not a regular file; only files are read "
                                 "(copy a stream to a file first)")
        out += found
    if not out:
        raise GpumrError(f"no files in {', '.join(printable(p) for p in paths)}")
    return out


def kind(mode):
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", "a folder", ...)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                        (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def looks_like_sequencefile(path):
    """Whether ``path`` starts with a SequenceFile's magic bytes ``SEQ``."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def describe_file(path):
    """A few words on what ``path`` holds, for errors about files that are not SequenceFiles."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if not head:
        return "empty"
    for magic, kind in ((b"\xff\xd8\xff", "a JPEG image"), (b"\x89PNG", "a PNG image"), (b"II*\x00", "a TIFF image"),
                        (b"MM\x00*", "a TIFF image"), (b"\x1f\x8b", "a gzip file"), (b"PK\x03\x04", "a zip file")):
        if head.startswith(magic):
            return kind
    return f"not a SequenceFile (starts with {head[:4]!r})"
