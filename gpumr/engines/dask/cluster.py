"""The Dask engine's embedded cluster: a ``LocalCluster`` of this machine whose ports take only the job's own
connections, its workers forked from a fork server that started through the job's :class:`gpumr.engines.start.Start`."""

import contextlib
import logging
import os
import signal
import threading

from ..processes import children_deaf, workers_here

#: Dask settings of an embedded cluster: no dashboard routes, periodic work that feeds a dashboard slowed or off,
#: workers forked from the fork server, which each move into the job's folder as they start.
EMBEDDED_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                   "distributed.admin.system-monitor.interval": "2s",
                   "distributed.worker.memory.monitor-interval": "500ms",
                   "distributed.worker.multiprocessing-method": "forkserver",
                   "distributed.scheduler.http.routes": [], "distributed.worker.http.routes": [],
                   "distributed.worker.preload": [__name__]}
#: What the fork server imports before it forks a worker (with the workload's own module, where it is gpumr's).
#: None of it may start CUDA: a forked child cannot use its parent's context (none is made at import).
WORKER_PRELOAD = ("distributed", "gpumr.tasks.runtime")


def dask_setup(worker):
    """(In each embedded worker, as Dask starts it) work in the job's folder, not in the launcher's current one."""
    import dask
    folder = dask.config.get("temporary-directory", None)
    if folder:
        os.chdir(folder)


def embedded(options, workload, start):
    """``(cluster, client)``: a new embedded ``LocalCluster`` of this machine and a client of it."""
    fork_server_for(type(workload).__module__, start)  # (started by DaskEngine.start already, where it planned)
    import dask
    from distributed import Client, LocalCluster
    from distributed.security import Security
    cluster = None
    try:
        with dask.config.set({"temporary-directory": start.folder, **EMBEDDED_CONFIG}):
            cluster = LocalCluster(n_workers=embedded_workers(options, workload), threads_per_worker=1, processes=True,
                                   host="127.0.0.1", security=Security.temporary(),
                                   dashboard_address="127.0.0.1:0", worker_dashboard_address=None,
                                   silence_logs=False if start.debug else logging.CRITICAL + 1)
        return cluster, Client(cluster, set_as_default=False)
    except BaseException:
        close(None, cluster)
        raise


def fork_server_for(module, start=None):
    """The fork server the embedded cluster's workers are forked from: Dask, the task runtime and the workload's
    ``module`` imported where it is gpumr's (:func:`fork_server`)."""
    fork_server([*WORKER_PRELOAD, *([module] if module and module.startswith("gpumr.") else [])], start)


def close(client, cluster):
    """Close a client, then its cluster (either may be None), then the fork server its workers came from; a part that
    fails to close is passed over."""
    for part in (client, cluster):
        if part is not None:
            with contextlib.suppress(Exception):
                part.close()
    if cluster is not None:
        end_fork_server()


def embedded_workers(options, workload):
    """Worker processes of an embedded cluster: ``--workers``, else :func:`gpumr.engines.processes.workers_here`.

    Examples
    --------
    >>> import argparse, os
    >>> from gpumr.faces.workload import Faces
    >>> embedded_workers(argparse.Namespace(workers=None, device="cpu"), Faces()) == (os.cpu_count() or 1)
    True
    """
    return options.workers or workers_here(options, workload)


class Starting:
    """A part of an engine started in a thread while the launcher plans (:meth:`gpumr.engines.base.Engine.start`):
    :meth:`take` hands it over once made; :meth:`close` closes it (``close(made)``) if nobody took it, after waiting
    for its start to end.

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


def fork_server(preload, start=None):
    """Start multiprocessing's fork server now, with ``preload`` imported, deaf to Ctrl-C like what it forks.

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
    if getattr(server, "_forkserver_pid", None) is not None:
        return  # (kept as it is: this process's folder and environment are left alone, whatever other threads do)
    _short_socket_folder()
    inherited = start.inherited() if start is not None else contextlib.nullcontext()
    with children_deaf(), inherited:  # (the server's mask, folder and environment are its children's)
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
        forkserver.ensure_running()
        _fork_server = getattr(server, "_forkserver_pid", None)


_fork_server = None  # (the pid of the fork server that fork_server started, until end_fork_server ends it)

#: The longest temporary folder whose private subfolder still holds the fork server's Unix socket (``sun_path``
#: takes 107 bytes; the subfolder and the socket's name add 32).
SOCKET_FOLDER_MAX = 70


def _short_socket_folder():
    """Where the temporary folder is too long to hold the fork server's socket (a deep ``TMPDIR``), make
    multiprocessing's private folder (``pymp-*``, 0700, removed at exit) in ``/tmp`` instead, once per process."""
    import tempfile
    from multiprocessing import process, util
    if process.current_process()._config.get("tempdir") or len(tempfile.gettempdir()) <= SOCKET_FOLDER_MAX:
        return
    saved, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def end_fork_server():
    """End the fork server :func:`fork_server` started, at once (its workers gone); the next one starts anew.

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
