"""Finding a workload: a built-in by name, an installed one by its entry point, a user's by ``MODULE:CLASS``.

``gpumr run NAME`` looks here; so does every task, by the :class:`Ref` the
launcher put in its spec. A user's module given as ``MODULE:CLASS`` (or
``path/to/file.py:CLASS``) is imported from the current folder or the path
given and shipped to the tasks by content; a module installed where the
tasks run (an entry point of the group :data:`GROUP`, or any importable
module) is imported there by name. How to write one: :doc:`/how-to/own-workload`.

Examples
--------
>>> find("faces").name
'faces'
>>> find("faces").ref
'gpumr.faces.workload:Faces'
"""

import importlib
import importlib.util
import os
import sys
from collections import namedtuple

from .core.workload import check_class
from .errors import GpumrError, printable

#: The built-in workloads, in the order ``gpumr run --help`` lists them.
BUILT_IN = {
    "faces": "gpumr.faces.workload:Faces",
    "backproject": "gpumr.ct.workload:Backproject",
    "blobs": "gpumr.blobs.workload:Blobs",
    "watershed": "gpumr.watershed.workload:Watershed",
}
#: The entry-point group through which an installed distribution offers workloads by name.
GROUP = "gpumr.workloads"
#: Names the built-ins keep (an entry point cannot take one).
NAMES = tuple(BUILT_IN)


class Ref(namedtuple("Ref", "name ref file how")):
    """Where a workload is: ``ref`` ``"module:Class"``; ``file`` the module's file when it is shipped to the tasks
    (a user's module found in the current folder or by path), else None; ``how`` says which, in words.

    Made by :func:`find`; a task imports it with :func:`load` (a shipped file by its path on that node).
    """

    __slots__ = ()

    @property
    def module(self):
        return self.ref.partition(":")[0]


def installed():
    """``{name: "module:Class"}`` of the workloads installed distributions offer (entry points of :data:`GROUP`)."""
    import importlib.metadata  # (here: 30 ms, paid only where installed workloads are looked up)
    found = {}
    try:
        points = importlib.metadata.entry_points(group=GROUP)
    except TypeError:  # Python 3.9: no selection by group
        points = importlib.metadata.entry_points().get(GROUP, ())
    for point in points:
        if point.name not in BUILT_IN:
            found.setdefault(point.name, point.value)
    return found


def names():
    """Every workload ``gpumr run NAME`` takes by name: the built-ins, then the installed ones."""
    return (*BUILT_IN, *sorted(installed()))


def find(spec):
    """The :class:`Ref` of the workload ``spec`` names: ``NAME``, ``MODULE:CLASS`` or ``FILE.py:CLASS``.

    Raises
    ------
    GpumrError
        One line: no such workload (naming the known ones), a module that
        does not import, a class that does not keep the contract.
    """
    if spec in BUILT_IN:
        ref = Ref(spec, BUILT_IN[spec], None, "built in")
    elif ":" not in spec:
        offered = installed()
        if spec not in offered:
            raise GpumrError(f"no workload {spec!r}: choose one of {', '.join(names())}, or give your own as "
                             "MODULE:CLASS (see gpumr run --help)")
        ref = Ref(spec, offered[spec], None, f"{offered[spec]}, installed (entry point of {GROUP}): imported where the "
                                            "tasks run, not shipped")
    else:
        ref = _user(spec)
    cls = load(ref)
    return ref._replace(name=cls.name)


def _user(spec):
    """The :class:`Ref` of ``MODULE:CLASS`` or ``FILE.py:CLASS``: a file found here is shipped, an installed module is not."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise GpumrError(f"{printable(spec)}: a workload of your own is MODULE:CLASS or FILE.py:CLASS")
    if where.endswith(".py"):
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise GpumrError(f"{printable(where)}: no such file (the module of workload {printable(spec)})")
        return Ref(attr, f"{os.path.basename(path)[:-3]}:{attr}", path, f"{printable(where)}, shipped to the tasks")
    if not all(part.isidentifier() for part in where.split(".")):
        raise GpumrError(f"{printable(where)}: not a module name (workload {printable(spec)})")
    here = os.path.join(os.getcwd(), *where.split(".")) + ".py"
    if os.path.isfile(here):  # a file here is the user's, shipped (even where this folder is on sys.path too)
        return Ref(attr, f"{where}:{attr}", here, f"{printable(os.path.relpath(here))}, shipped to the tasks")
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise GpumrError(f"no module {where!r} here or installed (workload {printable(spec)}); give the file as "
                         f"{where.replace('.', '/')}.py:{attr}, or install it")
    return Ref(attr, f"{where}:{attr}", None, f"module {where}, installed: imported where the tasks run, not shipped")


_LOADED = {}


def load(ref, file=None):
    """The workload class ``ref`` names, checked against the contract; ``file``: this node's copy of its module.

    A module shipped as a file is imported from ``file`` (or ``ref.file``)
    under its own name, once per process.
    """
    path = file or ref.file
    key = (ref.ref, path)
    cls = _LOADED.get(key)
    if cls is not None:
        return cls
    module_name, _, attr = ref.ref.partition(":")
    where = printable(ref.name if ref.file is None else ref.file)
    try:
        if path is not None:
            module = sys.modules.get(module_name)
            if getattr(module, "__file__", None) != path:
                spec = importlib.util.spec_from_file_location(module_name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except GpumrError:
        raise
    except Exception as exc:  # noqa: BLE001 (the user's module failing to import is one line)
        raise GpumrError(f"workload {where}: its module {module_name} does not import: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise GpumrError(f"workload {where}: module {module_name} has no {attr}")
    _LOADED[key] = check_class(cls, f"workload {ref.ref}")
    return _LOADED[key]


def get(name):
    """A new instance of the workload ``name`` (:func:`find`)."""
    return load(find(name))()
