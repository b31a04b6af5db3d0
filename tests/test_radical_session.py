"""Starting a RADICAL-Pilot session when RP's own start-up runs late (a real session and pilot on ``local.localhost``).

RP's communication proxy gives the worker process it starts for each new
session 10 s to come up, and fails the session after that ("worker startup
failed"). Beside two busy loops (a load average near 60) that happened to a
job of the test suite: it failed, and RP's worker printed its traceback to
the job's terminal. Here the worker really is late: it is stopped (SIGSTOP)
for 12 s as it starts.
"""

import argparse
import os
import signal
import threading
import time

import pytest

if os.environ.get("CI") == "true":
    import radical.pilot  # noqa: F401 (CI runs this engine: a missing package fails here)
else:
    pytest.importorskip("radical.pilot", reason="the RADICAL-Pilot engine needs radical.pilot (the dev extra)")

# (a session, a pilot and the 12 s stop; beside busy loops RP's processes run many times slower)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def forked_children():
    """This process's child processes that run what it runs (forked, not started with a command of their own)."""
    me = str(os.getpid())
    with open("/proc/self/cmdline", "rb") as f:
        mine = f.read()
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                state_and_after = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, IndexError):
            continue
        if state_and_after[1] == me and command == mine:  # (the fields after the command: state, parent's pid, ...)
            found.add(int(pid))
    return found


def test_a_session_whose_proxy_worker_is_late_starts_on_the_next_try(tmp_path, capfd):
    from gpumr.engines.radical.pilot import SESSION_TRIES, pilot_session
    from gpumr.engines.start import Start
    from gpumr.errors import GpumrError
    before, stopped, done = forked_children(), [], threading.Event()

    def stop_the_first_new_child():  # (the proxy's worker: the first process a session's start forks)
        while not done.is_set() and not stopped:
            for pid in forked_children() - before:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
                break
            time.sleep(0.002)
        if stopped and not done.wait(12):  # (past RP's 10 s; it has sent the worker SIGTERM meanwhile)
            try:
                os.kill(stopped[0], signal.SIGCONT)
            except ProcessLookupError:
                pass
    watcher = threading.Thread(target=stop_the_first_new_child)
    watcher.start()
    # (a resource RP does not know: once the session has started, the pilot is refused at once, and no pilot
    # has to start and end: that took 35-45 s more)
    o = argparse.Namespace(resource="nowhere.none", pilot_cores=1, pilot_gpus=0, pilot_runtime=10,
                           pilot_sandbox=None, pilot=[])
    try:
        with pytest.raises(GpumrError, match="--resource nowhere.none: RADICAL-Pilot refused the pilot"):
            with pilot_session(o, Start.make(str(tmp_path))):
                pass
        # (still stopped, so deaf to SIGTERM: a worker that missed RP's SIGTERM would wait for ever)
        assert not os.path.exists(f"/proc/{stopped[0]}"), "the failed try's worker outlived the session"
    finally:
        done.set()
        watcher.join()
        if stopped:
            try:
                os.kill(stopped[0], signal.SIGCONT)
            except ProcessLookupError:
                pass
    err = capfd.readouterr().err
    assert stopped
    assert f"RADICAL-Pilot's session did not start (worker startup failed): trying again (2 of {SESSION_TRIES})" in err
    assert "Traceback" not in err and "Error" not in err.replace("gpumr", ""), err[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["logs", "radical"]  # (the caller's folder: the job's own goes with the job)


def test_the_reason_rp_gives_is_one_line():
    from gpumr.engines.radical.pilot import SESSION_TRIES, session_failed
    from gpumr.errors import GpumrError
    exc = RuntimeError("ERROR: command failed: worker startup failed; Traceback (most recent call last):; File "
                       "\"proxy.py\", line 220, in _register; cfg = q.get(timeout=10); _queue.Empty")
    with pytest.raises(GpumrError) as info:
        session_failed(exc, SESSION_TRIES)
    assert str(info.value).startswith(f"RADICAL-Pilot's session did not start ({SESSION_TRIES} tries; the last: "
                                      "worker startup failed):")
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)
