"""The map and reduce phases every task-pool engine shares (Spark, Dask): what runs where, and what comes back.

An engine gives ``execute(phase, function, calls)``: run ``function(*args)``
for each of ``calls`` as its own task, and yield each task's return value
as it finishes (any order); on a failure raise, having ended every task.
Here: one map task per task of the plan (:func:`gpumr.tasks.runtime.map_task`,
a sorted run when there are reducers), then ``--reducers`` reduce tasks
merging the runs over ranges of keys cut at the runs' sampled keys
(:func:`gpumr.tasks.runtime.reduce_task`). Each task writes a file of its
own attempt into the stage and returns its name; only returned attempts are
published, with their counters, so every record comes out exactly once.
"""

from ..boundary import logger
from ..tasks import output
from ..tasks.runtime import BAD_NAMED, map_task, reduce_task
from .base import Outcome

log = logger(__name__)


def add_up(counts):
    """The sum of several tasks' counters (``{counter: n}`` dicts)."""
    total = {}
    for part in counts:
        for name, n in part.items():
            total[name] = total.get(name, 0) + n
    return total


def task_bytes(items):
    """Input bytes a map task's items cover (0 for planned records)."""
    return sum((end or 0) - start for kind, *rest in items if kind == "split" for _, start, end in [rest])


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


def map_reduce(plan, job, execute):
    """Run the plan's map tasks, then its reduce tasks, through ``execute``; the :class:`Outcome`.

    Parameters
    ----------
    plan : gpumr.launch.plan.Plan
    job : gpumr.engines.base.Job
    execute : callable
        ``execute(phase, function, calls)``, ``phase`` ``"map"`` or
        ``"reduce"``, ``calls`` a list of argument tuples: yields each
        task's result as it finishes.
    """
    spec, sort = plan.spec, plan.o.reducers > 0
    maps = []
    for result in execute("map", map_task, [(spec, i, items, sort) for i, items in enumerate(plan.tasks)]):
        job.progress.done(result["counts"], task_bytes(plan.tasks[result["index"]]))
        log.debug("map task %d done: %s", result["index"], result["counts"])
        maps.append(result)
    maps.sort(key=lambda m: m["index"])
    parts = {name: (staged, size, sha) for m in maps for name, staged, size, sha in m["arrays"]}
    if sort:
        runs = [(m["name"], m["sample"]) for m in maps]
        calls = [(spec, r, runs, low, high)
                 for r, (low, high) in enumerate(output.bounds([m["sample"] for m in maps], plan.o.reducers))]
        for r in execute("reduce", reduce_task, calls):
            log.debug("reduce task %d done", r["index"])
            parts[f"part-{r['index']:05d}"] = (r["name"], r["size"], r["sha"])
    else:
        parts.update({f"part-{m['index']:05d}": (m["name"], m["size"], m["sha"]) for m in maps})
    bad = [b for m in maps for b in m["bad"]][:BAD_NAMED]
    return Outcome(parts, add_up(m["counts"] for m in maps), bad)
