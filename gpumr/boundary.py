"""The error boundary: how every gpumr entry point ends, and the one path of its messages to the user.

Each entry point runs inside :func:`guard` (``gpumr``, ``python -m
gpumr.jobs.X`` and the tasks mrjob starts with it, ``python -m
gpumr.cli.spark_submit``, ``gpumr scheduler serve``):

- any exception ends in ONE line on stderr, ``gpumr: error: ...``, passed
  through :func:`gpumr.errors.redact` (a URI's user-info never shows),
  and exit status :data:`~gpumr.errors.EXIT_ERROR` (1). That holds for
  usage errors and refused options (:class:`UsageError`, raised by the
  argument parsers instead of argparse's exit status 2) and for
  unexpected exceptions (bugs): their line names the exception's type
  and asks for a rerun with ``--debug``, which shows the traceback
  (redacted too) above the line. A traceback is never printed otherwise:
  it may hold a secret from a local variable's repr or a library's message.
  A line the troubleshooting page has an entry for ends with ``(see:
  gpumr help TOPIC)`` (:func:`gpumr.errors.hint`).
- Ctrl-C (SIGINT) ends in ``gpumr: interrupted`` and exit status
  :data:`~gpumr.errors.EXIT_INTERRUPTED` (130), whenever it comes: what
  the command was writing is removed first
  (:func:`seqfile.atomic.discard_unfinished`). SIGTERM takes the same path
  (:class:`Terminated`, a ``KeyboardInterrupt``: every clean-up that
  Ctrl-C runs, runs) and ends in ``gpumr: terminated``, exit status
  :data:`~gpumr.errors.EXIT_TERMINATED` (143). Either one landing inside an
  import waits for the import's end (:func:`_raise_outside_imports`: raised
  there, it can vanish).
- success is :data:`~gpumr.errors.EXIT_OK` (0), and so is a closed pipe
  on stdout (``gpumr ls big.seq | head``).

Messages that are not errors go through :mod:`logging`: the ``gpumr``
logger and its children, one per module (:func:`logger`), formatted
``gpumr: warning: ...`` (warnings), ``gpumr: ...`` (information, such as a
job's summary line) and ``gpumr: debug: ...``. Python warnings (``warnings.warn``)
take the same path. The handler writes to whatever ``sys.stderr`` is
when the message is emitted, text or bytes (mrjob's inline runner gives
its tasks a binary stderr). ``-q`` shows warnings and errors only, ``-v``
adds debug lines (:func:`set_verbosity`). A command's closing line of what
it made (``packed ...``, ``wrote ...``) is its result on stdout
(:func:`report`), and ``-q`` leaves that out as well.

Only the standard library, :mod:`gpumr.errors` and seqfile's error classes
are imported here, so that any module may log through it.
"""

import argparse
import atexit
import contextlib
import gc
import io
import logging
import os
import re
import sys
import traceback
import warnings

from seqfile import SequenceFileError
from seqfile.atomic import discard_unfinished
from seqfile.codecs import CodecError

from .errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, GpumrError, did_you_mean, hint, redact

#: Name of the logger every gpumr message goes through; modules log through children of it (:func:`logger`).
ROOT = "gpumr"
#: Set to 1 to show tracebacks (as ``--debug``), e.g. in tasks a job starts.
DEBUG_ENV = "GPUMR_DEBUG"
#: What the one line of an unexpected error (a bug) ends with.
BUG_HINT = " (an unexpected error, a bug: rerun with --debug to see where it happened)"
#: Error classes whose message is written for the user as it is.
USER_ERRORS = (GpumrError, SequenceFileError, CodecError)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class UsageError(GpumrError):
    """A command line that cannot be parsed: an unknown option, a bad value, a missing argument."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one-line :class:`UsageError`\\ s, not argparse's usage text
    and exit status 2: the boundary shows one line and exits 1, as for every other error. ``--help`` still
    prints and exits 0. Every parser of gpumr's is of this class (``add_subparsers`` makes a parser's
    subcommands of its class).

    Examples
    --------
    >>> p = ArgumentParser(prog="gpumr example")
    >>> p.parse_args(["--nope"])
    Traceback (most recent call last):
    ...
    gpumr.boundary.UsageError: unrecognized arguments: --nope (see gpumr example --help)
    """

    def error(self, message):
        raise UsageError(f"{self.suggest(message)} (see {self.prog} --help)")

    def suggest(self, message):
        """argparse's ``message`` with "did you mean" for a misspelt option or choice it names.

        Examples
        --------
        >>> p = ArgumentParser(prog="gpumr example")
        >>> _ = p.add_argument("--engine", choices=["local", "spark"])
        >>> p.suggest("unrecognized arguments: --engin spark")
        'unrecognized arguments: --engin spark (did you mean --engine?)'
        >>> p.suggest("argument --engine: invalid choice: 'sprak' (choose from 'local', 'spark')")
        "argument --engine: invalid choice: 'sprak' (choose from 'local', 'spark') (did you mean spark?)"
        """
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            listed = choice.group(2)  # ('a', 'b'; Python 3.12.8 and later: a, b)
            return message + did_you_mean(choice.group(1), re.findall(r"'([^']*)'", listed) or listed.split(", "))
        if message.startswith("unrecognized arguments: "):
            known = [s for s in self._option_string_actions if s.startswith("--")]
            for word in message.split()[2:]:
                if word.startswith("--"):
                    hint = did_you_mean(word.partition("=")[0], known)
                    if hint:
                        return message + hint
        return message


