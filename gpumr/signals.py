"""Signals: Ctrl-C and SIGTERM raised where the program is, never inside an import, and quiet in forked workers."""

import os
import sys


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
    """Ctrl-C: ``KeyboardInterrupt``, as Python's own handler, but never inside an import."""
    _raise_outside_imports(KeyboardInterrupt, frame)


#: Seconds a Ctrl-C or SIGTERM that lands inside an import waits for the import to end before it is raised there.
IMPORT_GRACE = 10.0


_DEFERRED = {"since": None, "pending": set()}  # (when the first one was put off; the signals on their way)


def _raise_outside_imports(exc_type, frame, prepare=None):
    """Raise ``exc_type`` (Ctrl-C's or SIGTERM's) where the program is, unless it is inside an import: then the signal
    comes again 10 ms later, until the import has ended (at most :data:`IMPORT_GRACE` seconds)."""
    import time
    importing = False
    while frame is not None and not importing:
        importing = frame.f_code.co_filename.startswith("<frozen importlib._bootstrap")
        frame = frame.f_back
    now = time.monotonic()
    if importing and now - (_DEFERRED["since"] or now) < IMPORT_GRACE:
        if _DEFERRED["since"] is None:
            _DEFERRED["since"] = now
        if signal_of(exc_type) not in _DEFERRED["pending"]:  # (one on its way: a second Ctrl-C meanwhile joins it)
            _DEFERRED["pending"].add(signal_of(exc_type))
            deliver_again(exc_type, after=0.01)
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
    """From now on, Ctrl-C and SIGTERM call ``prepare()`` before they raise ``KeyboardInterrupt``
    (:class:`Terminated`).

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


def catch():
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


def deliver_again(exc_type, after=0.0):
    """Send this process, from a new thread, ``after`` seconds from now, the signal that raised ``exc_type`` (SIGTERM
    for :class:`Terminated`)."""
    import _thread
    import time
    signum = signal_of(exc_type)

    def send():
        time.sleep(after)
        _DEFERRED["pending"].discard(signum)
        os.kill(os.getpid(), signum)
    _thread.start_new_thread(send, ())


def signal_of(exc_type):
    """The signal that raises ``exc_type``: SIGTERM for :class:`Terminated`, SIGINT for a ``KeyboardInterrupt``."""
    import signal
    return signal.SIGTERM if issubclass(exc_type, Terminated) else signal.SIGINT


__all__ = ["Terminated", "catch", "interrupt_with", "deliver_again", "signal_of"]
