"""Engines: how a job's tasks are submitted and ended, one package each.

Everything else, the plan (:mod:`gpumr.launch`), the run skeleton and the
task runtime (:mod:`gpumr.tasks`), is shared. An engine is an
:class:`~gpumr.engines.base.Engine` (its name, declared options, where its
tasks run, ``run``) in a package ``gpumr.engines.NAME``; those that run a
pool of Python tasks (Spark, Dask, Flink, RADICAL-Pilot) give only a
session of a :class:`~gpumr.engines.mapreduce.Pool` and share the map and
reduce phases, the failure path and the one line
(:mod:`.mapreduce`). Every framework process starts through
:mod:`.start`; what engines do around the processes they start is
:mod:`.processes`, and what the two on a JVM (Spark, Flink) share is
:mod:`.jvm`; mrjob's runners (inline, local, Hadoop, EMR) run the same task
runtime inside an mrjob job (:mod:`.mrjob`).

Adding an engine is one package here and its name in :data:`PACKAGES`. A
module directly under ``engines/`` serves two engines at least, and no
engine imports another engine's package (``tests/test_layers.py`` holds
both rules).
"""

import importlib

#: ``--engine NAME`` -> the package that holds it (imported when used; each imports its framework lazily).
PACKAGES = {
    "inline": "mrjob", "local": "mrjob", "hadoop": "mrjob", "emr": "mrjob",
    "spark": "spark", "dask": "dask", "radical": "radical", "flink": "flink",
}
NAMES = tuple(PACKAGES)


def get(name):
    """The engine ``--engine NAME`` names (:class:`gpumr.engines.base.Engine`)."""
    from ..errors import GpumrError
    if name not in PACKAGES:
        raise GpumrError(f"--engine {name}: choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{PACKAGES[name]}").engine(name)


def all_engines():
    """Every engine, in the order ``--engine`` lists them."""
    return [get(name) for name in NAMES]
