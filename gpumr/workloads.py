"""Finding a workload: a built-in by name, an installed one by its entry point, a user's by ``MODULE:CLASS``.

How to write one: :doc:`/how-to/own-workload`.

Examples
--------
>>> find("faces").name
'faces'
>>> find("faces").ref
'gpumr.faces.workload:Faces'
"""

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections import namedtuple

from . import trusted
from .core.workload import check_class
from .errors import GpumrError, did_you_mean, printable
from .log import logger

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
    """Where a workload is: ``ref`` ``"module:Class"``; ``file`` the module's file when it is shipped to the tasks (a
    user's module found in the current folder or by path), else None; ``how`` says which, in words."""

    __slots__ = ()

    @property
    def module(self):
        return self.ref.partition(":")[0]


def installed():
    """``{name: "module:Class"}`` of the workloads installed distributions offer (entry points of :data:`GROUP`)."""
    import importlib.metadata  # (here: 30 ms, paid only where installed workloads are looked up)
    try:
        if sys.version_info >= (3, 10):
            points = importlib.metadata.entry_points(group=GROUP)
        else:  # (no selection by group)
            points = importlib.metadata.entry_points().get(GROUP, ())
    except Exception:  # noqa: BLE001 (a distribution's entry points do not parse: each on its own, to name it)
        points = _readable_points(importlib.metadata.distributions())
    found = {}
    for point in points:
        if point.name not in BUILT_IN:
            found.setdefault(point.name, point.value)
    return found


def _readable_points(dists):
    """The entry points of :data:`GROUP` of every distribution of ``dists`` whose metadata can be read, the first
    of each name only (as ``entry_points()`` has it); each other one is named in a warning."""
    points, seen = [], set()
    for dist in dists:
        try:
            key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
            if key not in seen:
                seen.add(key)
                points += [p for p in dist.entry_points if p.group == GROUP]
        except Exception as exc:  # noqa: BLE001 (another distribution's broken metadata is not gpumr's to fix)
            _warn_broken(dist, exc)
    return points


_BROKEN = set()


def _warn_broken(dist, exc):
    """Say once per process that the installed distribution ``dist`` is passed over, and why."""
    where = getattr(dist, "_path", None)  # (its .dist-info folder, where it has one)
    try:
        name = dist.metadata["Name"]
    except Exception:  # noqa: BLE001 (metadata a broken distribution cannot give: it is named by path)
        name = None
    shown = " ".join(printable(str(part)) for part in (name, where and f"({where})") if part) or "(unnamed)"
    if shown not in _BROKEN:
        _BROKEN.add(shown)
        logger(__name__).warning("passing over the installed distribution %s: its entry points cannot be read "
                                 "(%s: %s)", shown, type(exc).__name__, " ".join(str(exc).split())[:200])


def names():
    """Every workload ``gpumr run NAME`` takes by name: the built-ins, then the installed ones."""
    return (*BUILT_IN, *sorted(installed()))


def find(spec):
    """The :class:`Ref` of the workload ``spec`` names: ``NAME``, ``MODULE:CLASS`` or ``FILE.py:CLASS``. Raises
    ``GpumrError``: one line: no such workload (naming the known ones), a module that does not import, a class that
    does not keep the contract."""
    if spec in BUILT_IN:
        ref = Ref(spec, BUILT_IN[spec], None, "built in")
    elif ":" not in spec:
        offered = installed()
        if spec not in offered:
            raise GpumrError(f"no workload {spec!r}{did_you_mean(spec, names())}: choose one of {', '.join(names())}, "
                             "or give your own as MODULE:CLASS (see gpumr run --help)")
        ref = Ref(spec, offered[spec], None, f"{offered[spec]}, installed (entry point of {GROUP}): imported where the "
                                            "tasks run, not shipped")
    else:
        ref = _user(spec)
    try:
        cls = load(ref)
    except GpumrError as exc:
        unused = _unused_here(*spec.rsplit(":", 1)) if ":" in spec and ref.file is None else ""
        if not unused:
            raise
        raise GpumrError(f"{exc}{unused}") from None
    return ref._replace(name=cls.name)


#: The largest module file of a user's workload gpumr reads.
MAX_MODULE_BYTES = 16 << 20
#: A user's module is loaded under this prefix, its file's stem and its content's hash
#: (``_gpumr_workload_sharp_1f2e...``): never under a name that another module has or could have.
MODULE_PREFIX = "_gpumr_workload_"


