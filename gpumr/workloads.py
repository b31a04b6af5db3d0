"""The registry of workloads: name -> :class:`gpumr.core.declare.Declaration`.

``gpumr run NAME``, the mrjob job classes (``jobs/``) and the Spark and Dask
engines find a workload here, by name; nothing in gpumr imports ``jobs/``.
"""

from .errors import GpumrError

#: Workload names, in the order ``gpumr run --help`` lists them.
NAMES = ("faces", "backproject")


def get(name):
    """The declaration of workload ``name``; GpumrError naming the known ones otherwise."""
    if name == "faces":
        from .faces.workload import DECLARATION
    elif name == "backproject":
        from .ct.workload import DECLARATION
    else:
        raise GpumrError(f"no workload {name!r}: choose one of {', '.join(NAMES)}")
    return DECLARATION
