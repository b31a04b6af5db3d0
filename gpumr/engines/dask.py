"""The Dask engine: a job's tasks on ``dask.distributed``, an embedded ``LocalCluster`` or a running scheduler.

Run::

    gpumr run faces frames.seq/ -o out/ --engine dask [--workers N]
    gpumr run faces /shared/frames.seq -o /shared/out --engine dask --scheduler tcp://HOST:8786

An embedded cluster's workers (one per core, or per the cores a task threads over; ``--workers``) read the side
files where the launcher keeps them; a running cluster's workers (SLURM
through dask-jobqueue: :doc:`/how-to/slurm`; Kubernetes) get them streamed
under their content names (:mod:`.dask_ship`: kept for the next job, nothing
left on the scheduler) and must reach the inputs and the output (a shared
filesystem or URIs). With ``--device gpu``, tasks ask for one unit
of the workers' ``GPU`` resource where workers declare one. A failed or
stopped job cancels its tasks and waits for them to end (an embedded
cluster is stopped) before the stage is dropped.
"""

import contextlib
import functools
import logging
import os
import time

from ..boundary import logger, silence
from ..errors import GpumrError, redact
from .base import Engine, Outcome  # noqa: F401 (Outcome: what run returns)
from .dask_ship import ship
from .processes import Starting, bounded, children_deaf, end_fork_server, fork_server, workers_here

log = logger(__name__)
#: Seconds to wait for a scheduler given by ``--scheduler`` to connect and to answer a request.
CONNECT_TIMEOUT = 10
#: Seconds a call into the scheduler waits for its answer.
ANSWER_TIMEOUT = CONNECT_TIMEOUT + 5
#: The longest a failed job waits for its tasks on a running cluster to end before dropping the stage.
END_TASKS_TIMEOUT = 60
#: Schemes of a Dask scheduler address gpumr connects to.
SCHEMES = ("tcp", "tls", "inproc", "ws", "wss", "ucx")
#: Dask settings of an embedded cluster: the periodic work that feeds a dashboard nobody is shown is slowed or off.
#: Worker profiling samples every thread's stack 100 times a second under the GIL; with the event loops' 20 ms
#: ticks and the monitors, it cost two busy workers of a 2-core machine 5-7% of a pure-Python task's speed and
#: the launcher 0.45 s of CPU per 20 s (then 0.11 s). The workers are forked from multiprocessing's fork server
#: (:meth:`DaskEngine.start` starts it early, Dask and the task runtime imported), not spawned: Dask's
#: ``pre-spawn-environ`` (``OMP_NUM_THREADS=1``, ``MALLOC_TRIM_THRESHOLD_``, ...) is then set in each worker as
#: it starts, after what reads it at load (Dask's own caveat for this method); gpumr's workloads set their
#: threads themselves. A running cluster (--scheduler) keeps its own settings.
EMBEDDED_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                   "distributed.admin.system-monitor.interval": "2s",
                   "distributed.worker.memory.monitor-interval": "500ms",
                   "distributed.worker.multiprocessing-method": "forkserver"}
#: What the fork server imports before it forks a worker (with the workload's own module, where it is gpumr's).
#: None of it may start CUDA: a forked child cannot use its parent's context (none is made at import).
WORKER_PRELOAD = ("distributed", "gpumr.tasks.runtime")


def failure(exc):
    """One line for a Dask task's or the cluster's error: a gpumr error's message, else ``Type: message``."""
    if isinstance(exc, GpumrError):
        return str(exc)
    text = " ".join(str(exc).split())
    return redact(f"a task of the dask job failed: {type(exc).__name__}{': ' + text[:300] if text else ''}")


