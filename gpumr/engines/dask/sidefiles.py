"""Side files to a running Dask cluster's workers (``--scheduler``): streamed a chunk at a time under their content
names, kept by each worker for the next job, fetched from another worker by one that joins later."""

import contextlib
import functools
import hashlib
import os
import secrets
import threading
import time

from seqfile.atomic import AtomicFile

from ...errors import GpumrError

#: Bytes of a side file sent in one message (the fastest of those tried: docs/lab-notes/code-figures.rst).
CHUNK = 8 << 20
#: Seconds between two looks for a worker, while a running cluster has none yet.
WORKER_POLL = 0.5
#: What a call into the cluster that does not answer is said to be.
WHAT = "the Dask scheduler"

_shipping = {}  # (on a worker) token -> (AtomicFile, hash, name, size): the copies being received
_fetching = threading.Lock()  # (on a worker) one task at a time fetches a missing copy from another worker


def ship(client, sides, timeout):
    """Put every side file of ``sides`` (:class:`gpumr.launch.ship.SideFile`) on the cluster's workers; the tasks'
    ``find(name)`` (:func:`found`, told which workers hold each file). Raises ``GpumrError``: no worker took the
    file's copy, or the scheduler did not answer."""
    workers = _workers(client, timeout)
    holders = {}
    for side in sides:
        held = bounded(lambda: client.run(_holds, side.name, side.size, workers=workers, on_error="return"),
                       timeout, WHAT)
        have = [w for w, ok in held.items() if ok is True]
        missing = [w for w, ok in held.items() if ok is False]
        errors = [f"{type(ok).__name__}: {ok}" for ok in held.values() if isinstance(ok, BaseException)]
        if missing:
            sent, failed = _send(client, side, missing, timeout)
            have, errors = have + sent, errors + failed
        if not have:
            raise GpumrError(f"{side.option}: no worker of the Dask cluster could take its copy"
                             f"{' (' + errors[0][:200] + ')' if errors else ''}")
        holders[side.name] = (side.size, have)
    return functools.partial(found, holders)


def _workers(client, timeout):
    """The addresses of the cluster's workers, once it has one."""
    while True:
        workers = list(bounded(client.scheduler_info, timeout, WHAT).get("workers") or ())
        if workers:
            return workers
        time.sleep(WORKER_POLL)


def _send(client, side, workers, timeout):
    """Stream ``side`` to ``workers``; ``(workers that published their copy, their errors)``."""
    token = secrets.token_hex(8)
    errors = []

    def keep(answers):
        errors.extend(f"{type(a).__name__}: {a}" for a in answers.values() if isinstance(a, BaseException))
        return [w for w, a in answers.items() if a is True]
    try:
        workers = keep(bounded(lambda: client.run(_begin, side.name, side.size, token, workers=workers,
                                                  on_error="return"), timeout, WHAT))
        with open(side.path, "rb") as f:  # (the launcher's own copy, in the job's folder)
            while workers:
                data = f.read(CHUNK)
                if not data:
                    break
                workers = keep(bounded(lambda: client.run(_append, token, data, workers=workers, on_error="return"),
                                       timeout, WHAT))
        if workers:
            workers = keep(bounded(lambda: client.run(_commit, token, workers=workers, on_error="return"),
                                   timeout, WHAT))
        return workers, errors
    finally:  # (a copy left unfinished by a failure or a Ctrl-C, or on a worker passed over: dropped)
        with contextlib.suppress(Exception):  # (a Ctrl-C meanwhile still stops the job)
            bounded(lambda: client.run(_abort, token, on_error="return"), timeout, WHAT)


# -- on a worker ------------------------------------------------------------------------------------------------


def _digest(name):
    """The content name's SHA-256 prefix (``<24 hex digits>-<file name>``)."""
    return name.partition("-")[0]


def _complete(path, size):
    return os.path.isfile(path) and os.path.getsize(path) == size


def _holds(name, size, dask_worker=None):
    """Whether this worker holds a published copy of ``name`` (published copies were checked whole)."""
    return _complete(os.path.join(dask_worker.local_directory, name), size)


def _begin(name, size, token, dask_worker=None):
    _shipping[token] = (AtomicFile(os.path.join(dask_worker.local_directory, name), replace=False),
                        hashlib.sha256(), name, size)
    return True


def _append(token, data, dask_worker=None):
    atomic, digest, _, _ = _shipping[token]
    atomic.file.write(data)
    digest.update(data)
    return True


def _commit(token, dask_worker=None):
    atomic, digest, name, size = _shipping.pop(token)
    _publish(atomic, digest, name, size)
    return True


def _abort(token, dask_worker=None):
    entry = _shipping.pop(token, None)
    if entry is not None:
        entry[0].abort()


def _publish(atomic, digest, name, size):
    """Give the received copy its name if it is whole: ``size`` bytes whose SHA-256 the name holds."""
    try:
        got = atomic.file.tell()
        if got != size or not digest.hexdigest().startswith(_digest(name)):
            raise GpumrError(f"the shipped file {name} arrived as {got} bytes that do not match its content name "
                             f"({size} bytes)")
        atomic.commit()
    except FileExistsError:  # (another job published the same content meanwhile: the same bytes, by its name)
        atomic.abort()
    except BaseException:
        atomic.abort()
        raise


def _read(name, offset, n, dask_worker=None):
    """``n`` bytes of this worker's copy of ``name`` from ``offset`` (a worker that lacks it asks)."""
    with open(os.path.join(dask_worker.local_directory, name), "rb") as f:
        f.seek(offset)
        return f.read(n)


def found(holders, name):
    """This worker's copy of the shipped file ``name``: the one the launcher sent, or, on a worker that joined after
    that, one fetched now from a worker that holds it (``holders``: name -> (size, their addresses)). Raises
    ``GpumrError``: no worker that held the file could send it."""
    from distributed import get_client, get_worker
    worker = get_worker()
    path = os.path.join(worker.local_directory, name)
    size, peers = holders[name]
    if _complete(path, size):
        return path
    with _fetching:
        if _complete(path, size):
            return path
        errors = []
        for peer in (p for p in peers if p != worker.address):
            try:
                _fetch(get_client(), peer, path, name, size)
                return path
            except Exception as exc:  # noqa: BLE001 (the next holder, else said below)
                errors.append(f"{peer}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
        raise GpumrError(f"the shipped file {name} is not on this Dask worker ({worker.address}), and no worker "
                         f"that held it could send it{' (' + errors[0] + ')' if errors else ''}")


def _fetch(client, peer, path, name, size):
    """Copy ``name`` from worker ``peer`` to ``path``, a chunk at a time."""
    atomic, digest = AtomicFile(path, replace=False), hashlib.sha256()
    try:
        while atomic.file.tell() < size:
            data = client.run(_read, name, atomic.file.tell(), CHUNK, workers=[peer])[peer]
            if not data:
                break
            atomic.file.write(data)
            digest.update(data)
    except BaseException:
        atomic.abort()
        raise
    _publish(atomic, digest, name, size)


def bounded(call, timeout, what):
    """``call()`` given at most ``timeout`` seconds, else one line: ``what`` did not answer.

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