def show_defaults(parser):
    """Say each option's default in its help, where the help does not already (``--slab N: ... (default 16)``),
    on ``parser`` and every subcommand under it; the docs' reference reads the same help.

    Examples
    --------
    >>> p = ArgumentParser(prog="gpumr example")
    >>> _ = p.add_argument("--ksize", type=int, default=3, help="the aperture")
    >>> show_defaults(p)
    >>> p._option_string_actions["--ksize"].help
    'the aperture (default 3)'
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                show_defaults(sub)
            continue
        default = action.default
        if (not isinstance(action.help, str) or action.help == argparse.SUPPRESS or "default" in action.help.lower()
                or default in (None, False, argparse.SUPPRESS) or default == [] or not action.option_strings):
            continue
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        action.help += f" (default {shown.replace('%', '%%')})"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is (as Ctrl-C raises KeyboardInterrupt), so that it cleans up the same way."""


_SIGTERM_PID = None


def _in_multiprocessing_worker():
    """Whether this process is a worker that Python's multiprocessing started (mrjob's local pool forks them)."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


def _on_sigterm(signum, frame):
    import signal
    if os.getpid() != _SIGTERM_PID:  # a child forked with this handler (a framework's worker): the default action
        if _in_multiprocessing_worker():
            # A multiprocessing worker (mrjob's local pool) unwinds instead: killed at once while it waits for work,
            # it would keep its queue's lock, and the parent's Pool.terminate would wait for that lock for ever.
            raise SystemExit(128 + signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _raise_outside_imports(Terminated, frame)


def _on_sigint(signum, frame):
    """Ctrl-C: ``KeyboardInterrupt``, as Python's own handler, but never inside an import (:func:`_raise_outside_imports`)."""
    _raise_outside_imports(KeyboardInterrupt, frame)


#: Seconds a Ctrl-C or SIGTERM that lands inside an import waits for the import to end before it is raised there.
IMPORT_GRACE = 10.0
_DEFERRED = {"since": None, "pending": set()}  # (when the first one was put off; the signals on their way)


def _raise_outside_imports(exc_type, frame, prepare=None):
    """Raise ``exc_type`` (Ctrl-C's or SIGTERM's) where the program is, unless it is inside an import: then the
    signal comes again 10 ms later, until the import has ended (at most :data:`IMPORT_GRACE` seconds).

    An interrupt raised inside an import can vanish. A compiled module's
    initialisation that calls Python code (Cython's numpy.random._generator
    registering with ``abc``) clears it, and the command goes on as if never
    stopped; and CPython's ``from X import Y`` failing on it says ``TypeError:
    expected a message argument`` instead. Measured with ``gpumr sample frames
    -n 2000`` beside three busy loops: 2 lost Ctrl-C in about 140, each in
    ``abc.register`` under an extension module's ``exec_module``. An import is
    short (there, under that load, the imports a Ctrl-C landed in lasted up to
    1.4 s), so the signal waits for its end; one that does not end within
    :data:`IMPORT_GRACE` seconds gets it anyway. ``prepare()`` runs once, just
    before the raise (:func:`interrupt_with`).
    """
    import time
    importing = False
    while frame is not None and not importing:
        importing = frame.f_code.co_filename.startswith("<frozen importlib._bootstrap")
        frame = frame.f_back
    now = time.monotonic()
    if importing and now - (_DEFERRED["since"] or now) < IMPORT_GRACE:
        if _DEFERRED["since"] is None:
            _DEFERRED["since"] = now
        if _signal_of(exc_type) not in _DEFERRED["pending"]:  # (one on its way: a second Ctrl-C meanwhile joins it)
            _DEFERRED["pending"].add(_signal_of(exc_type))
            _deliver_again(exc_type, after=0.01)
        return
    _DEFERRED["since"] = None
    if prepare is not None:
        prepare()
    raise exc_type()


