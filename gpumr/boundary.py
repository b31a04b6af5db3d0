"""The error boundary: how every gpumr entry point ends.

Any exception ends in one redacted line, ``gpumr: error: ...``, and exit status 1 (a bug's line asks for
``--debug``); Ctrl-C in ``gpumr: interrupted`` and 130, SIGTERM in 143, what was being written removed first; success
and a closed stdout pipe in 0."""

import argparse
import atexit
import contextlib
import gc
import logging
import os
import re
import sys
import traceback

from seqfile import SequenceFileError
from seqfile.atomic import discard_unfinished
from seqfile.codecs import CodecError

from . import log as _log
from .errors import (
    BUG_HINT,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    GpumrError,
    did_you_mean,
    hint,
    redact,
)
from .log import ROOT, one_line, write_stderr
from .signals import Terminated, catch, deliver_again

#: Set to 1 to show tracebacks (as ``--debug``), e.g. in tasks a job starts.
DEBUG_ENV = "GPUMR_DEBUG"




#: Error classes whose message is written for the user as it is.
USER_ERRORS = (GpumrError, SequenceFileError, CodecError)


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
    """Say each option's default in its help, where the help does not already (``--slab N: ... (default 16)``), on
    ``parser`` and every subcommand under it; the docs' reference reads the same help.

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


def _unraisable(info):
    """``sys.unraisablehook``: an error Python cannot raise (a library's ``__del__`` at exit) is a debug line."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        deliver_again(info.exc_type)
        return
    if debug_wanted():
        sys.__unraisablehook__(info)
        return
    logging.getLogger(ROOT).debug("ignored in %s: %s", getattr(info.object, "__qualname__", info.object),
                                  describe(info.exc_value) if info.exc_value is not None else info.exc_type)


def describe(exc):
    """The one line that says what went wrong in ``exc`` (without the ``gpumr: error:`` prefix)."""
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


def install():
    """The ``gpumr`` logger's handler, and Python warnings routed through it (:func:`gpumr.log.install`)."""
    _log.install()


def guard(func, *args, debug=None, on_interrupt=None):
    """Run ``func(*args)`` inside the boundary; return the exit status (see the module's rule).

    Parameters
    ----------
    func : callable
        The entry point's work. Its return value is ignored unless it is an int (then it is the exit status, mapped by
        the rule).
    debug : bool, optional
        Show tracebacks (redacted) above the error line; default :func:`debug_wanted`.
    on_interrupt : callable, optional
        Called first on Ctrl-C (e.g. silence an engine's threads and loggers).

    Returns
    -------
    int
        0, 1 or 130."""
    install()
    catch()
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
    """Tell CPython that the KeyboardInterrupt was handled, so that the exit status stays 130."""
    with contextlib.suppress(Exception):
        exec("pass", {})


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

    Examples
    --------
    >>> from gpumr.boundary import end_without_collecting
    >>> end_without_collecting()  # first thing in a program's entry point (gpumr.cli.main, boundary.main)
    """
    atexit.register(gc.freeze)


def main(func, *args, **kwargs):
    """``sys.exit(guard(func, *args, **kwargs))``: for ``if __name__ == "__main__"`` blocks."""
    end_without_collecting()
    if "--debug" in sys.argv[1:]:
        sys.argv[1:] = [a for a in sys.argv[1:] if a != "--debug"]
        os.environ[DEBUG_ENV] = "1"
    sys.exit(guard(func, *args, **kwargs))


__all__ = ["guard", "main", "end_without_collecting", "describe", "install", "debug_wanted", "UsageError",
           "ArgumentParser", "show_defaults", "DEBUG_ENV", "BUG_HINT"]
