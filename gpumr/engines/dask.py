"""The Dask engine (``dask.distributed``): a workload's tasks on a Dask cluster, a thin shell over the shared core.

Run::

    gpumr run faces frames.seq/ -o out/ --engine dask [--workers N] [face options]
    gpumr run backproject --projections proj.seq --slab 16 -o out/ --engine dask --scheduler tcp://HOST:8786

By default the command starts an embedded ``LocalCluster`` of worker
processes (one per core, ``--workers``) and stops it at the end;
``--scheduler ADDRESS`` uses a running cluster instead (dask-jobqueue on
SLURM or PBS, Kubernetes). On SLURM, with gpumr installed where the jobs run::

    # cluster.py, kept running while jobs use it
    from dask_jobqueue import SLURMCluster
    cluster = SLURMCluster(cores=8, processes=8, memory="64GB", job_extra_directives=["--gres=gpu:1"],
                           worker_extra_args=["--resources", "GPU=1"])
    cluster.scale(jobs=4)
    print(cluster.scheduler_address)
    input("serving; Enter stops it")

    gpumr run faces /shared/frames.seq -o /shared/out --engine dask --scheduler tcp://HOST:PORT

(The tasks write a local output folder on their own machines: give one on a
shared filesystem, or a URI.) The client parses, checks and
plans exactly as the Spark engine does (:func:`gpumr.engines.common.prepare`):
SequenceFile byte ranges or the slab plan, one task each. Each task reads
its range through the one split reader, chooses the device per record
(GPUs leased as everywhere else) in a :class:`gpumr.engines.common.Task`,
and writes its output lines into the output's hidden stage under a name of
its own attempt. With ``--device gpu``, tasks ask for one unit of the
workers' ``GPU`` resource where workers declare one
(``dask worker --resources GPU=1``), so no worker runs more GPU tasks than
it has GPUs.

Output: sorted as the other engines' (``--reducers N``: N reduce tasks, each
merging the map tasks' sorted files over its range of lines, the ranges cut
from samples; 0: one unsorted part per task), published by the client
through the output transaction, one attempt per part: a task re-run after a
worker died writes a new attempt, never the same file, and only the attempt
whose result the client received is published, with its counters, so every
record comes out exactly once. Side files (cascade, projections, geometry)
are read from where they are by an embedded cluster's workers, and
uploaded to a running cluster's workers (``Client.upload_file``). A failed
or interrupted job cancels its tasks (an embedded cluster is stopped),
then drops the stage: nothing is visible; the error is one line.
"""

import contextlib
import heapq
import logging
import os
import secrets
import shutil
import tempfile
import time

from ..errors import GpumrError
from . import common

MADE_BY = "gpumr dask"
#: The longest the client waits for a failed job's tasks on a running cluster to end before dropping the stage.
END_TASKS_TIMEOUT = 60
#: Lines each map task samples for the reduce tasks' ranges (``--reducers`` over 1).
SAMPLES = 32
#: Seconds to wait for a scheduler given by --scheduler to answer.
CONNECT_TIMEOUT = 10


def _options(parser):
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a running Dask scheduler, e.g. tcp://HOST:8786 (default: an embedded LocalCluster)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes of the embedded LocalCluster (default: one per core)")


# -- in the workers -------------------------------------------------------------------------------------
def _locate(name):
    """This worker's copy of the uploaded side file ``name``."""
    from distributed import get_worker
    return os.path.join(get_worker().local_directory, name)