def _on_sigint_in_child(signum, frame):
    """Ctrl-C in a forked child: a multiprocessing worker ends quietly (SystemExit; for a KeyboardInterrupt, its
    bootstrap prints a traceback while the job's one line says ``gpumr: interrupted``); any other raises
    KeyboardInterrupt, as Python's own handler does."""
    if _in_multiprocessing_worker():
        raise SystemExit(128 + signum)
    raise KeyboardInterrupt


def _after_fork_in_child():
    import signal
    try:
        if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_sigint):
            signal.signal(signal.SIGINT, _on_sigint_in_child)
    except ValueError:  # (not this interpreter's main thread: nothing to change)
        pass


def interrupt_with(prepare):
    """From now on, Ctrl-C and SIGTERM call ``prepare()`` before they raise ``KeyboardInterrupt`` (:class:`Terminated`).

    For frameworks that answer an interrupt in the middle of one of their
    calls with tracebacks of their own (Py4J, under Spark and Flink):
    ``prepare`` silences them, so that the boundary's line is the only one.
    In the main thread only (elsewhere nothing changes); a forked child keeps
    the default ends (:func:`_on_sigterm`).

    Examples
    --------
    >>> import signal
    >>> saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    >>> interrupt_with(lambda: print("quiet now"))
    >>> try:
    ...     signal.raise_signal(signal.SIGINT)
    ... except KeyboardInterrupt:
    ...     print("interrupted")
    quiet now
    interrupted
    >>> for sig, handler in zip((signal.SIGINT, signal.SIGTERM), saved):
    ...     _ = signal.signal(sig, handler)
    """
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigint(signum, frame):
        _raise_outside_imports(KeyboardInterrupt, frame, prepare)

    def on_sigterm(signum, frame):
        if os.getpid() == _SIGTERM_PID:
            _raise_outside_imports(Terminated, frame, prepare)
        else:
            _on_sigterm(signum, frame)
    signal.signal(signal.SIGINT, on_sigint)
    if _SIGTERM_PID is not None:  # (the boundary's SIGTERM handler is in place: Terminated, after prepare)
        signal.signal(signal.SIGTERM, on_sigterm)


def _catch_signals():
    """Raise :class:`Terminated` on SIGTERM in this (main) thread, where SIGTERM has its default action, and
    ``KeyboardInterrupt`` on Ctrl-C where Python's own handler would, both outside imports
    (:func:`_raise_outside_imports`); and make forked multiprocessing workers end quietly on Ctrl-C
    (:func:`_on_sigint_in_child`). An ignored Ctrl-C stays ignored."""
    import signal
    import threading
    global _SIGTERM_PID
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        if _SIGTERM_PID is None:
            os.register_at_fork(after_in_child=_after_fork_in_child)
        _SIGTERM_PID = os.getpid()
        signal.signal(signal.SIGTERM, _on_sigterm)


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
    """Write ``text`` to the ``sys.stderr`` of the moment, whether it takes text or bytes, and flush it.

    (mrjob's inline runner gives its tasks a binary stderr; a closed one takes nothing, silently.)
    """
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
    """Writes each message as one line to the ``sys.stderr`` of the moment (:func:`write_stderr`).

    It remembers the warnings it wrote (:func:`said`), so that a task's same
    warning, relayed later, is not said twice.
    """

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


def _unraisable(info):
    """``sys.unraisablehook``: an error Python cannot raise (a library's ``__del__`` at exit) is a debug line.

    A Ctrl-C (or SIGTERM) whose handler ran inside a finalizer raised its
    ``KeyboardInterrupt`` where Python can only report it: the process
    would go on as if never stopped. It is delivered again, so the main
    thread stops at its next step.
    """
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        _deliver_again(info.exc_type)
        return
    if debug_wanted():
        sys.__unraisablehook__(info)
        return
    logging.getLogger(ROOT).debug("ignored in %s: %s", getattr(info.object, "__qualname__", info.object),
                                  describe(info.exc_value) if info.exc_value is not None else info.exc_type)


