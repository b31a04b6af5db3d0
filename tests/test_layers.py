"""The import rule of the design doc, held: each layer imports only itself and the layers below it.

Layers, bottom up (``../shared/DESIGN.md``, "Layers that keep promises"):
seqfile; the shared base (errors, sizes, limits, trusted paths, the error
boundary); the filesystem layer and outputs (io); the record-processing
core; CUDA launching (gpu); device choice (devices); the workloads; the
task runtime (tasks); the engines; the launcher (launch); the command line
and the mrjob jobs. Every ``import`` statement is read from the source,
those inside functions included; only a module's ``if __name__ ==
"__main__"`` block (its program entry, the command line's layer) is exempt.
"""

import ast
import functools
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = [
    ("seqfile",),
    ("gpumr", "gpumr.errors", "gpumr.sizes", "gpumr.limits", "gpumr.trusted", "gpumr.boundary"),
    ("gpumr.io",),
    ("gpumr.core",),
    ("gpumr.gpu",),
    ("gpumr.devices",),
    ("gpumr.faces", "gpumr.ct", "gpumr.blobs", "gpumr.watershed", "gpumr.workloads"),
    ("gpumr.tasks",),
    ("gpumr.engines",),
    ("gpumr.launch",),
    ("gpumr.cli", "gpumr.__main__", "gpumr.jobs"),
]


def layer(module):
    """The index of the layer holding ``module`` (the longest matching prefix), or None (not gpumr's)."""
    best = None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (i, len(name))
    return None if best is None else best[0]


def modules():
    """``(module name, path)`` of every Python file of seqfile, gpumr and jobs (installed as gpumr.jobs)."""
    for top in ("seqfile", "gpumr", "jobs"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    name = "gpumr." + name if name.startswith("jobs") else name
                    yield name[:-len(".__init__")] if name.endswith(".__init__") else name, path


def imports(module, path):
    """``(line, imported module)`` of every import in the file, outside its ``__main__`` block."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    exempt = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                getattr(node.test.left, "id", None) == "__name__":
            exempt.update(id(sub) for sub in ast.walk(node))
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def test_every_module_imports_only_its_layer_and_below():
    found = list(modules())
    assert len(found) > 100 and all(layer(m) is not None for m, _ in found), [m for m, _ in found if layer(m) is None]
    broken = [f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {target}"
              for module, path in found for line, target in imports(module, path)
              if layer(target) is not None and layer(target) > layer(module)]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("source, target, allowed", [
    ("gpumr.core.processor", "gpumr.devices.chooser", False),
    ("gpumr.core.workload", "gpumr.engines", False),
    ("gpumr.engines.dask", "gpumr.launch.job", False),
    ("gpumr.launch.plan", "gpumr.engines", True),
    ("gpumr.io.outputs", "gpumr.boundary", True),
    ("gpumr.tasks.runtime", "gpumr.cli", False),
])
def test_the_rule_itself(source, target, allowed):
    """The check tells a layer below from one above (so a broken rule would be seen)."""
    assert (layer(target) <= layer(source)) is allowed


@functools.lru_cache(maxsize=None)
def engine_lines():
    """``bench/engine_lines.py``, which says what a module of the engines' folder is (its family, shared or not)
    and counts its lines of code."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("engine_lines", os.path.join(ROOT, "bench", "engine_lines.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ENGINES = os.path.join(ROOT, "gpumr", "engines")


def engine_of(module):
    """The engine package ``module`` belongs to (``gpumr.engines.radical.pilot``: ``radical``), or None (a shared
    module of the engines, or not an engine module at all)."""
    prefix = "gpumr.engines."
    if not module.startswith(prefix):
        return None
    first = module[len(prefix):].split(".")[0]
    return first if os.path.isfile(os.path.join(ENGINES, first, "__init__.py")) else None


def shared_modules():
    """The engines' shared modules: the files directly in ``gpumr/engines/`` (its ``__init__`` aside)."""
    return sorted(f"gpumr.engines.{f[:-3]}" for f in os.listdir(ENGINES) if f.endswith(".py") and f != "__init__.py")


def test_an_engine_imports_no_other_engine():
    """Engines share only the engines' shared modules: an engine that took something from another (Flink took
    Spark's Py4J handling) would change with it."""
    from gpumr.engines import PACKAGES
    found = [(m, p) for m, p in modules() if engine_of(m)]
    assert {engine_of(m) for m, _ in found} == set(PACKAGES.values())
    broken = [f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {target}"
              for module, path in found for line, target in imports(module, path)
              if engine_of(target) not in (None, engine_of(module))]
    assert not broken, "\n".join(broken)


def test_a_shared_module_of_the_engines_serves_two_engines_at_least():
    """A module directly under ``gpumr/engines/`` is imported by two engine packages at least (directly, or through
    another shared module): what serves one engine lives in that engine's package."""
    shared = shared_modules()
    uses = {m: set() for m in shared}  # shared module -> the shared modules it imports
    users = {m: set() for m in shared}  # shared module -> the engines importing it directly
    for module, path in modules():
        for _, target in imports(module, path):
            hit = next((m for m in shared if target == m or target.startswith(m + ".")), None)
            if hit is None:
                continue
            if engine_of(module):
                users[hit].add(engine_of(module))
            elif module in uses:
                uses[module].add(hit)
    for module, path in modules():  # (the launcher hands engines the job's Start: a parameter, or job.start)
        if engine_of(module) and _given_start(path):
            users["gpumr.engines.start"].add(engine_of(module))
    changed = True
    while changed:  # (an engine importing a shared module uses what that module imports)
        changed = False
        for m, below in uses.items():
            for b in below:
                if not users[m] <= users[b]:
                    users[b] |= users[m]
                    changed = True
    lonely = {m: sorted(u) for m, u in users.items() if len(u) < 2}
    assert len(shared) >= 5 and not lonely, lonely


def _given_start(path):
    """Whether the code in ``path`` uses the :class:`gpumr.engines.start.Start` the launcher hands an engine: a
    parameter named ``start``, or ``job.start``."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.arg) and node.arg == "start":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "start" and getattr(node.value, "id", None) == "job":
            return True
    return False


@pytest.mark.parametrize("module, engine", [
    ("gpumr.engines.radical.pilot", "radical"), ("gpumr.engines.mrjob.job.MRWorkload", "mrjob"),
    ("gpumr.engines.jvm", None), ("gpumr.engines.mapreduce", None), ("gpumr.launch.job", None)])
def test_engine_of(module, engine):
    assert engine_of(module) == engine


def test_the_bench_scripts_import_only_what_exists():
    """A bench script names gpumr's functions by import: one that was renamed or removed breaks the script only
    when someone runs it (bench/spark_output.py imported two functions gone for a week)."""
    import glob
    import importlib.util
    missing = []
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "*.py"))):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("gpumr", "seqfile"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name) and not (
                            hasattr(module, "__path__") and importlib.util.find_spec(f"{node.module}.{alias.name}")):
                        missing.append(f"{os.path.basename(path)}:{node.lineno}: {node.module}.{alias.name}")
    assert not missing, "\n".join(missing)


def test_no_engine_module_holds_more_than_200_lines_of_code():
    """An engine holds only what differs between engines (issue 35's goal: at most 200 lines of code a module,
    counted as ``bench/engine_lines.py`` counts them: no blank line, comment or docstring)."""
    lines = engine_lines()
    counts = {name: lines.code_lines(source) for name, source in lines.modules().items() if not lines.shared(name)}
    assert len(counts) >= 6 and max(counts.values()) <= 200, counts
