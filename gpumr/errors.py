"""Errors that the command line reports as one line, without a traceback."""

import difflib
import re


class GpumrError(Exception):
    """A user-facing failure: bad input, a missing file, an impossible request."""


def printable(name):
    """``name`` (a key or a path, str or bytes) on one line: what cannot be shown is escaped."""
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


def did_you_mean(word, known):
    """`` (did you mean X?)`` naming the one of ``known`` closest to a misspelt ``word``, or "" (none close).

    Examples
    --------
    >>> did_you_mean("--scale-factr", ["--scale-factor", "--min-size"])
    ' (did you mean --scale-factor?)'
    >>> did_you_mean("zzz", ["faces", "blobs"])
    ''
    """
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


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
    """``text`` (any message: an error line, a warning, a path list) with the user-info of every URI in it replaced by
    ``***@``.

    Examples
    --------
    >>> redact("cannot read s3://KEY:SECRET@bucket/x")
    'cannot read s3://***@bucket/x'
    """
    return _USERINFO.sub(r"\g<scheme>***@", str(text))


#: What the one line of an unexpected error (a bug) ends with.
BUG_HINT = " (an unexpected error, a bug: rerun with --debug to see where it happened)"

#: Words in a setting's name that mark its value a secret (AWS keys and tokens, passwords).
SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "key_id", "access_key")


def redact_settings(settings):
    """A framework's settings (``{name: value}``) fit to show: secrets' values and every ``cmdenv`` value (environment
    for the tasks, often credentials) as ``***``, user-info hidden in the rest.

    Examples
    --------
    >>> redact_settings({"aws_secret_access_key": "abc", "cmdenv": {"TOKEN": "x"}, "uri": "s3://k:s@b/x"})
    {'aws_secret_access_key': '***', 'cmdenv': {'TOKEN': '***'}, 'uri': 's3://***@b/x'}
    """
    out = {}
    for key, value in settings.items():
        if any(word in key.lower() for word in SECRET_WORDS):
            value = "***"
        elif key == "cmdenv" and isinstance(value, dict):
            value = {k: "***" for k in value}
        elif isinstance(value, str):
            value = redact(value)
        out[key] = value
    return out


#: Error lines that have an entry in the troubleshooting page (``docs/troubleshooting.rst``, shipped as
#: ``gpumr/troubleshooting.rst`` for ``gpumr help TOPIC``): ``(topic, pattern)``, the first match wins.
#: A pattern is searched in the line the error boundary prints (what follows ``gpumr: error:``).
TROUBLESHOOTING = tuple((topic, re.compile(pattern)) for topic, pattern in (
    ("hadoop-missing", r"^hadoop: No such file or directory|No such file or directory: 'hadoop'"
                       r"|no `hadoop` command|no hadoop command on PATH"),
    ("hdfs-unreachable", r"Could not mkdir hdfs:|Call From .* failed on connection|hdfs://.*Connection refused"),
    ("credentials-in-uri", r"a URI with user-info"),
    ("s3-unreachable", r"cannot reach s3://|AWS Error|NoCredentialsError|Unable to locate credentials"
                       r"|InvalidAccessKeyId|AccessDenied"),
    ("no-files", r"^no (input )?files in |holds folders, no files"),
    ("pack-first", r"no SequenceFile among the inputs(?!.*a CT geometry)"),
    ("output-in-the-way", r"already exists|, not of gpumr |gpumr never writes over|not removing it"
                          r"|did not make"),
    ("no-gpu", r"--device gpu: no GPU|no GPU became free|neither CuPy nor PyCUDA|nvcc not found"),
    ("geometry-required", r"--geometry is required"),
    ("emr-output-uri", r"EMR writes its output to a URI"),
    ("dask-scheduler", r"no Dask scheduler answered"),
    ("spark-failed", r"Spark did not start|the Spark job failed"),
    ("job-failed", r"the (hadoop|emr|local|inline|spark|dask|radical|flink) job failed"),
    ("over-a-limit", r"over the limit of"),
    ("codec-missing", r"needs the '(cramjam|backports\.zstd)' package"),
    ("bug", r"an unexpected error, a bug: rerun with --debug"),
))


def help_topic(message):
    """The troubleshooting topic of an error line (as the boundary prints it, without ``gpumr: error:``), or None when the
    page has no entry for it: its anchor on the page (``troubleshooting.html#TOPIC``) and ``gpumr help TOPIC``.

    Examples
    --------
    >>> help_topic("no files in photos/")
    'no-files'
    >>> help_topic("hadoop: No such file or directory")
    'hadoop-missing'
    >>> help_topic("something nobody wrote about") is None
    True
    """
    for topic, pattern in TROUBLESHOOTING:
        if pattern.search(message):
            return topic
    return None


def hint(message):
    """What the error boundary appends to an error line that has an entry: ``" (see: gpumr help TOPIC)"``, or ``""``.

    Examples
    --------
    >>> "no files in photos/" + hint("no files in photos/")
    'no files in photos/ (see: gpumr help no-files)'
    """
    topic = help_topic(message)
    return f" (see: gpumr help {topic})" if topic else ""
