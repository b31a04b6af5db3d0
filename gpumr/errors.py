"""Errors that the command line reports as one line, without a traceback."""


class GpumrError(Exception):
    """A user-facing failure: bad input, a missing file, an impossible request."""


def printable(name):
    """``name`` (a key or a path, str or bytes) on one line: what cannot be shown is escaped.

    Control characters (newline, tab, ...) and other unprintable characters
    become Python-style escapes (``\\n``, ``\\t``, ``\\x1b``, ``\\u2028``), bytes that
    are not UTF-8 (file names the OS gave as surrogates) become ``\\xNN``, and
    a backslash becomes ``\\\\``, so the result is unambiguous, fits in one
    line of a listing or an error message, and cannot move the terminal's cursor.
    """
    if isinstance(name, bytes):
        name = name.decode("utf-8", "surrogateescape")
    if name.isprintable() and "\\" not in name:
        return name
    out = []
    for ch in name:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        elif "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xdc00:02x}")
        else:
            out.append(repr(ch)[1:-1] if ch not in "'\"" else ch)
    return "".join(out)
