"""A job's RADICAL-Pilot session: one pilot, on this machine (``local.localhost``) or an HPC resource, and its end.

The session's client processes and the pilot's agent run this Python's
environment, keep every file they make in the job's folder, and never hear
a terminal's Ctrl-C: the launcher ends them (:func:`pilot_session`). The
engine that submits tasks to it is :mod:`gpumr.engines.radical`.
"""

import contextlib
import os
import re
import signal
import sys

from ..boundary import Terminated, logger
from ..errors import GpumrError, redact
from .processes import children_deaf, children_started, end_children, end_processes_in, environ, main_thread, \
    stderr_to

log = logger(__name__)
#: The resource RP's own configuration calls this machine.
LOCAL = "local.localhost"
#: Tries at starting a session: RP's communication proxy gives the worker process it starts for a session 10 s
#: to come up ("worker startup failed" after that), which a loaded machine can exceed (once in a test run beside
#: two busy loops, at a load average near 60); a later try starts.
SESSION_TRIES = 3


@contextlib.contextmanager
def pilot_session(o, folder, debug=False):
    """A TaskManager with one pilot (``o``: the engine's options), its session closed and the pilot ended after.

    Its client processes and the pilot's agent run this Python's
    environment (RP's ``VIRTENV_MODE local`` takes the agent's from
    ``VIRTUAL_ENV``), keep their files in ``folder`` (``HOME`` and
    ``RADICAL_BASE`` and ``TMPDIR`` too, for RP's and PSI/J's state) and never hear a
    terminal's Ctrl-C: the launcher ends them. A job makes one in its own
    folder; scripts and tests running several jobs share one (``session=``
    of :func:`gpumr.launch.job.launch`).

    Examples
    --------
    >>> import argparse, tempfile
    >>> o = argparse.Namespace(resource="local.localhost", pilot_cores=2, pilot_gpus=0, pilot_runtime=30,
    ...                        pilot_sandbox=None, pilot=[])
    >>> with tempfile.TemporaryDirectory() as folder:                                   # doctest: +SKIP
    ...     with pilot_session(o, folder) as tmgr:
    ...         launch(["faces", "frames.seq", "-o", "out", "--engine", "radical"], session=tmgr)
    """
    rp = import_rp()
    folder = os.path.join(folder, "radical")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    env = {"PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
           "RADICAL_REPORT": "FALSE", "RADICAL_BASE": folder, "HOME": folder, "TMPDIR": folder,
           "RADICAL_LOG_LVL": "DEBUG" if debug else "ERROR"}
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    # RP's agent sources a dump of this environment: a name a shell cannot take (make's "-*-command-variables-*-"
    # under `make VAR=...`) fails the pilot; such variables are left out of what the session inherits.
    env.update({k: None for k in os.environ if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)})
    import radical.utils.ids as ids
    ids._BASE = os.path.join(folder, ".radical", "utils")  # (read once, when imported: IDs' counters go there)
    session, forked = None, []  # (forked: the proxy's workers, one per try, that RP's proxy thread starts)
    try:
        for attempt in range(1, SESSION_TRIES + 1):
            # (a Ctrl-C held while the session starts is raised as its block ends: the session is closed then too;
            # a failed try's proxy worker prints its traceback, to the log)
            try:
                with open(os.path.join(folder, "session.err"), "ab") as said, environ(env), children_deaf(), \
                        stderr_to(None if debug else said), children_started(forked):
                    session = rp.Session(cfg={"base": folder, "client_sandbox": folder})
                break
            except Exception as exc:  # noqa: BLE001 (RP's RuntimeError, a ZMQ or OS error: retried, then one line)
                session_failed(exc, attempt)
        with environ(env), children_deaf():
            pmgr, tmgr = rp.PilotManager(session), rp.TaskManager(session)
        try:
            pilot = pmgr.submit_pilots(rp.PilotDescription(pilot_description(o, folder)))
        except (ValueError, RuntimeError, KeyError) as exc:
            raise GpumrError(f"--resource {o.resource}: RADICAL-Pilot refused the pilot: {exc}") from None
        tmgr.add_pilots(pilot)
        yield tmgr
    finally:
        terminated = isinstance(sys.exc_info()[1], Terminated)
        with children_deaf():
            if session is not None:
                # After SIGTERM to the process group RP's pilot launcher has gone, and RP would wait 11 s for it to
                # kill the pilot; on this machine the pilot's processes are in the job's folder: ended below.
                session.close(terminate=not (terminated and o.resource == LOCAL), download=False)
            # (after SIGTERM, 1 s: what is left is the agent's bootstrap, whose trap sleeps for an agent gone)
            end_processes_in(folder, timeout=1 if terminated else 30, ask=terminated)
            end_children(forked)  # (a failed try's worker that missed RP's SIGTERM: stopped by nothing else)


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


def pilot_description(o, folder):
    """The pilot's description (``o``: the engine's options; ``folder``: the job's, its sandbox on this machine).

    ``exit_on_error`` is off: with it, RP sends this process SIGTERM when
    the pilot fails, also while the session closes (on a loaded machine
    its reaper marks an ending pilot failed), which killed the test run
    that hosted it. The job's own loop reports a failed pilot in one line.

    Examples
    --------
    >>> import argparse
    >>> o = argparse.Namespace(resource="local.localhost", pilot_cores=2, pilot_gpus=0, pilot_runtime=30,
    ...                        pilot_sandbox=None, pilot=["memory=100"])
    >>> d = pilot_description(o, "/tmp/job")
    >>> d["exit_on_error"], d["sandbox"], d["memory"]
    (False, '/tmp/job', 100)
    """
    sandbox = o.pilot_sandbox or (folder if o.resource == LOCAL else None)
    return {"resource": o.resource, "cores": o.pilot_cores or (os.cpu_count() if o.resource == LOCAL else 1),
            "gpus": o.pilot_gpus, "runtime": o.pilot_runtime, "exit_on_error": False,
            **({"sandbox": sandbox} if sandbox else {}),
            **{k: int(v) if k in ("nodes", "memory") else v for k, v in (p.split("=", 1) for p in o.pilot)}}


def import_rp():
    """``radical.pilot``, imported with its agent's executor module, whose import takes SIGINT and SIGTERM for
    itself (to end its tasks): the launcher's own handlers are put back, so that Ctrl-C still stops the job."""
    saved = [(s, signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)] if main_thread() else []
    try:
        import tempfile
        with tempfile.TemporaryDirectory() as base, environ({"RADICAL_BASE": base}):  # (its import makes a folder)
            import radical.pilot as rp
            import radical.pilot.agent.executing.popen  # noqa: F401
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