class DaskEngine(Engine):
    """``--engine dask``."""

    reports_tasks = True  # (map_reduce hears each task end)
    name = "dask"
    help = "dask.distributed: an embedded LocalCluster, or a running one (--scheduler)"

    def add_options(self, group):
        group.add_argument("--scheduler", metavar="ADDRESS",
                           help="engine dask: a running scheduler, e.g. tcp://HOST:8786 (default: an embedded "
                                "LocalCluster of this machine)")
        group.add_argument("--workers", type=int, default=None, metavar="N",
                           help="engine dask: worker processes of the embedded LocalCluster (default: as many as the "
                                "cores hold tasks, at least one per GPU)")

    def check(self, o):
        from .. import limits
        if o.workers is not None:
            limits.number("--workers", o.workers, 1, 1024, integer=True)
        address = o.scheduler
        if address is not None:
            if redact(address) != address:
                raise GpumrError(f"--scheduler {redact(address)}: an address with user-info (a user name or "
                                 "credentials before '@') is refused, and never shown; Dask takes credentials from "
                                 "its TLS configuration")
            scheme, sep, _ = address.partition("://")
            if sep and scheme not in SCHEMES:
                raise GpumrError(f"--scheduler {address}: not a Dask scheduler address (schemes: "
                                 f"{', '.join(s + '://' for s in SCHEMES)})")
            if scheme == "tls":
                import dask
                if not dask.config.get("distributed.comm.tls.client.cert", None):
                    raise GpumrError(f"--scheduler {address}: tls:// needs Dask's TLS configuration (the "
                                     "distributed.comm.tls settings: CA, certificate and key), and none is set here")
            if scheme == "ucx":
                import importlib.util
                if importlib.util.find_spec("distributed_ucxx") is None and importlib.util.find_spec("ucp") is None:
                    raise GpumrError(f"--scheduler {address}: ucx:// needs UCX for Dask (pip install distributed-ucxx), "
                                     "which is not installed here")

    def tasks_here(self, o):
        return o.scheduler is None

    def run(self, plan, job):
        from .mapreduce import map_reduce  # (here: it imports numpy, and this module is loaded to start early)
        with self._client(plan, job) as (client, embedded):
            find = functools.partial(os.path.join, plan.folder)
            if not embedded and not client.scheduler_info().get("workers"):
                log.warning("the Dask scheduler has no workers yet: the job waits for them (batch jobs still "
                            "queued?); Ctrl-C stops it")
            if not embedded:
                find = ship(client, plan.side, ANSWER_TIMEOUT)
            resources = {"GPU": 1} if plan.o.device == "gpu" and _declare_gpus(client) else None
            futures, prefix = [], f"gpumr-{plan.spec.job}-"  # (every task's key begins so: _end_tasks finds them)

            def execute(phase, function, calls):
                extra = dict(find=find) if phase == "map" else {}
                batch = [client.submit(function, *args, **extra, pure=False, key=f"{prefix}{phase}-{i}",
                                       resources=resources if phase == "map" else None)
                         for i, args in enumerate(calls)]
                futures.extend(batch)
                from distributed import as_completed
                for future in as_completed(batch, loop=client.loop):
                    yield future.result()

            try:
                return map_reduce(plan, job, execute)
            except BaseException as exc:
                _end_tasks(client, futures, embedded, prefix)
                if isinstance(exc, Exception) and not isinstance(exc, GpumrError):
                    raise GpumrError(failure(exc)) from exc
                raise

    @contextlib.contextmanager
    def _client(self, plan, job):
        """``(client, embedded)``: the caller's client, a running scheduler's, or an embedded cluster's."""
        from distributed import Client
        _quiet_logs(job.debug)
        if job.session is not None:
            yield job.session, False
            return
        address = plan.o.scheduler
        if address:
            try:
                client = bounded(lambda: Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False),
                                 ANSWER_TIMEOUT, "the Dask scheduler")
            except GpumrError:
                raise
            except Exception as exc:  # noqa: BLE001 (OSError, TimeoutError, a peer that is not Dask ...)
                raise GpumrError(f"--scheduler {address}: no Dask scheduler answered "
                                 f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
            try:
                yield client, False
            finally:
                with contextlib.suppress(Exception):
                    client.close(timeout=CONNECT_TIMEOUT)
            return
        cluster = client = None
        try:
            if self._starting is not None:  # started by start(), while the launcher checked the side files
                cluster, client = self._starting.take()
            else:
                with children_deaf():
                    cluster, client = _embedded(plan.o, plan.workload, job.folder, job.debug)
            yield client, True
        finally:
            _close(client, cluster)

    def start_early(self, argv, module, started):
        """The fork server (see :meth:`start`) starts as the launcher begins (:func:`gpumr.launch.job.start_early`),
        before it imports the plan, the workload and numpy: its imports (Dask's, 0.4 s here) are what the first
        worker waits for. Started after the command line was parsed, a 256^3 CT job's first slab came 0.3-0.5 s
        later (paired: 6.73 s against 6.27 s, medians of 8); started after the plan's imports (numpy's among
        them), 0.27 s into the launcher's life rather than 0.10 s, a 64^3 job took 1.5-4% longer (paired, medians
        of 30 and 15). This module imports nothing more until the job runs. Not for ``--scheduler`` (a running
        cluster's workers) or ``--dry-run`` (nothing runs)."""
        if any(a in ("--scheduler", "--dry-run") or a.startswith("--scheduler=") for a in argv):
            return
        started.callback(end_fork_server)
        _fork_server_for(module)

    def start(self, o, workload, folder, started, debug=False):
        """An embedded cluster starts here, in a thread, while the launcher reads and checks the side files.

        Its start (0.5 s here: a new Python per worker, importing Dask) came
        after the checks (0.3 s for a 256^3 job's 360 projections); it now
        overlaps them, and that job's first slab is done 0.2-0.3 s sooner.
        Before that, the fork server its workers are forked from starts
        (:func:`gpumr.engines.processes.fork_server`), and imports Dask, the
        task runtime and a built-in workload's module beside the launcher's
        own import of Dask: a worker is then ready as soon as the scheduler
        is (0.3-0.4 s sooner). Dask is imported next, in this thread:
        imported in the other, it held the GIL the checks need. ``started``
        closes the cluster if the plan is refused after this.
        """
        if o.scheduler is not None:
            return
        started.callback(end_fork_server)  # (registered first: it ends a server that a Ctrl-C cut short too)
        _fork_server_for(type(workload).__module__)  # (kept where start_early began it)
        import distributed  # noqa: F401 (here: see above)
        _quiet_logs(debug)
        self._starting = Starting(lambda made: _close(made[1], made[0]))
        started.callback(self._starting.close)  # (first: a Ctrl-C held while the thread starts is raised at once)
        self._starting.begin(lambda: _embedded(o, workload, folder, debug))

    _starting = None


def _quiet_logs(debug):
    """Without ``--debug``, Dask's, Tornado's and asyncio's own logs stay silent (:func:`gpumr.boundary.silence`:
    a stopped job's waits say "Task exception was never retrieved" through asyncio's, its scheduler "Closed comm"
    with a traceback at CRITICAL through Dask's)."""
    if not debug:
        silence("asyncio", "distributed", "tornado", "bokeh")


def _embedded(o, workload, folder, debug):
    """``(cluster, client)``: a new embedded ``LocalCluster`` of this machine and a client of it.

    Its scheduler's, nannies' and workers' scratch is in the job's ``folder``
    (else dask-scratch-space stays in TMPDIR); its settings are
    :data:`EMBEDDED_CONFIG`. The caller blocks SIGINT meanwhile
    (:func:`gpumr.engines.processes.children_deaf`): the workers must not hear
    a terminal's Ctrl-C (each would print its traceback), the launcher ends them.
    """
    _fork_server_for(type(workload).__module__)  # (started by DaskEngine.start already, where the launcher planned)
    import dask
    from distributed import Client, LocalCluster
    cluster = None
    try:
        with dask.config.set({"temporary-directory": folder, **EMBEDDED_CONFIG}):
            cluster = LocalCluster(n_workers=embedded_workers(o, workload), threads_per_worker=1, processes=True,
                                   dashboard_address=None,  # (its HTTP server on any free port)
                                   scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                                   silence_logs=False if debug else logging.CRITICAL + 1)
        return cluster, Client(cluster, set_as_default=False)
    except BaseException:
        _close(None, cluster)
        raise


def _fork_server_for(module):
    """The fork server the embedded cluster's workers are forked from: Dask, the task runtime and the workload's
    ``module`` imported where it is gpumr's (:func:`gpumr.engines.processes.fork_server`)."""
    fork_server([*WORKER_PRELOAD, *([module] if module and module.startswith("gpumr.") else [])])


def _close(client, cluster):
    """Close a client, then its cluster (either may be None), then the fork server its workers came from; a part
    that fails to close is passed over.

    The server ends only once a cluster has closed: without one (a Ctrl-C
    while the launcher waited for the cluster's start), a worker may be
    still starting, and without its server it failed and printed its
    traceback; the start's own close, or the launcher's, ends it then.
    """
    for part in (client, cluster):
        if part is not None:
            with contextlib.suppress(Exception):
                part.close()
    if cluster is not None:
        end_fork_server()


def embedded_workers(o, workload):
    """Worker processes of an embedded cluster: ``--workers``, else :func:`gpumr.engines.processes.workers_here`.

    Examples
    --------
    >>> import argparse, os
    >>> from gpumr.faces.workload import Faces
    >>> embedded_workers(argparse.Namespace(workers=None, device="cpu"), Faces()) == (os.cpu_count() or 1)
    True
    """
    return o.workers or workers_here(o, workload)


def _declare_gpus(client):
    """Whether any worker declares a ``GPU`` resource (``dask worker --resources GPU=1``)."""
    workers = client.scheduler_info().get("workers", {}).values()
    return any((w.get("resources") or {}).get("GPU") for w in workers)


def _end_tasks(client, futures, embedded, prefix):
    """Stop every task of the job (keys starting ``prefix``), so that none writes into the stage once it is dropped.

    A cancelled task leaves the scheduler's ``processing`` at once, while its
    worker's thread runs it to its end (Dask cannot stop a running thread):
    a running cluster's worker then wrote the task's files into a stage the
    launcher had dropped, making it again beside the output. So the wait is
    for the workers to say that none of the job's tasks still executes (at
    most :data:`END_TASKS_TIMEOUT` seconds).
    """
    if embedded:
        return  # the embedded cluster is stopped on the way out, its workers with it
    with contextlib.suppress(Exception):  # a cluster that died meanwhile runs no task
        client.cancel(futures, force=True)
        deadline = time.monotonic() + END_TASKS_TIMEOUT
        while time.monotonic() < deadline:
            left = bounded(lambda: client.run(_executing, prefix, on_error="return"), ANSWER_TIMEOUT,
                           "the Dask scheduler")
            if not any(n for n in left.values() if isinstance(n, int)):
                return
            time.sleep(0.05)


def _executing(prefix, dask_worker=None):
    """(On a worker) how many tasks whose key starts with ``prefix`` its threads still run, cancelled ones too."""
    state = getattr(dask_worker, "state", dask_worker)
    running = [*getattr(state, "executing", ()), *getattr(state, "long_running", ())]
    return sum(1 for ts in running if str(getattr(ts, "key", ts)).startswith(prefix))


def engine(name):
    return DaskEngine(name)
