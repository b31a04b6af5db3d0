"""Engines: how a job's tasks are submitted and ended, one package each."""

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
