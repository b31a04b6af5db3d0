"""A job's RADICAL-Pilot session: one pilot, on this machine (``local.localhost``) or an HPC resource, and its end."""

import contextlib
import os
import shutil
import signal
import sys
import time

from ...errors import GpumrError, redact
from ...log import logger
from ...signals import Terminated
from ..processes import AFTER_SIGNAL, children_deaf, end_processes_in, main_thread, stderr_to

log = logger(__name__)
#: The resource RP's own configuration calls this machine.
LOCAL = "local.localhost"
#: Tries at starting a session: RP's communication proxy gives the worker process it starts for a session 10 s
#: to come up ("worker startup failed" after that), which a loaded machine can exceed (once in a test run beside
#: two busy loops, at a load average near 60); a later try starts.
SESSION_TRIES = 3


@contextlib.contextmanager
def pilot_session(options, start):
    """A TaskManager with one pilot (``options``: the engine's options), its session closed and the pilot ended after.

    Examples
    --------
    >>> import argparse, tempfile
    >>> from gpumr.engines.start import Start
    >>> options = argparse.Namespace(resource="local.localhost", pilot_cores=2, pilot_gpus=0, pilot_runtime=30,
    ...                        pilot_sandbox=None, pilot=[])
    >>> with tempfile.TemporaryDirectory() as folder:                                   # doctest: +SKIP
    ...     with pilot_session(options, Start.make(folder)) as tmgr:
    ...         launch(["faces", "frames.seq", "-o", "out", "--engine", "radical"], session=tmgr)
    """
    rp = import_rp()
    folder = os.path.join(start.logs if start.keep_logs else start.folder, "radical")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    sandbox = None
    if options.pilot_sandbox and options.resource == LOCAL:  # (elsewhere the folder is on the resource's filesystem)
        sandbox = _own_sandbox(options.pilot_sandbox)
    env = {"PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
           "RADICAL_REPORT": "FALSE", "RADICAL_BASE": folder, "HOME": folder, "TMPDIR": folder,
           "RADICAL_LOG_LVL": "DEBUG" if start.debug else "ERROR",
           "VIRTUAL_ENV": sys.prefix if sys.prefix != sys.base_prefix else None}
    import radical.utils.ids as ids
    ids._BASE = os.path.join(folder, ".radical", "utils")  # (read once, when imported: IDs' counters go there)
    session, forked = None, []  # (forked: the proxy's workers, one per try, that RP's proxy thread starts)
    try:
        for attempt in range(1, SESSION_TRIES + 1):
            # (a Ctrl-C held while the session starts is raised as its block ends: the session is closed then too;
            # a failed try's proxy worker prints its traceback, to the log)
            try:
                with open(os.path.join(folder, "session.err"), "ab") as said, \
                        start.inherited(secrets=False, extra=env), children_deaf(), \
                        stderr_to(None if start.debug else said), children_started(forked):
                    session = rp.Session(cfg={"base": folder, "client_sandbox": folder})
                break
            except Exception as exc:  # noqa: BLE001 (RP's RuntimeError, a ZMQ or OS error: retried, then one line)
                session_failed(exc, attempt)
        with start.inherited(secrets=False, extra=env), children_deaf():
            pmgr, tmgr = rp.PilotManager(session), rp.TaskManager(session)
            try:
                pilot = pmgr.submit_pilots(rp.PilotDescription(pilot_description(options, sandbox or start.folder)))
            except (ValueError, RuntimeError, KeyError) as exc:
                raise GpumrError(f"--resource {options.resource}: RADICAL-Pilot refused the pilot: {exc}") from None
        tmgr.add_pilots(pilot)
        yield tmgr
    finally:
        terminated = isinstance(sys.exc_info()[1], Terminated)
        with children_deaf():
            if session is not None:
                # After SIGTERM to the process group RP's pilot launcher has gone, and RP would wait 11 s for it to
                # kill the pilot; on this machine the pilot's processes are in the job's folder: ended below.
                session.close(terminate=not (terminated and options.resource == LOCAL), download=False)
            # (after SIGTERM, 1 s: what is left is the agent's bootstrap, whose trap sleeps for an agent gone)
            for place in (folder, sandbox):
                if place is not None:
                    end_processes_in(place, timeout=1 if terminated else 30, ask=terminated)
            end_children(forked)  # (a failed try's worker that missed RP's SIGTERM: stopped by nothing else)
            if sandbox is not None and not start.keep_logs:
                shutil.rmtree(sandbox, ignore_errors=True)


def _own_sandbox(parent):
    """A new private folder of the job's inside ``--pilot-sandbox`` (the pilot's files go there, removed with the
    job): what else the folder holds is never touched."""
    import tempfile

    from ...trusted import ensure_folder
    parent = os.path.abspath(parent)
    ensure_folder(parent, "--pilot-sandbox")
    return tempfile.mkdtemp(prefix="gpumr-pilot-", dir=parent)


