"""The Dask engine: a job's tasks on ``dask.distributed``, an embedded ``LocalCluster`` or a running scheduler.

SLURM through dask-jobqueue: :doc:`/how-to/slurm`."""

import contextlib
import time

from ...core.workload import Option
from ...errors import GpumrError, redact
from ...log import logger, silence
from ..mapreduce import Pool, PoolEngine
from ..processes import children_deaf
from .cluster import Starting, close, embedded, embedded_workers, end_fork_server, fork_server_for
from .sidefiles import bounded, ship

log = logger(__name__)
#: Seconds to wait for a scheduler given by ``--scheduler`` to connect and to answer a request.
CONNECT_TIMEOUT = 10
#: Seconds a call into the scheduler waits for its answer.
ANSWER_TIMEOUT = CONNECT_TIMEOUT + 5
#: The longest a failed job waits for its tasks on a running cluster to end before dropping the stage.
END_TASKS_TIMEOUT = 60
#: Schemes of a Dask scheduler address gpumr connects to.
SCHEMES = ("tcp", "tls", "inproc", "ws", "wss", "ucx")


class DaskEngine(PoolEngine):
    """``--engine dask``."""

    name = "dask"
    help = "dask.distributed: an embedded LocalCluster, or a running one (--scheduler)"
    options = (
        Option("--scheduler", "engine dask: a running scheduler, e.g. tls://HOST:8786 (default: an embedded "
                              "LocalCluster of this machine)", metavar="ADDRESS"),
        Option("--workers", "engine dask: worker processes of the embedded LocalCluster (default: as many as the "
                            "cores hold tasks, at least one per GPU)", type=int, metavar="N", least=1, most=1024),
    )

    def check(self, options):
        import importlib.util
        if importlib.util.find_spec("distributed") is None:
            raise GpumrError("--engine dask needs Dask's distributed scheduler: pip install 'gpumr[dask]'")
        address = options.scheduler
        if address is None:
            return
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

    def tasks_here(self, options):
        return options.scheduler is None

    def would_run(self, plan):
        if plan.options.scheduler:
            return [f"Dask: the running scheduler {plan.options.scheduler}; side files streamed to its workers"]
        workers = embedded_workers(plan.options, plan.workload)
        return [f"Dask: an embedded LocalCluster of {workers} worker process(es) on "
                "this machine, TLS with a certificate made for the job, no dashboard"]

    def start_early(self, argv, module, start, started):
        """The fork server (see :meth:`start`) starts as the launcher begins (:func:`gpumr.launch.job.start_early`),
        before it imports the plan, the workload and numpy: its imports are what the first worker waits for. Not for
        ``--scheduler`` (a running cluster's workers) or ``--dry-run`` (nothing runs)."""
        if any(a in ("--scheduler", "--dry-run") or a.startswith("--scheduler=") for a in argv):
            return
        started.callback(end_fork_server)
        fork_server_for(module, start)

    def start(self, options, workload, start, started):
        """An embedded cluster starts here, in a thread, while the launcher reads and checks the side files."""
        if options.scheduler is not None:
            return
        started.callback(end_fork_server)  # (registered first: it ends a server that a Ctrl-C cut short too)
        fork_server_for(type(workload).__module__, start)  # (kept where start_early began it)
        import distributed  # noqa: F401 (here: see above)
        _quiet_logs(start.debug)
        self._starting = Starting(lambda made: close(made[1], made[0]))
        started.callback(self._starting.close)  # (first: a Ctrl-C held while the thread starts is raised at once)
        self._starting.begin(lambda: embedded(options, workload, start))

    _starting = None

    @contextlib.contextmanager
    def session(self, plan, job):
        with self._client(plan, job) as (client, embedded_):
            from ...tasks.runtime import SideFiles
            find = SideFiles(plan.folder)
            if not embedded_ and not client.scheduler_info().get("workers"):
                log.warning("the Dask scheduler has no workers yet: the job waits for them (batch jobs still "
                            "queued?); Ctrl-C stops it")
            if not embedded_:
                find = ship(client, plan.side, ANSWER_TIMEOUT)
            yield DaskPool(client, embedded_, find, plan)

    @contextlib.contextmanager
    def _client(self, plan, job):
        """``(client, embedded)``: the caller's client, a running scheduler's, or an embedded cluster's."""
        from distributed import Client
        _quiet_logs(job.debug)
        if job.session is not None:
            yield job.session, False
            return
        address = plan.options.scheduler
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
                    cluster, client = embedded(plan.options, plan.workload, job.start)
            yield client, True
        finally:
            close(client, cluster)


class DaskPool(Pool):
    """A job's tasks as Dask futures, each keyed ``gpumr-JOB-PHASE-I``."""

    engine = "dask"

    def __init__(self, client, embedded_, find, plan):
        self.client, self.embedded, self.find = client, embedded_, find
        self.resources = {"GPU": 1} if plan.options.device == "gpu" and _declare_gpus(client) else None
        self.futures, self.prefix = [], f"gpumr-{plan.spec.job}-"

    def execute(self, phase, function, calls):
        from distributed import as_completed
        extra = dict(find=self.find) if phase == "map" else {}
        batch = [self.client.submit(function, *args, **extra, pure=False, key=f"{self.prefix}{phase}-{i}",
                                    resources=self.resources if phase == "map" else None)
                 for i, args in enumerate(calls)]
        self.futures.extend(batch)
        for future in as_completed(batch, loop=self.client.loop):
            yield future.result()

    def end(self, exc):
        """Stop every task of the job, so that none writes into the stage once it is dropped."""
        if self.embedded:
            return
        self.client.cancel(self.futures, force=True)
        deadline = time.monotonic() + END_TASKS_TIMEOUT
        while time.monotonic() < deadline:
            left = bounded(lambda: self.client.run(_executing, self.prefix, on_error="return"), ANSWER_TIMEOUT,
                           "the Dask scheduler")
            if not any(n for n in left.values() if isinstance(n, int)):
                return
            time.sleep(0.05)


def _quiet_logs(debug):
    """Without ``--debug``, Dask's, Tornado's and asyncio's own logs stay silent (:func:`gpumr.log.silence`)."""
    if not debug:
        silence("asyncio", "distributed", "tornado", "bokeh")


def _declare_gpus(client):
    """Whether any worker declares a ``GPU`` resource (``dask worker --resources GPU=1``)."""
    workers = client.scheduler_info().get("workers", {}).values()
    return any((w.get("resources") or {}).get("GPU") for w in workers)


def _executing(prefix, dask_worker=None):
    """(On a worker) how many tasks whose key starts with ``prefix`` its threads still run, cancelled ones too."""
    state = getattr(dask_worker, "state", dask_worker)
    running = [*getattr(state, "executing", ()), *getattr(state, "long_running", ())]
    return sum(1 for ts in running if str(getattr(ts, "key", ts)).startswith(prefix))


def engine(name):
    return DaskEngine(name)
