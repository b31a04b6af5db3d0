"""What a record's own code writes to file descriptor 2, captured: a library's message becomes the record's."""

import os
import re
import sys
import threading

#: The most of what one block captured that is read back (the rest is dropped).
KEEP = 64 << 10
#: The most of it a record's line keeps.
SAID_CHARS = 300

_lock = threading.Lock()
_state = {"depth": 0, "saved": None, "file": None, "relayed": 0}


def _file():
    """The private file fd 2 points at during blocks: in memory where the system allows (made once per process),
    written at its end whatever its offset (threads writing at once each add their line, none overwrites one)."""
    if _state["file"] is None:
        import fcntl
        try:
            f = os.memfd_create("gpumr-stderr", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            import tempfile
            with tempfile.TemporaryFile() as t:
                f = os.dup(t.fileno())
        fcntl.fcntl(f, fcntl.F_SETFL, fcntl.fcntl(f, fcntl.F_GETFL) | os.O_APPEND)
        _state["file"] = f
    return _state["file"]


def _flush():
    """Flush Python's ``sys.stderr``, so that what it holds goes where fd 2 points now."""
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


def _begin():
    with _lock:
        if _state["depth"] == 0:
            _flush()
            f = _file()
            _state["saved"] = os.dup(2)
            os.dup2(f, 2)
        _state["depth"] += 1
        return os.fstat(_state["file"]).st_size


def _end(start):
    with _lock:
        _flush()
        f = _state["file"]
        end = os.fstat(f).st_size
        theirs = b""
        if end > start:  # (most blocks: nothing written)
            ours, theirs = _split(os.pread(f, min(end - start, KEEP), start), _state["relayed"] - start)
            if ours:
                os.write(_state["saved"], ours)
            _state["relayed"] = max(_state["relayed"], end)
        _state["depth"] -= 1
        if _state["depth"] == 0:
            os.dup2(_state["saved"], 2)
            os.close(_state["saved"])
            _state["saved"] = None
            if end:
                os.ftruncate(f, 0)
                _state["relayed"] = 0
        return theirs


def _split(data, relayed):
    """``(gpumr's own writes not relayed yet, the rest)`` of what was written to fd 2 (``data``, of which the first
    ``relayed`` bytes were relayed already by an overlapping block): lines in gpumr's format (``gpumr: ...``) and a
    progress bar's ``\r`` updates are gpumr's."""
    ours, rest, at = [], [], 0
    for piece in re.split(rb"(?<=\n)|(?=\r)", data):
        if piece.startswith((b"gpumr: ", b"\r")):
            if at >= relayed:
                ours.append(piece)
        else:
            rest.append(piece)
        at += len(piece)
    return b"".join(ours), b"".join(rest)


#: OpenCV's log line prefix: ``[ WARN:0@1.440] global grfmt_png.cpp:793 readFromStreamOrBuffer `` (level, thread,
#: time, scope, source line, function), which says nothing to a user.
_OPENCV = re.compile(r"^\[\s*\w+:\d+@[\d.]+\]\s+(?:global\s+)?\S+:\d+\s+\S+\s+")


def said(data):
    """What a block captured (bytes), as one line: each non-empty line stripped, OpenCV's log prefixes dropped, joined
    by semicolons; "" for nothing.

    Examples
    --------
    >>> said(b"[ WARN:0@1.440] global grfmt_png.cpp:793 readFromStreamOrBuffer PNG input buffer is incomplete\\n")
    'PNG input buffer is incomplete'
    >>> said(b"libpng error: PNG input buffer is incomplete\\n\\n")
    'libpng error: PNG input buffer is incomplete'
    """
    if not data:
        return ""
    lines = (_OPENCV.sub("", line.strip()) for line in data.decode("utf-8", "replace").splitlines())
    text = "; ".join(line for line in lines if line)
    return text if len(text) <= SAID_CHARS else text[:SAID_CHARS - 3] + "..."


class captured:
    """Point fd 2 at a private file for the block; give a list that then holds what was written to it (:func:`said`:
    one line, "" for nothing), gpumr's own lines let through.

    Examples
    --------
    >>> with captured() as text:
    ...     _ = os.write(2, b"libpng error: PNG input buffer is incomplete\\n")
    >>> text
    ['libpng error: PNG input buffer is incomplete']
    """

    __slots__ = ("text", "start")

    def __enter__(self):
        self.text = []
        try:
            self.start = _begin()
        except OSError:  # (no descriptor left to point fd 2 elsewhere: the block runs as it would have)
            self.start = None
        return self.text

    def __exit__(self, *exc):
        self.text.append("" if self.start is None else said(_end(self.start)))


def _after_fork_in_child():
    """A child forked while a block of another thread ran: its fd 2 pointed back, and a fresh file and lock."""
    global _lock
    _lock = threading.Lock()
    if _state["depth"]:
        os.dup2(_state["saved"], 2)
        os.close(_state["saved"])
    if _state["file"] is not None:
        os.close(_state["file"])
    _state.update(depth=0, saved=None, file=None, relayed=0)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