def session_failed(exc, attempt):
    """A try at starting RP's session failed (``exc``, try ``attempt``): a warning, or after the last
    (:data:`SESSION_TRIES`) a :class:`GpumrError`, one line, RP's own reason first."""
    why = first_words(exc)
    if attempt >= SESSION_TRIES:
        raise GpumrError(f"RADICAL-Pilot's session did not start ({SESSION_TRIES} tries; the last: {why}): on a "
                         "machine this busy, try again later (--debug keeps RP's log)") from None
    log.warning("RADICAL-Pilot's session did not start (%s): trying again (%d of %d)", why, attempt + 1,
                SESSION_TRIES)


def first_words(exc):
    """RP's reason in ``exc``, without the server's traceback its client appends (at most 200 characters).

    Examples
    --------
    >>> first_words(RuntimeError("ERROR: command failed: worker startup failed; Traceback (most recent call last):"
    ...                          "; File proxy.py, line 220"))
    'worker startup failed'
    """
    text = " ".join(str(exc).split("Traceback (most recent call last)")[0].split()).strip(" ;:")
    text = text[len("ERROR: command failed:"):].strip() if text.startswith("ERROR: command failed:") else text
    return redact(text[:200]) or type(exc).__name__


def pilot_description(options, folder):
    """The pilot's description (``options``: the engine's options; ``folder``: its sandbox on this machine).

    Examples
    --------
    >>> import argparse
    >>> options = argparse.Namespace(resource="local.localhost", pilot_cores=2, pilot_gpus=0, pilot_runtime=30,
    ...                        pilot_sandbox=None, pilot=["memory=100"])
    >>> d = pilot_description(options, "/tmp/job")
    >>> d["exit_on_error"], d["sandbox"], d["memory"]
    (False, '/tmp/job', 100)
    """
    sandbox = folder if options.resource == LOCAL else options.pilot_sandbox
    cores = options.pilot_cores or (os.cpu_count() if options.resource == LOCAL else 1)
    return {"resource": options.resource, "cores": cores,
            "gpus": options.pilot_gpus, "runtime": options.pilot_runtime, "exit_on_error": False,
            **({"sandbox": sandbox} if sandbox else {}),
            **{k: int(v) if k in ("nodes", "memory") else v for k, v in (p.split("=", 1) for p in options.pilot)}}


def import_rp():
    """``radical.pilot``, imported with its agent's executor module, whose import takes SIGINT and SIGTERM for
    itself (to end its tasks): the launcher's own handlers are put back, so that Ctrl-C still stops the job."""
    saved = [(s, signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)] if main_thread() else []
    try:
        import tempfile
        with tempfile.TemporaryDirectory() as base, _environ({"RADICAL_BASE": base}):  # (its import makes a folder)
            import radical.pilot as rp
            import radical.pilot.agent.executing.popen  # noqa: F401 (imported before RP's threads would)
    except ImportError:
        raise GpumrError("--engine radical needs RADICAL-Pilot: pip install 'gpumr[radical]'") from None
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
    return rp


def pilot_failure(pilot, resource):
    """One line: why the pilot ended before its tasks did (the last line its agent's bootstrap wrote)."""
    texts = [[ln.strip() for ln in (t or "").splitlines() if ln.strip()] for t in (pilot.stderr, pilot.log, pilot.stdout)]
    said = next((f": {lines[-1][:300]}" for lines in texts if lines), "")  # (the first of them that said anything)
    return (f"the RADICAL-Pilot pilot on {resource} ended ({pilot.state.lower()}) before the job's tasks{said} "
            "(its agent could not start or was stopped; --debug keeps RP's log)")


@contextlib.contextmanager
def _environ(changes):
    """``os.environ`` updated by ``changes`` for the block (a value None: the variable unset), then as it was.

    Examples
    --------
    >>> with _environ({"AN_EXAMPLE_VARIABLE": "1"}):
    ...     os.environ["AN_EXAMPLE_VARIABLE"]
    '1'
    >>> "AN_EXAMPLE_VARIABLE" in os.environ
    False
    """
    saved = {k: os.environ.get(k) for k in changes}
    for k, v in changes.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def children_started(into):
    """Add to the list ``into`` the multiprocessing children this process starts in the block (a framework's helpers
    forked from one of its threads), for :func:`end_children`.

    Examples
    --------
    >>> import multiprocessing, time
    >>> started = []
    >>> with children_started(started):
    ...     child = multiprocessing.Process(target=time.sleep, args=(60,))
    ...     child.start()
    >>> started == [child]
    True
    >>> end_children(started, timeout=1)
    >>> child.is_alive()
    False
    """
    import multiprocessing
    before = set(multiprocessing.active_children())
    try:
        yield into
    finally:
        into.extend(p for p in multiprocessing.active_children() if p not in before)


def end_children(children, timeout=AFTER_SIGNAL):
    """End the multiprocessing ``children`` still alive: SIGTERM, SIGKILL after ``timeout`` seconds; each reaped."""
    alive = [p for p in children if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + timeout
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout)
