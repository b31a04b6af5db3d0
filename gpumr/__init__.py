"""gpumr: image processing over Hadoop SequenceFiles on eight engines, each record on a free GPU or the CPU.

Its packages follow one record's path: :doc:`/concepts/record-path`."""

__version__ = "0.1.0"

#: The public contract of a user's workload (``from gpumr import Workload, Option``), imported on first use
#: so that importing any gpumr module stays cheap.
_PUBLIC = {"Workload": "gpumr.core.workload", "Option": "gpumr.core.workload", "BadRecord": "gpumr.core.badrecord"}


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'gpumr' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)


def _source_checkout():
    """In a source checkout, let ``gpumr.jobs``, ``gpumr.cuda`` and ``gpumr.conf`` be the top-level folders."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    folders = {f"{__name__}.{n}": os.path.join(root, n) for n in ("jobs", "cuda", "conf")}
    if any(os.path.isdir(os.path.join(here, n)) for n in ("jobs", "cuda", "conf")) or not all(
            os.path.isfile(os.path.join(f, "__init__.py")) for f in folders.values()):
        return  # installed: the subpackages are here

    class CheckoutFinder:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            folder = folders.get(fullname)
            if folder is None:
                return None
            return importlib.util.spec_from_file_location(fullname, os.path.join(folder, "__init__.py"),
                                                          submodule_search_locations=[folder])

    sys.meta_path.append(CheckoutFinder)


_source_checkout()