def _deliver_again(exc_type, after=0.0):
    """Send this process, from a new thread, ``after`` seconds from now, the signal that raised ``exc_type``
    (SIGTERM for :class:`Terminated`).

    From a new thread, because a signal sent by this one is handled before
    :func:`os.kill` returns, inside the hook: lost again. The new thread
    needs the interpreter lock, which this one holds until it has left
    the hook (and a thread started by :mod:`threading` would be waited for).
    """
    import _thread
    import time
    signum = _signal_of(exc_type)

    def send():
        time.sleep(after)
        _DEFERRED["pending"].discard(signum)
        os.kill(os.getpid(), signum)
    _thread.start_new_thread(send, ())


def _signal_of(exc_type):
    """The signal that raises ``exc_type``: SIGTERM for :class:`Terminated`, SIGINT for a ``KeyboardInterrupt``."""
    import signal
    return signal.SIGTERM if issubclass(exc_type, Terminated) else signal.SIGINT


def install():
    """:func:`_attach`, and route Python warnings (``warnings.warn``) through the same path.

    Entry points call it (through :func:`guard`), and so do Spark's Python
    workers; merely importing gpumr changes no warning's display.
    """
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

    A framework that logs while it is stopped (Dask's scheduler, in the
    launcher's process, logs "Closed comm ... while trying to write" at
    CRITICAL with its traceback when a Ctrl-C ends the job) says nothing
    that the job's one line does not; with ``--debug`` the caller leaves its
    loggers as they are. A level above CRITICAL, as a level of CRITICAL lets
    CRITICAL records through; a child logger that the framework's own
    configuration gave a level and a handler (``distributed.client``,
    ``tornado.application``) would keep its records otherwise.

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

    The line is the command's result for a person or a script reading its
    stdout, so it is not a log message on stderr. It is information all the
    same: ``-q`` ("warnings and errors only") leaves it out, as it leaves out
    a job's summary. It is redacted as the log's lines are, because a summary
    names its output and that may be a URI with user-info in it.

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


def describe(exc):
    """The one line that says what went wrong in ``exc`` (without the ``gpumr: error:`` prefix).

    A user-facing error (:data:`USER_ERRORS`) as its message; an operating
    system error as ``FILE: reason``; anything else is a bug: its type and
    message, and the hint to rerun with ``--debug``.
    """
    if isinstance(exc, USER_ERRORS):
        return one_line(exc)
    if isinstance(exc, OSError):
        names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
        where = "".join(f"{n}: " for n in names[:1]) if len(names) < 2 else f"{names[0]} -> {names[1]}: "
        return one_line(f"{where}{exc.strerror or exc}")
    if isinstance(exc, MemoryError):
        return "out of memory"
    text = str(exc)
    return one_line(f"{type(exc).__name__}{': ' + text if text else ''}{BUG_HINT}")


def debug_wanted(argv=()):
    """Whether tracebacks are asked for: ``--debug`` in ``argv`` or :data:`DEBUG_ENV` set to 1."""
    return "--debug" in argv or os.environ.get(DEBUG_ENV) == "1"


def _exit_code(exc):
    """The exit status of a ``SystemExit`` by the one rule (argparse's 2 included: any failure is 1)."""
    code = exc.code
    if code is None or code == 0:
        return EXIT_OK
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        return code
    if not isinstance(code, int):
        logging.getLogger(ROOT).error("%s", one_line(code))
    return EXIT_ERROR