def map_task(kind, task_options, shipped, index, item, stage, sort):
    """Process one item; write its lines into ``stage`` as this attempt's file; return what the client needs."""
    task = common.Task(kind, task_options, _locate if shipped else (lambda path: path))
    lines = task.lines([item])
    if sort:
        lines = sorted(lines)
    name = f"{'map' if sort else 'part'}-{index:05d}.attempt-{secrets.token_hex(8)}"
    size, sha = common.write_part(stage, name, lines)
    sample = lines[::max(1, len(lines) // SAMPLES)] if sort else []
    return {"index": index, "name": name, "size": size, "sha": sha, "counts": task.counts, "sample": sample}


def reduce_task(index, stage, names, low, high):
    """Merge the sorted map files ``names`` over lines in ``[low, high)`` into part ``index``'s attempt file."""
    runs = [common.read_part(stage, name) for name in names]
    lines = (ln for ln in heapq.merge(*runs) if (low is None or ln >= low) and (high is None or ln < high))
    name = f"part-{index:05d}.attempt-{secrets.token_hex(8)}"
    return (index, name, *common.write_part(stage, name, lines))


# -- in the client --------------------------------------------------------------------------------------
def _bounds(maps, reducers):
    """``reducers`` ranges ``(low, high)`` of lines, cut at quantiles of the map tasks' samples."""
    sample = sorted(ln for m in maps for ln in m["sample"])
    cuts = [sample[len(sample) * r // reducers] for r in range(1, reducers)] if sample else []
    edges = [None, *cuts, None]
    return list(zip(edges[:-1], edges[1:])) if cuts else [(None, None)] + [("\uffff", "\uffff")] * (reducers - 1)


def _gpu_resources(client, device):
    """``{"GPU": 1}`` for ``--device gpu`` where workers declare a ``GPU`` resource, else None."""
    if device != "gpu":
        return None
    workers = client.scheduler_info().get("workers", {}).values()
    return {"GPU": 1} if any((w.get("resources") or {}).get("GPU") for w in workers) else None


@contextlib.contextmanager
def _cluster(scheduler, workers, debug):
    """``(client, stop)``: a client of ``scheduler``, or of an embedded LocalCluster that ``stop()`` ends."""
    from distributed import Client, LocalCluster
    if not debug:  # a job stopped mid-gather leaves the client's waits to say "Task exception was never retrieved"
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    if scheduler:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise GpumrError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})") from None
        try:
            yield client, None
        finally:
            client.close()
        return
    if workers is not None and not 1 <= workers <= 1024:
        raise GpumrError(f"--workers must be an integer from 1 to 1024, not {workers}")
    cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=False if debug else logging.CRITICAL)
    client = Client(cluster)

    def stop():
        client.close()
        cluster.close()
    try:
        yield client, stop
    finally:
        stop()


def _end_tasks(client, futures, stop):
    """Stop every task of the job so that none writes into the stage once it is dropped."""
    if stop is not None:
        stop()  # the embedded cluster's workers end with it
        return
    with contextlib.suppress(Exception):  # a cluster that died meanwhile runs no task
        client.cancel(futures, force=True)
        keys = {f.key for f in futures}
        deadline = time.monotonic() + END_TASKS_TIMEOUT
        while time.monotonic() < deadline and keys & {k for ks in client.processing().values() for k in ks}:
            time.sleep(0.05)


def failure(exc):
    """One line for a task's error: a gpumr error's message as it is, another as ``Type: message``."""
    if isinstance(exc, GpumrError):
        return str(exc)
    return f"a Dask task failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def run(kind, argv, client=None, debug=False):
    """Run workload ``kind`` on Dask with the command line ``argv``; returns ``(counters, seconds)``.

    Parameters
    ----------
    kind : str
    argv : list of str
        ``-o``, ``--scheduler``/``--workers``, ``--split-size`` or ``--slab``, and the workload's options.
    client : distributed.Client, optional
        Run there (tests share one cluster); by default per ``--scheduler``.

    Raises
    ------
    GpumrError
        For a bad option or input (before any task), or the failed job, in one line.
    """
    folder = tempfile.mkdtemp(prefix="gpumr-dask-")
    try:
        return _run(kind, argv, client, debug, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(kind, argv, client, debug, folder):
    import argparse
    peek = argparse.ArgumentParser(add_help=False)
    _options(peek)
    given = peek.parse_known_args(argv)[0]
    here = client is None and given.scheduler is None
    o = common.prepare(kind, argv, "dask", MADE_BY, folder, here, _options)
    with contextlib.ExitStack() as stack:
        stop = None
        if client is None:
            client, stop = stack.enter_context(_cluster(o.scheduler, o.workers, debug))
        shipped = stop is None  # a running cluster's workers get the side files uploaded
        task_options = dict(o.task)
        for option, path, name in o.side:
            if shipped:
                try:
                    client.upload_file(path, load=False)
                except OSError as exc:
                    raise GpumrError(f"{option} {path}: {exc.strerror or exc}") from None
            else:
                task_options[option.lstrip("-").replace("-", "_")] = path
        t0 = time.perf_counter()
        resources, sort, token = _gpu_resources(client, o.device), o.reducers > 0, secrets.token_hex(6)
        futures = []
        try:
            stage = common.stage_of(o.out)
            futures = [client.submit(map_task, kind, task_options, shipped, i, item, stage, sort, pure=False,
                                     key=f"gpumr-{kind}-map-{i}-{token}", resources=resources)
                       for i, item in enumerate(o.items)]
            maps = client.gather(futures)
            if sort:
                names = [m["name"] for m in maps]
                futures += [client.submit(reduce_task, r, stage, names, low, high, pure=False,
                                          key=f"gpumr-{kind}-reduce-{r}-{token}")
                            for r, (low, high) in enumerate(_bounds(maps, o.reducers))]
                written = client.gather(futures[len(maps):])
            else:
                written = [(m["index"], m["name"], m["size"], m["sha"]) for m in maps]
        except BaseException as exc:
            _end_tasks(client, futures, stop)
            o.out.abort()
            if isinstance(exc, Exception) and not isinstance(exc, GpumrError):
                raise GpumrError(failure(exc)) from exc
            raise
        common.publish(o.out, stage, {f"part-{i:05d}": (name, size, sha) for i, name, size, sha in written})
        return common.add_up(m["counts"] for m in maps), time.perf_counter() - t0
