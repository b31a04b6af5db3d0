"""Errors that the command line reports as one line, without a traceback."""

import re


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


#: The exit statuses of every gpumr entry point (the ``gpumr`` command, ``python -m gpumr.jobs.X``,
#: the service): 0 done; 1 any error, a refused option or usage error included; 130 interrupted
#: (Ctrl-C or SIGINT); 143 terminated (SIGTERM). One rule, so scripts can tell "failed" from "stopped"
#: and nothing else; a job whose records were bad but which ran to its end is done (0).
EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 130, 143

# ``scheme://user[:password]@host...``: the user-info part of a URI, up to the last ``@`` before the
# path. Credentials never reach a message, a log line or a traceback gpumr prints.
# A secret may hold '/' (AWS secret keys do), so ``user:...@`` runs to the first ``@`` of the word:
# this may hide more than the user-info (a path holding '@' after host:port), never less.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s:@]*:[^\s@]*@|[^/\s@]*@)")


def redact(text):
    """``text`` with the user-info of every URI in it replaced by ``***@``.

    Parameters
    ----------
    text : str
        Any message: an error line, a warning, a path list.

    Returns
    -------
    str
        The same text, where ``s3://KEY:SECRET@bucket/x`` reads ``s3://***@bucket/x``.
    """
    return _USERINFO.sub(r"\g<scheme>***@", str(text))
