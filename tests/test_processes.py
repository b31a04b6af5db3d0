"""``gpumr.engines.processes``: what engines do around the processes they start.

``children_deaf`` is checked in a process of its own (its signal state is
not pytest's), in a session of its own, so a Ctrl-C sent to its process
group reaches it and its children as a terminal's would.
"""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# A thread from before the block that does not block SIGINT (as gpumr's progress thread); children started in the
# block from this thread and from a thread started in the block (as distributed's loop thread spawns its workers);
# then a terminal's Ctrl-C to the whole group.
SCRIPT = textwrap.dedent("""
    import multiprocessing, os, signal, subprocess, sys, threading, time
    from gpumr.engines.processes import children_deaf

    def idle():
        time.sleep(60)

    if __name__ == "__main__":
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        children = []
        try:
            with children_deaf():
                children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
                spawned = multiprocessing.get_context("spawn").Process(target=idle, daemon=True)
                starter = threading.Thread(target=spawned.start)
                starter.start()
                starter.join()
                time.sleep(2)  # (the children have started Python)
                os.killpg(0, signal.SIGINT)
                time.sleep(1)
            print("went on")
        except KeyboardInterrupt:
            print("interrupted at the block's end")
        time.sleep(1)
        print("children alive:", children[0].poll() is None and spawned.is_alive())
        children[0].kill()
        spawned.kill()
""")


def test_a_ctrl_c_in_a_children_deaf_block_is_raised_at_its_end_and_the_children_never_hear_it(tmp_path):
    """Before the fix SIGINT was ignored for the block: the kernel handed the group's SIGINT to the other thread,
    which dropped it, and the program went on as if never interrupted."""
    script = tmp_path / "deaf.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    assert done.stdout.splitlines() == ["interrupted at the block's end", "children alive: True"], \
        done.stdout + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_end_processes_in_ends_what_names_or_works_in_the_folder_and_nothing_else(tmp_path):
    """RP's agent components name no folder in their titles; one working in the job's folder lived on after a SIGTERM
    to the process group (its manager gone), until this looked at where processes work too."""
    from gpumr.engines.processes import end_processes_in
    job, other = tmp_path / "job", tmp_path / "jobs"  # (a folder whose name starts with the job's is not the job's)
    job.mkdir()
    other.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    named = subprocess.Popen([*sleep, str(job / "x")])
    argument = subprocess.Popen([*sleep, str(job)])  # (the folder itself, as an argument's end)
    working = subprocess.Popen(sleep, cwd=job)
    elsewhere = subprocess.Popen(sleep, cwd=other)
    named_other = subprocess.Popen([*sleep, str(other)])
    try:
        end_processes_in(str(job), timeout=1)
        assert named.wait(10) == -9 and argument.wait(10) == -9 and working.wait(10) == -9
        assert elsewhere.poll() is None and named_other.poll() is None
    finally:
        for proc in (named, argument, working, elsewhere, named_other):
            proc.kill()
            proc.wait()


def test_what_a_job_process_started_is_ended_too_even_once_orphaned(tmp_path):
    """PyFlink's gateway JVM names the job's folder; the Python worker it starts names nothing and works elsewhere.
    Under CI's load one outlived the launcher (the JVM killed) by more than 30 s. Here the child ignores SIGTERM,
    its parent does not: once the parent has gone, the orphan must still be found, and killed."""
    from gpumr.engines.processes import end_processes_in
    job = tmp_path / "job"
    job.mkdir()
    child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"p = subprocess.Popen([sys.executable, '-c', {child!r}], cwd='/'); "
                               "print(p.pid, flush=True); time.sleep(120)", str(job / "x")],
                              stdout=subprocess.PIPE, text=True)
    orphan = int(parent.stdout.readline())
    try:
        time.sleep(0.5)  # (the child has set its handler)
        end_processes_in(str(job), timeout=2, ask=True)
        assert parent.wait(10) == -signal.SIGTERM  # asked, it went; its child ignored the same ask:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(orphan):
            time.sleep(0.1)
        assert not _alive(orphan)
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


def _alive(pid):
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_on_threads_runs_every_call_once_at_most_n_at_a_time(tmp_path):
    import threading

    from gpumr.engines.mrjob.runner import on_threads
    lock, now, most, done = threading.Lock(), [0], [0], []

    def call(i):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
            done.append(i)
    on_threads([lambda i=i: call(i) for i in range(9)], 3, str(tmp_path))
    assert sorted(done) == list(range(9)) and most[0] == 3


def test_a_failed_call_starts_no_more_and_ends_the_processes_in_the_folder(tmp_path):
    """mrjob's local runner: a task that failed terminated the Pool's workers, and the other tasks' processes
    (the workers' children) ran on to their end, orphaned."""
    from gpumr.engines.mrjob.runner import on_threads
    started = []

    def waits():
        started.append("waits")
        subprocess.run([sys.executable, "-c", "import time; time.sleep(120)"], cwd=tmp_path)

    def fails():
        started.append("fails")
        _wait_for_sleepers(tmp_path, 1)  # (the other call's process has started)
        raise ValueError("a task failed")
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="a task failed"):
        on_threads([waits, fails, lambda: started.append("later")], 2, str(tmp_path))
    assert time.monotonic() - t0 < 30 and sorted(started) == ["fails", "waits"]
    assert _sleepers_in(tmp_path) == []