def _user(spec):
    """The :class:`Ref` of ``MODULE:CLASS`` or ``FILE.py:CLASS``."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise GpumrError(f"{printable(spec)}: a workload of your own is MODULE:CLASS or FILE.py:CLASS")
    if where.endswith(".py"):
        path = os.path.abspath(where)
        _source(path, f"workload {spec}")
        return Ref(attr, f"{os.path.basename(path)[:-3]}:{attr}", path, f"{printable(where)}, shipped to the tasks")
    if not all(part.isidentifier() for part in where.split(".")):
        raise GpumrError(f"{printable(where)}: not a module name (workload {printable(spec)})")
    if _installed(where):
        return Ref(attr, f"{where}:{attr}", None,
                   f"module {where}, installed: imported where the tasks run, not shipped{_unused_here(where, attr)}")
    here = _here(where)
    if not os.path.lexists(here):
        raise GpumrError(f"no module {where!r} here or installed (workload {printable(spec)}); give the file as "
                         f"{where.replace('.', '/')}.py:{attr}, or install it")
    _source(here, f"workload {spec}")
    return Ref(attr, f"{where}:{attr}", here, f"{printable(os.path.relpath(here))}, shipped to the tasks")


def _here(module):
    """The file of ``module`` in the current folder (``a.b``: ``a/b.py``)."""
    return os.path.join(os.getcwd(), *module.split(".")) + ".py"


def _unused_here(module, attr):
    """What to say of a file of ``module`` in the current folder that an installed module of that name hides."""
    if not os.path.lexists(_here(module)):
        return ""
    shown = printable(os.path.relpath(_here(module)))
    return f" ({shown} here is not used: an installed module comes first; run the file as {shown}:{attr})"


def _source(path, what):
    """The source of a user's module file ``path``, read under the trusted-paths rule; one line if it cannot be."""
    try:
        return trusted.read_code(path, MAX_MODULE_BYTES, what="a workload module")
    except FileNotFoundError:
        raise GpumrError(f"{printable(path)}: no such file (the module of {printable(what)})") from None
    except OSError as exc:
        raise GpumrError(f"{printable(path)}: cannot read it ({exc.strerror or exc}; the module of "
                         f"{printable(what)})") from None


def _installed(module):
    """Whether ``module`` can be imported without the current folder (installed, or on ``PYTHONPATH``)."""
    top, *rest = module.split(".")
    found = _find_top(top)
    for i in range(len(rest)):
        locations = list(getattr(found, "submodule_search_locations", None) or ())
        found = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[:i + 1]]), locations) if locations \
            else None
    return found is not None


def _find_top(name):
    """The spec of top-level module ``name`` as the import system finds it, the current folder left out."""
    if name in sys.modules:
        return getattr(sys.modules[name], "__spec__", None) or importlib.machinery.ModuleSpec(name, None)
    here = os.path.realpath(os.getcwd())
    path = [p for p in sys.path if os.path.realpath(p or ".") != here]
    for finder in sys.meta_path:
        try:
            found = finder.find_spec(name, path if finder is importlib.machinery.PathFinder else None)
        except Exception:  # noqa: BLE001 (a finder that fails, or has no find_spec, finds nothing)
            found = None
        if found is not None:
            return found
    return None


_LOADED = {}


def load(ref, file=None):
    """The workload class ``ref`` names, checked against the contract; ``file``: this node's copy of its module."""
    path = file or ref.file
    key = (ref.ref, path)
    cls = _LOADED.get(key)
    if cls is not None:
        return cls
    module_name, _, attr = ref.ref.partition(":")
    where = printable(ref.name if ref.file is None else ref.file)
    try:
        if path is not None:
            module = _run_module(module_name, path, _shipped(path) if file else _source(path, f"workload {ref.ref}"))
        else:
            module = _import(module_name)
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


def _import(name):
    """Import the installed module ``name``, its top-level package found as :func:`_installed` finds it: never a
    same-named file of the current folder, even where that folder is on ``sys.path`` (``python -m``, a task started in
    the launcher's folder)."""
    top = name.partition(".")[0]
    if top not in sys.modules:
        spec = _find_top(top)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {top!r} outside the current folder")
        module = importlib.util.module_from_spec(spec)
        sys.modules[top] = module
        try:
            if spec.loader is not None:
                spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(top, None)
            raise
    return importlib.import_module(name)  # (a submodule is found in its package's folders, not on sys.path)


def _shipped(path):
    """The source of a module's copy the launcher shipped to this node (a link where the framework makes one)."""
    with open(path, "rb") as f:
        return f.read()


def _run_module(module_name, path, source):
    """The module made by running ``source`` (the file ``path``'s) under a name of its own, kept in ``sys.modules``
    (the module's own classes, dataclasses and pickles look it up there); the same source is run once."""
    stem = re.sub(r"\W", "_", module_name.rpartition(".")[2], flags=re.ASCII)
    name = f"{MODULE_PREFIX}{stem}_{hashlib.sha256(source).hexdigest()[:16]}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    module.__file__ = path
    sys.modules[name] = module
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def get(name):
    """A new instance of the workload ``name`` (:func:`find`)."""
    return load(find(name))()
