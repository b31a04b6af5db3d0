"""gpumr's one logger: every message that is not an error's one line, in one format, through one handler.

Each module logs through its own child of the ``gpumr`` logger (:func:`logger`), so that ``-q`` and ``-v`` act
alike everywhere; a warning is said once per process (:func:`once`), and a command's result line goes to stdout
(:func:`report`)."""

import io
import logging
import re
import sys
import warnings

from .errors import BUG_HINT, redact

#: Name of the logger every gpumr message goes through; modules log through children of it (:func:`logger`).
ROOT = "gpumr"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# -- messages -----------------------------------------------------------------------------------------
class _Formatter(logging.Formatter):
    """``gpumr: LEVEL: message`` (``gpumr: message`` for information), redacted."""

    def format(self, record):
        text = redact(record.getMessage())
        level = record.levelno
        if getattr(record, "plain", False) or level == logging.INFO:
            return f"gpumr: {text}"
        name = "warning" if level == logging.WARNING else "error" if level >= logging.ERROR else "debug"
        return f"gpumr: {name}: {text}"


def write_stderr(text):
    """Write ``text`` to the ``sys.stderr`` of the moment, whether it takes text or bytes, and flush it."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        if isinstance(stream, io.TextIOBase):
            stream.write(text)
        else:
            try:
                stream.write(text)
            except TypeError:  # a binary stream
                stream.write(text.encode("utf-8", "replace"))
        stream.flush()
    except (OSError, ValueError):  # closed: nowhere left to say anything
        pass


class StderrHandler(logging.Handler):
    """Writes each message as one line to the ``sys.stderr`` of the moment (:func:`write_stderr`)."""

    def emit(self, record):
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 (logging's own rule: a bad message never stops the program)
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING and len(_SAID) < 10000:
            _SAID.add(line)
        write_stderr(line + "\n")


_SAID = set()


def said(line):
    """Whether this process already wrote warning ``line`` (``gpumr: warning: ...``)."""
    return line in _SAID


def say_once(log, text, level=logging.WARNING):
    """Log ``text`` through ``log`` once per process (many tasks, records or calls would say the same).

    Examples
    --------
    >>> import logging
    >>> say_once(logger("gpumr.example"), "said once", logging.DEBUG)
    """
    if once(text):
        log.log(level, "%s", text)


def once(key):
    """True the first time this process asks for ``key`` (a warning's text, or any name of what is said once): the one
    memory of what was said.

    Examples
    --------
    >>> once("an example warning"), once("an example warning")
    (True, False)
    """
    if key in _SAID or len(_SAID) >= 10000:
        return False
    _SAID.add(key)
    return True


#: The lines a process ends with on Ctrl-C and SIGTERM (:func:`_interrupted`): a task's is the job's to say, once.
_ENDINGS = ("gpumr: interrupted", "gpumr: terminated")


def relay_task_lines(paths):
    """Say once each the ``gpumr:`` lines tasks wrote to their stderr files (``paths``), but not their errors (the
    job's own line says the first) nor how they ended on a signal (the job says it too) nor a warning this process
    already said: where a framework keeps a task's stderr to itself (mrjob's inline and local runners)."""
    seen = set()
    for path in paths:
        with open(path, "rb") as f:
            for raw in f:
                text = raw.decode("utf-8", "replace").rstrip("\n")
                if text.startswith("gpumr: ") and not text.startswith("gpumr: error: ") and text not in seen \
                        and text not in _ENDINGS and not said(text):
                    seen.add(text)
                    write_stderr(text + "\n")


def relay(text):
    """Say once each the ``gpumr:`` lines of ``text`` (what a task wrote to its stderr, handed back by its
    framework), as :func:`relay_task_lines` says a task's files."""
    for line in text.splitlines():
        if line.startswith("gpumr: ") and not line.startswith("gpumr: error: ") and line not in _ENDINGS \
                and once(line):
            write_stderr(line + "\n")
        elif line.strip() and not line.startswith("gpumr: "):
            logger("gpumr.tasks").debug("a task said: %s", line)


def task_error(texts):
    """The error a task said in its one line (``gpumr: error: ...``, its hint dropped) in what a framework relayed
    of its stderr (``texts``, lines possibly indented), or None."""
    for text in texts:
        for line in text.splitlines():
            at = line.find("gpumr: error: ")
            if at >= 0 and not line[:at].strip():
                text = re.sub(r" \(see: gpumr help [\w-]+\)$", "", line[at + len("gpumr: error: "):].rstrip())
                return redact(text.replace(BUG_HINT, ""))
    return None


_handler = StderrHandler()
_handler.setFormatter(_Formatter())


def _attach():
    """Give the ``gpumr`` logger its handler (once): gpumr's messages, in gpumr's format, on stderr."""
    log = logging.getLogger(ROOT)
    if _handler not in log.handlers:
        log.addHandler(_handler)
        log.propagate = False
        if log.level == logging.NOTSET:
            log.setLevel(logging.INFO)


def install():
    """:func:`_attach`, and route Python warnings (``warnings.warn``) through the same path."""
    _attach()
    warnings.showwarning = _show_warning


def logger(name=ROOT):
    """The logger for module ``name`` (pass ``__name__``), a child of ``gpumr``, its handler attached."""
    _attach()
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


def silence(*names):
    """Turn off the loggers ``names`` (a framework's) and every logger below them that has a level of its own.

    Examples
    --------
    >>> import logging
    >>> child = logging.getLogger("framework.part")
    >>> child.setLevel(logging.WARNING)
    >>> silence("framework")
    >>> child.isEnabledFor(logging.CRITICAL), logging.getLogger("framework.other").isEnabledFor(logging.CRITICAL)
    (False, False)
    """
    off = logging.CRITICAL + 1
    for name in names:
        logging.getLogger(name).setLevel(off)
    for name, known in list(logging.root.manager.loggerDict.items()):
        if isinstance(known, logging.Logger) and known.level and any(name.startswith(n + ".") for n in names if n):
            known.setLevel(off)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning``: a warning is one ``gpumr: warning:`` line, on the stream of the moment."""
    logging.getLogger(ROOT).warning("%s", one_line(message))


def set_verbosity(quiet=False, verbose=False):
    """``-q``: warnings and errors only; ``-v``: debug lines too; neither: information as well."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    install()
    logging.getLogger(ROOT).setLevel(level)


def quiet():
    """Whether information and progress are off (``-q``): commands then draw no progress bar either."""
    return not logging.getLogger(ROOT).isEnabledFor(logging.INFO)


def report(text):
    """Print a command's closing line of what it made (``packed 4 files ... -> f.seq``) on stdout, unless ``-q``.

    Examples
    --------
    >>> set_verbosity(quiet=True); report("wrote nothing to see")
    >>> set_verbosity(); report("wrote s3://key:secret@bucket/x")
    wrote s3://***@bucket/x
    """
    if not quiet():
        print(redact(text), flush=True)


def one_line(text):
    """``text`` on one line: lines joined by a semicolon and a space, control characters escaped, redacted."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    joined = "; ".join(lines)
    return redact(_CONTROL.sub(lambda m: repr(m.group())[1:-1], joined))


__all__ = ["logger", "install", "set_verbosity", "quiet", "report", "silence", "once", "say_once", "said", "one_line",
           "StderrHandler", "write_stderr", "relay", "relay_task_lines", "task_error", "ROOT"]