def test_an_interrupt_while_calls_run_ends_the_processes_in_the_folder(tmp_path):
    """A signal's exception (here SIGUSR1's, as Ctrl-C's KeyboardInterrupt) raised while the calls run: it is
    raised at once, with the calls' processes ended."""
    import threading

    from gpumr.engines.mrjob.runner import on_threads

    class Stopped(Exception):
        pass

    def stopped(signum, frame):
        raise Stopped()
    saved = signal.signal(signal.SIGUSR1, stopped)
    sent = []
    signaller = threading.Thread(target=lambda: (_wait_for_sleepers(tmp_path, 2), sent.append(time.monotonic()),
                                                 os.kill(os.getpid(), signal.SIGUSR1)))
    try:
        signaller.start()  # (the signal once both calls' processes run)
        with pytest.raises(Stopped):
            on_threads([lambda: subprocess.run([sys.executable, "-c", "import time; time.sleep(120)"],
                                               cwd=tmp_path)] * 2, 2, str(tmp_path))
        assert time.monotonic() - sent[0] < 30 and _sleepers_in(tmp_path) == []
    finally:
        signaller.join()
        signal.signal(signal.SIGUSR1, saved)


def _wait_for_sleepers(folder, n, timeout=120):
    """Until ``n`` processes sleep in ``folder`` (:func:`_sleepers_in`), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(_sleepers_in(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def _sleepers_in(folder):
    """The live processes sleeping (``time.sleep(120)``) in ``folder``: a test's children that should have gone."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"time.sleep(120)" in f.read() and os.readlink(f"/proc/{name}/cwd") == str(folder):
                    if _alive(int(name)):
                        found.append(int(name))
    return found


def test_a_child_forked_in_stderr_to_writes_to_the_file_after_the_block_too(tmp_path, capfd):
    """RP's proxy forks a worker per session from a thread of the launcher. One stopped late (past RP's 10 s)
    printed its traceback when it ended, after the block: through the ``sys.stderr`` it was forked with, which
    under pytest's capture (as in a notebook) does not write to file descriptor 2, and reached the user's stderr."""
    import multiprocessing

    from gpumr.engines.processes import stderr_to
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()

    def late():
        go.wait(60)
        sys.stderr.write("a late traceback\n")
        sys.stderr.flush()
    with open(tmp_path / "log", "wb") as log:
        with stderr_to(log):
            child = ctx.Process(target=late)
            child.start()
    go.set()
    child.join(60)
    assert child.exitcode == 0 and "a late traceback" not in capfd.readouterr().err
    assert (tmp_path / "log").read_text() == "a late traceback\n"


PRIVATE = textwrap.dedent("""
    import multiprocessing, os, sys
    from gpumr.engines.dask.cluster import end_fork_server, fork_server
    from gpumr.trusted import private_temp_dir

    def make(q):
        q.put(private_temp_dir("gpumr-private-"))

    if __name__ == "__main__":
        mine = private_temp_dir("gpumr-private-")
        fork_server(["gpumr.trusted"])  # (as the Dask engine's: its workers are forked from it)
        for method in ("forkserver", "fork", "spawn"):
            ctx = multiprocessing.get_context(method)
            q = ctx.Queue()
            child = ctx.Process(target=make, args=(q,))
            child.start()
            made = q.get(timeout=60)
            child.join(60)
            print(method, child.exitcode, os.path.isdir(made), os.path.isdir(mine))
        end_fork_server()
""")


def test_a_private_temp_dir_goes_with_the_process_that_made_it_however_multiprocessing_started_it(tmp_path):
    """A Dask worker forked from the fork server ends by ``os._exit``, which runs no atexit function: the private
    folder it made (a refused kernel cache's stand-in) stayed in TMPDIR; one its parent made must stay meanwhile."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "script.py").write_text(PRIVATE)
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert proc.returncode == 0, proc.stderr
    # each child's folder is gone once it ended; the parent's stays until the parent ends, and then goes
    assert proc.stdout.split("\n")[:3] == [f"{m} 0 False True" for m in ("forkserver", "fork", "spawn")], proc.stdout
    assert os.listdir(tmp_path / "tmp") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as other uids: needs root")
def test_a_node_is_shared_when_a_persons_account_runs_a_process_not_a_daemons():
    """SLURM's daemons run as ``slurm`` (Debian: uid 64030, above login.defs' UID_MAX): not a person who could reach
    the job's ports; a process of uid 1234 (in UID_MIN..UID_MAX) is."""
    from gpumr.engines.start import other_users, people
    daemon_uid, person_uid = people().stop + 3000, people().start + 234
    procs = [subprocess.Popen(["sleep", "60"], user=uid, group=uid) for uid in (daemon_uid, person_uid)]
    try:
        found = other_users()
        assert person_uid in found and daemon_uid not in found, found
    finally:
        for p in procs:
            p.kill()
            p.wait()
