"""Engines: how a job's tasks are submitted and ended, one small module each.

Everything else, the plan (:mod:`gpumr.launch`), the run skeleton and the
task runtime (:mod:`gpumr.tasks`), is shared. An engine is an
:class:`~gpumr.engines.base.Engine`: its own options and its ``run(plan,
job)``. Those that run a pool of Python tasks (Spark, Dask, Flink,
RADICAL-Pilot) share the map and reduce phases (:mod:`.mapreduce`);
what engines do around the processes they start is :mod:`.processes`, and
what the two on a JVM (Spark, Flink) share is :mod:`.jvm`;
mrjob's runners (inline, local, Hadoop, EMR) run the same task runtime
inside an mrjob job (:mod:`.mrjob`).
Adding an engine is one module here (or a few, named ``NAME_*``) and its
name in :data:`MODULES`; an engine imports no other engine's modules.
"""

import importlib

#: ``--engine NAME`` -> the module that holds it (imported when used; each imports its framework lazily).
MODULES = {
    "inline": "mrjob", "local": "mrjob", "hadoop": "mrjob", "emr": "mrjob",
    "spark": "spark", "dask": "dask", "radical": "radical", "flink": "flink",
}
NAMES = tuple(MODULES)


def get(name):
    """The engine ``--engine NAME`` names (:class:`gpumr.engines.base.Engine`)."""
    from ..errors import GpumrError
    if name not in MODULES:
        raise GpumrError(f"--engine {name}: choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{MODULES[name]}").engine(name)


def all_engines():
    """Every engine, in the order ``--engine`` lists them."""
    return [get(name) for name in NAMES]