def _stdout_gone():
    """After a closed pipe on stdout: point it at /dev/null so the interpreter's last flush says nothing."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def guard(func, *args, debug=None, on_interrupt=None):
    """Run ``func(*args)`` inside the boundary; return the exit status (see the module's rule).

    Parameters
    ----------
    func : callable
        The entry point's work. Its return value is ignored unless it is an
        int (then it is the exit status, mapped by the rule).
    debug : bool, optional
        Show tracebacks (redacted) above the error line; default :func:`debug_wanted`.
    on_interrupt : callable, optional
        Called first on Ctrl-C (e.g. silence an engine's threads and loggers).

    Returns
    -------
    int
        0, 1 or 130.
    """
    install()
    _catch_signals()
    log = logging.getLogger(ROOT)
    if debug is None:
        debug = debug_wanted()
    sys.unraisablehook = _unraisable  # (a third party's clean-up failing at exit says no traceback either)
    try:
        status = func(*args)
    except KeyboardInterrupt as exc:
        return _interrupted(on_interrupt, isinstance(exc, Terminated))
    except SystemExit as exc:
        if exc.code not in (None, 0):
            discard_unfinished()
        return _exit_code(exc)
    except BrokenPipeError as exc:
        if exc.filename is None:  # stdout (or stderr) closed by its reader: done, nothing more to say
            _stdout_gone()
            return EXIT_OK
        return _fail(log, exc, debug)
    except BaseException as exc:  # noqa: BLE001 (the boundary: every failure is one line)
        stopped = _after_interrupt(exc)
        if stopped:  # a clean-up step failed on the way out of Ctrl-C: still "interrupted"
            return _interrupted(on_interrupt, isinstance(stopped, Terminated))
        return _fail(log, exc, debug)
    if isinstance(status, int) and not isinstance(status, bool):
        return status if status in (EXIT_OK, EXIT_INTERRUPTED, EXIT_TERMINATED) else EXIT_ERROR
    return EXIT_OK


def _after_interrupt(exc):
    """The ``KeyboardInterrupt`` being handled when ``exc`` was raised (in its context chain), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def _interrupted(on_interrupt, terminated=False):
    """Ctrl-C (or SIGTERM): clean up, say ``gpumr: interrupted`` (``terminated``), return 130 (143)."""
    with contextlib.suppress(Exception, KeyboardInterrupt):
        if on_interrupt is not None:
            on_interrupt()
    with contextlib.suppress(Exception, KeyboardInterrupt):
        discard_unfinished()
    with contextlib.suppress(Exception, KeyboardInterrupt):
        logging.getLogger(ROOT).critical("terminated" if terminated else "interrupted", extra={"plain": True})
    _handled_keyboard_interrupt()
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def _handled_keyboard_interrupt():
    """Tell CPython that the KeyboardInterrupt was handled, so that the exit status stays 130.

    CPython keeps a process-wide note that a ``KeyboardInterrupt`` went
    unhandled (set when one leaves code that CPython runs from source, e.g.
    ``eval``/``exec`` of a string) and, at exit, ends a process with that
    note by SIGINT: a parent then sees status -2, not 130. Measured here:
    ``python -m gpumr sample`` interrupted ended -2 in about 1 run of 3
    although gpumr had caught the interrupt. The note is cleared whenever
    code from source starts, so running a constant clears it.
    """
    with contextlib.suppress(Exception):
        exec("pass", {})  # noqa: S102 (a constant: see the docstring)


def _fail(log, exc, debug):
    with contextlib.suppress(Exception):
        discard_unfinished()
    if debug:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        write_stderr(redact(text))
    line = describe(exc)
    log.error("%s", line + hint(line))  # an error the troubleshooting page explains points to its entry
    return EXIT_ERROR


def end_without_collecting():
    """Have this process's end skip the interpreter's last garbage collections (for a program's entry point).

    Registered as an exit function, :func:`gc.freeze` runs after the ones
    registered later (clean-ups of the run) and before the interpreter
    tears its modules down, whose collections then pass over every object
    instead of searching it for cycles. Measured here, a ``gpumr run``'s
    end (mrjob and numpy loaded) went from 0.085 s of pure CPU to 0.02 s,
    ``gpumr ct assemble``'s from 0.038 to 0.014 s: time the user waits
    for. Nothing is lost: every clean-up of gpumr's is an exit function or
    explicit (files are closed, flushed and synced where written), and
    Python does not promise to finalize objects still alive when the
    interpreter exits.

    Examples
    --------
    >>> from gpumr.boundary import end_without_collecting
    >>> end_without_collecting()  # first thing in a program's entry point (gpumr.cli.main, boundary.main)
    """
    atexit.register(gc.freeze)


def main(func, *args, **kwargs):
    """``sys.exit(guard(func, *args, **kwargs))``: for ``if __name__ == "__main__"`` blocks.

    A ``--debug`` in ``sys.argv`` is taken out (the program's own parser
    need not know it) and turns tracebacks on here and, through
    :data:`DEBUG_ENV`, in the processes this one starts (a job's tasks).
    The process ends without its last collections (:func:`end_without_collecting`).
    """
    end_without_collecting()
    if "--debug" in sys.argv[1:]:
        sys.argv[1:] = [a for a in sys.argv[1:] if a != "--debug"]
        os.environ[DEBUG_ENV] = "1"
    sys.exit(guard(func, *args, **kwargs))


__all__ = ["guard", "main", "end_without_collecting", "describe", "one_line", "logger", "install", "set_verbosity",
           "quiet", "report", "silence", "debug_wanted", "UsageError", "ArgumentParser", "Terminated", "StderrHandler",
           "write_stderr", "DEBUG_ENV", "ROOT"]
