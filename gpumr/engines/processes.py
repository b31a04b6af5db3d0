"""What engines do around the processes and threads they start, whatever the framework.

Children that never hear the terminal's Ctrl-C (the launcher ends them,
so no worker prints its traceback), environment variables and Python's
scratch folder set for the time a framework reads them, a call into a
framework given a bounded time to answer, the processes a job left in its
own folder ended, how many task processes an engine starts here, and a
fork server its framework forks them from.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from ..errors import GpumrError

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

    Threads started meanwhile keep SIGINT blocked, and every process they or
    this thread start inherits the blocked mask across fork and exec (Python
    leaves it blocked). This process still hears a Ctrl-C that comes
    meanwhile, from any of its threads: it is held and raised when the block
    ends, so a clean-up inside is not cut short. (Ignoring SIGINT instead would
    lose it: the kernel hands a process's signal to a thread that does not block
    it, and an ignored one is dropped there.) Outside the main thread this does
    nothing.

    The block starts Python's multiprocessing resource tracker before it
    blocks anything: starting the tracker unblocks SIGINT in the thread that
    starts it, and the processes that thread spawned afterwards would hear.

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


class Starting:
    """A part of an engine started in a thread while the launcher plans (:meth:`gpumr.engines.base.Engine.start`):
    :meth:`take` hands it over once made; :meth:`close` closes it (``close(made)``) if nobody took it, after
    waiting for its start to end.

    The thread blocks SIGINT (:func:`children_deaf`), and so do the threads
    and processes it starts. The waits are on an event, not
    ``Thread.join``: Python 3.11's join, cut by a Ctrl-C, marks the thread as
    ended while it still runs (bpo-45274's repair), and a second join then
    returns at once.

    Examples
    --------
    >>> closed = []
    >>> part = Starting(closed.append)
    >>> part.begin(lambda: "a cluster")
    >>> part.take()
    'a cluster'
    >>> part.close(); closed  # (taken: the taker closes it)
    []
    >>> part = Starting(closed.append)
    >>> part.begin(lambda: "another")
    >>> part.close(); closed
    ['another']
    """

    def __init__(self, close):
        self._closing = close
        self._made = self._error = None
        self._done = threading.Event()
        self._done.set()  # (until begin: nothing to wait for)

    def begin(self, make):
        """Run ``make()`` in a thread; what it returns is the part."""
        thread = threading.Thread(target=self._make, args=(make,), name="gpumr-start", daemon=True)
        with children_deaf():  # (a Ctrl-C raised as the block begins leaves the event set: nothing to wait for)
            self._done.clear()
            try:
                thread.start()
            except BaseException:  # (no thread to start, or a SIGTERM as it started)
                if thread.ident is None:
                    self._done.set()
                raise

    def _make(self, make):
        try:
            self._made = make()
        except BaseException as exc:  # noqa: BLE001 (raised again in the launcher's thread by take)
            self._error = exc
        finally:
            self._done.set()

    def take(self):
        """The part, the caller's to close from now on; the start's own error is raised here."""
        self._done.wait()
        made, self._made = self._made, None
        if self._error is not None:
            raise self._error
        return made

    def close(self):
        """Close the part if nobody took it (the job was refused or stopped before its tasks)."""
        self._done.wait()
        made, self._made = self._made, None
        if made is not None:
            self._closing(made)


def fork_server(preload):
    """Start multiprocessing's fork server now, with ``preload`` imported, deaf to Ctrl-C like what it forks.

    An engine whose framework starts its worker processes through
    multiprocessing (Dask's nanny, with ``multiprocessing-method:
    forkserver``) then forks each worker from a Python that has imported
    them already, instead of spawning one that imports them again: a Dask
    worker spawned by the launcher of a CT job took 0.3-0.4 s to import Dask
    before its first task. Started before the launcher imports the
    framework itself, the server's imports run beside the launcher's, on
    another core. A server already running is kept, with its own preload.
    The one started here ends at :func:`end_fork_server`, or with this
    process (it reads the end of a pipe only this process and its children
    hold). Each worker works in this process's folder of the moment it is
    forked.

    A module of ``preload`` that does not import is passed over by the
    server (multiprocessing's rule); the workers then import it themselves.

    Examples
    --------
    >>> import multiprocessing
    >>> fork_server(["json"])
    >>> with multiprocessing.get_context("forkserver").Pool(1) as pool:
    ...     pool.apply(os.getpid) != os.getpid()
    True
    >>> end_fork_server()
    """
    global _fork_server
    import multiprocessing
    from multiprocessing import forkserver
    server = forkserver._forkserver
    with children_deaf():  # (the server's mask is its children's: SIGINT stays blocked there)
        running = getattr(server, "_forkserver_pid", None)
        if running is None:
            multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
        forkserver.ensure_running()
        if running is None:
            _fork_server = getattr(server, "_forkserver_pid", None)


_fork_server = None  # (the pid of the fork server that fork_server started, until end_fork_server ends it)


def end_fork_server():
    """End the fork server :func:`fork_server` started, at once (its workers gone); the next one starts anew.

    Left to end with this process, it ended 0.09 s after it, tearing down
    the modules it had imported, and held this process's stdout and stderr
    meanwhile: whoever reads them through a pipe (a script, CI, ``| tee``)
    waited that long for the job. SIGTERM ends it without the tear-down (it
    has no handler for it). A fork server that this process started for its
    own ends is left as it is.

    Examples
    --------
    >>> fork_server(["json"])
    >>> end_fork_server()
    >>> from multiprocessing import forkserver
    >>> forkserver._forkserver._forkserver_pid is None
    True
    """
    global _fork_server
    from multiprocessing import forkserver
    server, mine, _fork_server = forkserver._forkserver, _fork_server, None
    if mine is None or getattr(server, "_forkserver_pid", None) != mine:
        return
    with contextlib.suppress(OSError):
        os.kill(mine, signal.SIGTERM)
    with contextlib.suppress(OSError, AttributeError):  # (reaped already; a Python whose fork server differs)
        server._stop()  # (multiprocessing's own: closes the pipe it watches, reaps it, removes its socket)


def workers_here(o, workload):
    """How many task processes an engine starts on this machine for ``workload`` (its own workers, where the user
    named no number): as many as the cores hold its tasks, and at least one per GPU slot its records may use.

    One task keeps :meth:`gpumr.Workload.task_threads` cores busy. The
    backprojection's tasks thread over every core, so one process runs
    them all and reads and filters its projections once (two processes of
    two threads on two cores filtered nearly every row twice); the faces
    get one process per core. Where records may run on a GPU (``--device``
    ``auto`` or ``gpu``), every GPU slot (``--gpu-slots`` per GPU) gets a
    process to feed it.

    Examples
    --------
    >>> import argparse, os
    >>> from gpumr.ct.workload import Backproject
    >>> from gpumr.faces.workload import Faces
    >>> cpu = argparse.Namespace(device="cpu", cpu_threads=None)
    >>> workers_here(cpu, Faces()) == (os.cpu_count() or 1), workers_here(cpu, Backproject())
    (True, 1)
    """
    n = max(1, (os.cpu_count() or 1) // workload.task_threads(o))
    if getattr(o, "device", "cpu") != "cpu" and workload.has_gpu():
        from ..devices.nvml import discover
        n = max(n, len(discover().gpus) * (getattr(o, "gpu_slots", None) or 1))
    return n


@contextlib.contextmanager
def stderr_to(f):
    """Give the processes started in the block (a framework's JVM, RP's session) ``f`` as their stderr (None: this
    process's); what this process writes to its stderr meanwhile goes there too.

    Both levels: file descriptor 2, and ``sys.stderr``, which may not
    write to it (pytest's capture, a notebook's stream). A process forked
    meanwhile (RP's proxy forks a worker per session from a thread of this
    process) writes its traceback through the ``sys.stderr`` it was forked
    with, whenever it ends: a late proxy worker's reached the terminal, past
    the descriptor.

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


@contextlib.contextmanager
def environ(changes):
    """``os.environ`` updated by ``changes`` for the block (a value None: the variable unset), then as it was.

    Examples
    --------
    >>> with environ({"AN_EXAMPLE_VARIABLE": "1"}):
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
def scratch_in(folder):
    """Python's default scratch folder (:func:`tempfile.gettempdir`) is ``folder`` for the block, then as it was.

    For frameworks that make scratch folders of their own and leave them
    (PyFlink's gateway, and ``from_collection``, which removes its file but
    not the ``tmpXXXXXXXX`` folder it made): in the job's folder they go with it.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder, scratch_in(folder):
    ...     tempfile.mkdtemp().startswith(folder)
    True
    """
    import tempfile
    tempfile.gettempdir()  # (so that the value put back is the one in use, not None)
    saved, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield
    finally:
        tempfile.tempdir = saved


def bounded(call, timeout, what):
    """``call()`` given at most ``timeout`` seconds, else one line: ``what`` did not answer.

    A peer that accepts a connection and never answers would hold the job
    for ever; the call goes on in a daemon thread, which exit drops.

    Examples
    --------
    >>> bounded(lambda: 42, 5, "the example")
    42
    """
    done, box = threading.Event(), {}

    def target():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller)
            box["error"] = exc
        done.set()
    threading.Thread(target=target, name="gpumr-bounded-call", daemon=True).start()
    if not done.wait(timeout):
        raise GpumrError(f"{what} did not answer within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def on_threads(calls, n, folder):
    """Run the no-argument ``calls``, each a task that waits on a process it starts working in ``folder``, at most
    ``n`` at a time on daemon threads of this process; the first error, or an interrupt, starts no more of them,
    ends the processes in ``folder`` (:func:`end_processes_in`) and is raised.

    In place of a pool of forked processes (mrjob's local runner's
    ``multiprocessing.Pool``): a thread that only waits on its task's
    process costs nothing, and a stopped job has nothing to unwind but the
    processes it started. ``Pool.terminate`` takes the task queue's lock,
    which an idle worker holds while it waits for work, and joins workers
    its own thread may have forked after the signal: a local job whose
    process group got SIGTERM did not end within 120 s in one CI run.

    Examples
    --------
    >>> import tempfile
    >>> done = []
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     on_threads([lambda i=i: done.append(i) for i in range(5)], 2, folder)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
    """
    import queue
    calls, todo, ended = list(calls), queue.SimpleQueue(), queue.SimpleQueue()
    for call in calls:
        todo.put(call)
    stop = threading.Event()

    def work():
        while not stop.is_set():
            try:
                call = todo.get_nowait()
            except queue.Empty:
                return
            try:
                call()
                ended.put(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller)
                stop.set()  # (before the next get: this thread starts no more either)
                ended.put(exc)
    try:
        for i in range(max(1, min(n, len(calls)))):
            threading.Thread(target=work, name=f"gpumr-task-{i}", daemon=True).start()
        for _ in calls:
            error = ended.get()  # (a signal is raised here)
            if error is not None:
                raise error
    except BaseException:
        stop.set()
        end_processes_in(folder, timeout=AFTER_SIGNAL, ask=True)
        raise


def end_processes_in(folder, timeout=30, ask=False):
    """Wait until no process of the job's is left (one naming ``folder`` in its command line or working in it, or
    started by such a one); then kill those left.

    For frameworks whose helpers outlive their session by a few seconds
    (RADICAL-Pilot's bootstrap), or for ever once their own manager is gone
    (RP's agent components, whose titles name no folder, after a SIGTERM to
    the process group): they run from the job's private ``folder``, so every
    process naming it or working in it is the job's, and so is every process
    such a one started, whatever it names (PyFlink's gateway JVM names the
    folder, the Python workers it starts do not, and one outlived its killed
    JVM by more than 30 s). Once seen, a process stays the job's until it
    ends, its parent gone or not.

    Parameters
    ----------
    timeout : float
        Seconds they get to end by themselves; then SIGKILL.
    ask : bool
        SIGTERM them first, at once (a stopped job's helpers: some ignore
        Ctrl-C, as PyFlink starts its gateway JVM).
    """
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


@contextlib.contextmanager
def children_started(into):
    """Add to the list ``into`` the multiprocessing children this process starts in the block (a framework's
    helpers forked from one of its threads), for :func:`end_children`.

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
    """End the multiprocessing ``children`` still alive: SIGTERM, SIGKILL after ``timeout`` seconds; each reaped.

    For a framework's helper that its framework lost track of: RP's proxy
    worker, SIGTERMed by RP when its session's start timed out, can miss that
    signal (one that lands while the child is still being forked is dropped)
    and then waits for ever for a stop that never comes. Its command line and
    folder are its parent's, so :func:`end_processes_in` cannot tell it is
    the job's.
    """
    alive = [p for p in children if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + timeout
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout)


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
