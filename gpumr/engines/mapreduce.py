"""The map and reduce phases every task-pool engine shares (Spark, Dask, Flink, RADICAL-Pilot), its failure path and
the one line a framework's error becomes."""

import contextlib
import re

from ..errors import GpumrError, redact
from ..log import logger
from .base import Engine, Outcome

log = logger(__name__)
#: The last line of a Python traceback inside a framework error's text (a Java error's): "module.Type: message".
_PYTHON_ERROR = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*\n|\n)*?([A-Za-z_][\w.]*(?::[^\n]*)?)\n")
#: Errors whose message is meant for the user as it is: gpumr's and seqfile's error classes, by name (a traceback
#: names them with their module).
_USER_ERRORS = frozenset({"GpumrError", "Unavailable", "KeyRefused", "SequenceFileError", "RecordError",
                          "CodecError", "UsageError", "Untrusted"})


def one_line(exc, engine, fallback=None):
    """The one line a failed job of ``engine`` ends with, from the error ``exc`` its framework raised.

    Examples
    --------
    >>> text = ("An error occurred\\nTraceback (most recent call last):\\n  File \\"t.py\\", line 1\\n"
    ...         "gpumr.errors.GpumrError: frames.seq: not a SequenceFile\\n\\tat org.apache...\\n")
    >>> one_line(RuntimeError(text), "flink")
    'a task of the flink job failed: frames.seq: not a SequenceFile'
    >>> one_line(ValueError("bad value"), "dask")
    'a task of the dask job failed: ValueError: bad value'
    """
    if isinstance(exc, GpumrError):
        return str(exc)
    text = str(exc)
    found = _PYTHON_ERROR.search(text)
    if found:
        kind, _, message = found.group(1).partition(":")
        kind = kind.rsplit(".", 1)[-1]
        return redact(f"a task of the {engine} job failed: "
                      + (message.strip() if kind in _USER_ERRORS else f"{kind}:{message}"))
    if fallback:
        return redact(fallback)
    flat = " ".join(text.split())
    return redact(f"a task of the {engine} job failed: {type(exc).__name__}{': ' + flat[:300] if flat else ''}")


def add_up(counts):
    """The sum of several tasks' counters (``{counter: n}`` dicts)."""
    total = {}
    for part in counts:
        for name, n in part.items():
            total[name] = total.get(name, 0) + n
    return total


def call(phase, function, args, find=None, gpus=None):
    """One task, where it runs: ``function(*args)``; a map task is also told how to find the side files
    (``find(name)``: a path) and the GPUs the engine assigned it (None: given neither)."""
    if phase != "map":
        return function(*args)
    return function(*args, **{k: v for k, v in (("find", find), ("gpus", gpus)) if v is not None})


def answer(phase, function, args, find=None, gpus=None):
    """:func:`call`, its outcome as data for engines whose tasks send back only data (Flink, RADICAL-Pilot):
    ``{"value": v}``, or ``{"error": line}`` (the line the launcher ends the job with)."""
    from ..boundary import describe
    try:
        return {"value": call(phase, function, args, find, gpus)}
    except Exception as exc:  # noqa: BLE001 (the launcher ends the job with this line)
        return {"error": describe(exc)}


def answered(result):
    """The value of an :func:`answer`; its error raised as the job's one line."""
    if "error" in result:
        raise GpumrError(result["error"])
    return result["value"]


def map_reduce(plan, job, execute):
    """Run the plan's map tasks, then its reduce tasks, through ``execute``; the :class:`Outcome`.

    Parameters
    ----------
    plan : gpumr.launch.plan.Plan
    job : gpumr.engines.base.Job
    execute : callable
        ``execute(phase, function, calls)``, ``phase`` ``"map"`` or ``"reduce"``, ``calls`` a list of argument tuples:
        yields each task's result as it finishes."""
    from ..io.remote import locate
    from ..tasks import output  # (here: they import numpy, and an engine's package is loaded to start early)
    from ..tasks.items import input_bytes
    from ..tasks.runtime import BAD_NAMED, map_task, reduce_task
    spec, sort = plan.spec, plan.options.reducers > 0
    maps = []
    for result in execute("map", map_task, [(spec, i, items, sort) for i, items in enumerate(plan.tasks)]):
        job.progress.done(result["counts"], input_bytes(plan.tasks[result["index"]]))
        log.debug("map task %d done: %s", result["index"], result["counts"])
        maps.append(result)
    maps.sort(key=lambda m: m["index"])
    parts = output.finished_arrays(locate(spec.stage))
    if sort:
        runs = [(m["name"], m["sample"]) for m in maps]
        calls = [(spec, r, runs, low, high)
                 for r, (low, high) in enumerate(output.bounds([m["sample"] for m in maps], plan.options.reducers))]
        for r in execute("reduce", reduce_task, calls):
            log.debug("reduce task %d done", r["index"])
            parts[f"part-{r['index']:05d}"] = (r["name"], r["size"], r["sha"])
    else:
        parts.update({f"part-{m['index']:05d}": (m["name"], m["size"], m["sha"]) for m in maps})
    bad = [b for m in maps for b in m["bad"]][:BAD_NAMED]
    return Outcome(parts, add_up(m["counts"] for m in maps), bad)


class Pool:
    """One job's tasks on a framework, as a :class:`PoolEngine`'s session gives them."""

    def execute(self, phase, function, calls):
        """Run ``function(*args)`` for each of ``calls`` as a task of its own; yield each one's result as it ends."""
        raise NotImplementedError

    def end(self, exc):
        """End every task this pool started (the job failed with ``exc``, or was stopped); nothing by default."""

    def failure(self, exc):
        """The one line the job ends with for the framework's error ``exc`` (:func:`one_line`)."""
        return one_line(exc, self.engine)

    engine = "a pool"


class PoolEngine(Engine):
    """An engine that runs a plan as pools of Python tasks: map tasks, then reduce tasks (:func:`map_reduce`)."""

    reports_tasks = True

    def session(self, plan, job):
        """A context manager giving the job's :class:`Pool`; on leaving it, the framework's part is closed."""
        raise NotImplementedError

    def run(self, plan, job):
        with self.session(plan, job) as pool:
            try:
                return map_reduce(plan, job, pool.execute)
            except BaseException as exc:
                with contextlib.suppress(Exception):  # (a framework gone meanwhile runs no task)
                    pool.end(exc)
                if isinstance(exc, Exception) and not isinstance(exc, GpumrError):
                    raise GpumrError(pool.failure(exc)) from exc
                raise
