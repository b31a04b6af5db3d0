"""What engines do around the processes and threads they start, whatever the framework."""

import contextlib
import os
import signal
import sys
import threading
import time

#: Seconds between looks at processes that should have gone.
POLL = 0.2
#: Seconds a stopped job's processes get to end by themselves (they heard the signal too) before they are killed:
#: a batch system's SIGKILL follows SIGTERM soon (SLURM's KillWait: 30 s by default).
AFTER_SIGNAL = 5


def main_thread():
    """Whether this is the main thread (the only one that may set signal handlers)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def children_deaf():
    """SIGINT blocked for the block: processes and threads started meanwhile never hear Ctrl-C; this one does, after.

    Examples
    --------
    >>> import subprocess, sys
    >>> with children_deaf():
    ...     child = subprocess.Popen([sys.executable, "-c", "pass"])
    >>> child.wait()
    0
    """
    if not main_thread():
        yield
        return
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    heard = []
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if heard and signal.SIGINT not in signal.sigpending():
            signal.raise_signal(signal.SIGINT)  # (held by the mask until the next line)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def workers_here(options, workload):
    """How many task processes an engine starts on this machine for ``workload`` (its own workers, where the user
    named no number): as many as the cores hold its tasks, and at least one per GPU slot its records may use.

    Examples
    --------
    >>> import argparse, os
    >>> from gpumr.ct.workload import Backproject
    >>> from gpumr.faces.workload import Faces
    >>> cpu = argparse.Namespace(device="cpu", cpu_threads=None)
    >>> workers_here(cpu, Faces()) == (os.cpu_count() or 1), workers_here(cpu, Backproject())
    (True, 1)
    """
    n = max(1, (os.cpu_count() or 1) // workload.task_threads(options))
    if getattr(options, "device", "cpu") != "cpu" and workload.has_gpu():
        from ..devices.nvml import discover
        n = max(n, len(discover().gpus) * (getattr(options, "gpu_slots", None) or 1))
    return n


@contextlib.contextmanager
def stderr_to(f):
    """Give the processes started in the block (a framework's JVM, RP's session) ``f`` as their stderr (None: this
    process's); what this process writes to its stderr meanwhile goes there too.

    Examples
    --------
    >>> import subprocess, tempfile
    >>> with tempfile.TemporaryFile() as log:
    ...     with stderr_to(log):
    ...         _ = subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('to the log')"])
    ...         print(", and this", file=sys.stderr, end="")
    ...     _ = log.seek(0)
    ...     log.read()
    b'to the log, and this'
    """
    if f is None:
        yield
        return
    stream = sys.stderr
    if stream is not None:
        stream.flush()
    saved = os.dup(2)
    os.dup2(f.fileno(), 2)
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)  # (fd 2: f, in a child too)
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = stream
        os.dup2(saved, 2)
        os.close(saved)


def end_processes_in(folder, timeout=30, ask=False):
    """Wait until no process of the job's is left (one naming ``folder`` in its command line or working in it, or
    started by such a one); then kill those left.

    Parameters
    ----------
    timeout : float
        Seconds they get to end by themselves; then SIGKILL.
    ask : bool
        SIGTERM them first, at once (a stopped job's helpers: some ignore Ctrl-C, as PyFlink starts its gateway JVM)."""
    deadline, mark = time.monotonic() + timeout, os.path.join(folder, "")
    marks = (mark.encode(), folder.rstrip("/").encode() + b"\0")  # (a path in it, or the folder as an argument's end)
    job = {}  # pid -> its start time (so that a pid used again by another process is not taken for the job's)
    while True:
        table = _processes()
        children = {}
        for pid, (parent, started, argv, cwd) in table.items():
            children.setdefault(parent, []).append(pid)
            if pid != os.getpid() and (any(m in argv for m in marks) or os.path.join(cwd, "").startswith(mark)):
                job.setdefault(pid, started)
        found = [pid for pid in job if pid in table and table[pid][1] == job[pid]]
        while found:  # (what the job's processes started is the job's)
            pid = found.pop()
            for child in children.get(pid, ()):
                if child not in job and child != os.getpid():
                    job[child] = table[child][1]
                    found.append(child)
        pids = [pid for pid, started in job.items() if pid in table and table[pid][1] == started]
        if not pids:
            return
        if ask:  # (once: SIGTERM, for those that ignore Ctrl-C, as PyFlink starts its gateway JVM)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            ask = False
        if time.monotonic() > deadline:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            return
        time.sleep(POLL)


def _processes():
    """``{pid: (parent pid, start time, command line, working folder)}`` of the live processes here that can be
    read (zombies aside: they have ended; a folder that cannot be read is "")."""
    table = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            if fields[0] == b"Z":
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read()
            try:
                cwd = os.readlink(f"/proc/{name}/cwd")
            except OSError:
                cwd = ""
            table[int(name)] = (int(fields[1]), int(fields[19]), argv, cwd)  # (stat's fields 4 and 22)
    return table
