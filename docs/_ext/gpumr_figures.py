"""The documentation's pictures, made at build time by gpumr's own commands and from its code and benchmarks.

Nothing here is a screenshot or a committed picture that could go stale:

* ``contact_sheet`` (a JPEG: photographs): ``gpumr sample``, ``gpumr pack``, ``gpumr run faces``
  and ``gpumr faces render``, as Getting started runs them;
* ``ct_preview``: ``gpumr ct geometry``, ``ct phantom``, ``gpumr run
  backproject`` and ``gpumr ct assemble --preview`` (the PNG that command writes);
* ``seqfile_layout``: the byte layout of a SequenceFile that ``gpumr pack``
  wrote, read back with :class:`seqfile.Reader` (offsets from the file);
* ``record_path``: a record's path through the layers, each box naming the
  module that does the step (a module that no longer exists fails the build);
* ``architecture``: gpumr's packages and what imports what, read from the
  source with :mod:`ast` (arrows to what is reachable anyway are left out);
* ``scaling``: the engines' run times and scaling efficiency from
  ``bench/results/scaling.json``, which ``bench/scaling.py --json`` writes;
* any ``bench/results/NAME.png`` a benchmark wrote (``breakdown``, from
  ``bench/breakdown.py``) is shown by ``.. gpumr-figure:: NAME`` with
  ``:optional:``, and left out while it does not exist.

The figures go to ``docs/_generated/`` (not committed), each written whole
under a temporary name and then renamed; a page shows one with
``.. gpumr-figure:: NAME`` (the options of ``figure``). Commands run in a
temporary folder with the installed ``gpumr`` (``python -m gpumr``), as a
user runs them; one that fails fails the build, with its output.
"""

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from docutils.parsers.rst import directives
from sphinx.directives.patches import Figure
from sphinx.errors import ExtensionError
from sphinx.util import logging

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.dirname(HERE)
ROOT = os.path.dirname(DOCS)
OUT = os.path.join(DOCS, "_generated")
BENCH_RESULTS = os.path.join(ROOT, "bench", "results")


# -- running gpumr -----------------------------------------------------------------------------------
def gpumr(work, *args):
    """Run ``gpumr ARGS`` (the installed command) in folder ``work``; its output, or the build fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMR_")}
    env["PYTHONPATH"] = ""  # the installed gpumr, as a user runs it (conf.py puts the checkout first for autodoc)
    proc = subprocess.run([sys.executable, "-m", "gpumr", "-q", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode:
        raise ExtensionError(f"docs figure: `gpumr {' '.join(args)}` failed ({proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def publish(src, name, ext=".png"):
    """Move the file ``src`` to ``_generated/NAME.EXT`` (renamed over any earlier one: never half written)."""
    os.makedirs(OUT, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=ext, dir=OUT)
    os.close(fd)
    os.replace(src, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(OUT, name + ext))


def as_jpeg(png, quality=85):
    """``png`` re-encoded as a JPEG beside it (photographs: a tenth of the bytes on the page); its path."""
    import cv2
    out = os.path.splitext(png)[0] + ".jpg"
    cv2.imwrite(out, cv2.imread(png), [cv2.IMWRITE_JPEG_QUALITY, quality])
    return out


def save(fig, name):
    """Write the matplotlib figure ``fig`` as ``_generated/NAME.png``."""
    import matplotlib.pyplot as plt
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".png", dir=OUT)
    os.close(fd)
    fig.savefig(tmp, dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(OUT, name + ".png"))


# -- figures made by gpumr's commands ----------------------------------------------------------------
def faces_figures(work):
    """The contact sheet of Getting started's first job, and the byte layout of the file it packed."""
    gpumr(work, "sample", "-n", "12", "frames/")
    gpumr(work, "pack", "frames/", "-o", "frames.seq", "--shards", "2")
    gpumr(work, "run", "faces", "frames.seq", "-o", "faces/", "--device", "cpu")
    gpumr(work, "faces", "render", "faces/", "--images", "frames.seq", "-d", "pictures/")
    publish(as_jpeg(os.path.join(work, "pictures", "contact_sheet.png")), "contact_sheet", ".jpg")
    gpumr(work, "sample", "-n", "3", "three/")
    gpumr(work, "pack", "three/", "-o", "three.seq")
    seqfile_layout(os.path.join(work, "three.seq"))


def ct_figure(work):
    """``gpumr ct assemble``'s preview of a reconstruction of the phantom (64^3 from 96 projections)."""
    gpumr(work, "ct", "geometry", "-o", "scan.json", "--voxels", "64", "--angles", "96")
    gpumr(work, "ct", "phantom", "--geometry", "scan.json", "-o", "scan.seq")
    gpumr(work, "run", "backproject", "--projections", "scan.seq", "--slab", "16", "-o", "ct-out/", "--device", "cpu")
    gpumr(work, "ct", "assemble", "ct-out/", "-o", "volume.npy", "--preview", "volume.png")
    publish(os.path.join(work, "volume.png"), "ct_preview")


def seqfile_layout(path):
    """The parts of the SequenceFile ``path`` in file order, with their byte ranges, read back from the file."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    import seqfile
    data = open(path, "rb").read()
    records = list(seqfile.Reader(path))  # a record's offset is where it starts, its sync entry included
    escape = b"\xff\xff\xff\xff"
    parts = [("header", f"SEQ 6, key/value classes,\ncodec, metadata, sync\nbytes 0-{records[0].offset - 1}", 0,
              records[0].offset, "#c7d7f0")]  # (label, detail, start, end, colour)
    for i, r in enumerate(records):
        start = r.offset
        end = records[i + 1].offset if i + 1 < len(records) else len(data)
        if data[start:start + 4] == escape:
            parts.append(("sync", f"-1, then the\n16-byte marker\n{start:,}-{start + 19:,}", start, start + 20,
                          "#f3c98b"))
            start += 20
        parts.append((f"record {i}", f"lengths, key \"{r.key}\",\nvalue {len(r.value):,} bytes\n"
                                     f"{start:,}-{end - 1:,}", start, end, "#cfe8cf"))
    fig, ax = plt.subplots(figsize=(10, 2.6))
    x = 0
    widths = {"header": 2.2, "sync": 1.6}
    for label, detail, start, end, colour in parts:
        w = widths.get(label, 2.8)
        ax.add_patch(FancyBboxPatch((x + 0.04, 0.1), w - 0.08, 0.8, boxstyle="round,pad=0.0,rounding_size=0.08",
                                    facecolor=colour, edgecolor="#555"))
        ax.text(x + w / 2, 0.68, label, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(x + w / 2, 0.36, detail, ha="center", va="center", fontsize=7.5, linespacing=1.3)
        x += w
    ax.set_xlim(0, x)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(f"{os.path.basename(path)} as gpumr pack wrote it: {len(data):,} bytes, {len(records)} records; "
                 "a sync entry once 100 KB have passed (boxes not to scale)", fontsize=10)
    save(fig, "seqfile_layout")


# -- figures drawn from the code ---------------------------------------------------------------------
def _module_exists(name):
    """Whether ``name`` is a module or package of the checkout (``gpumr.io.records``, ``seqfile``)."""
    base = os.path.join(ROOT, *name.split("."))
    if name.startswith("gpumr.jobs"):
        base = os.path.join(ROOT, "jobs", *name.split(".")[2:])
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


#: A record's path: (step, what it is, the modules that do it). Checked against the checkout at build time.
RECORD_PATH = [
    ("input split", "byte range of a\nSequenceFile", ["seqfile", "gpumr.io.records"]),
    ("(key, bytes)", "one record (broken\nframing: a lost\nrange, named)", ["seqfile.reader"]),
    ("decode", "size caps first,\nthen the image", ["gpumr.core.images", "gpumr.ct.projections"]),
    ("choose device", "a free GPU now,\nelse the CPU", ["gpumr.devices.chooser", "gpumr.devices.leases"]),
    ("CPU or GPU", "the workload's\nsame function\non either", ["gpumr.core.processor", "gpumr.tasks.device"]),
    ("result or error", "one per record,\ncounted", ["gpumr.core.counters", "gpumr.tasks.runtime"]),
    ("output line", "\"key\"<TAB>{json}\nin a part file", ["gpumr.tasks.output", "gpumr.io.outputs"]),
]
#: The layers every step goes through: (name, promise, module).
LAYERS = [
    ("filesystem", "local paths, s3://, hdfs://, file://; secrets in URIs refused", "gpumr.io.remote"),
    ("output transaction", "staged hidden, published whole; only gpumr's own replaced", "gpumr.io.outputs"),
    ("error boundary", "one redacted line, exit 1; Ctrl-C: 130; nothing left", "gpumr.boundary"),
    ("trusted paths", "state, code, config only from folders yours or root's", "gpumr.trusted"),
]


def record_path():
    """The record's path through the layers (a diagram drawn with matplotlib)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    missing = [m for _, _, mods in RECORD_PATH for m in mods if not _module_exists(m)] + \
              [m for _, _, m in LAYERS if not _module_exists(m)]
    if missing:
        raise ExtensionError(f"docs figure record_path names modules the code no longer has: {missing} "
                             "(docs/_ext/gpumr_figures.py, RECORD_PATH and LAYERS)")
    per_row, w, gap, h = 4, 2.0, 0.45, 1.25
    rows = -(-len(RECORD_PATH) // per_row)
    right = per_row * (w + gap) - gap
    layers_top = 1.9
    pitch = 3.0
    top = layers_top + rows * pitch - 0.1
    fig, ax = plt.subplots(figsize=(9, top * 0.8))
    centres = []
    for i, (step, what, mods) in enumerate(RECORD_PATH):
        r, c = divmod(i, per_row)
        x, y = c * (w + gap), top - 0.55 - (r + 1) * pitch + 2.0
        centres.append((x, y))
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.1",
                                    facecolor="#dbe8fb", edgecolor="#2757dd", linewidth=1.2))
        ax.text(x + w / 2, y + h - 0.3, step, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x + w / 2, y + 0.45, what, ha="center", va="center", fontsize=8.5, linespacing=1.2)
        ax.text(x + w / 2, y - 0.12, "\n".join(mods), ha="center", va="top", fontsize=7.8, family="monospace",
                color="#444")
    for i in range(1, len(centres)):
        (x0, y0), (x1, y1) = centres[i - 1], centres[i]
        if y0 == y1:
            a, b = (x0 + w + 0.03, y0 + h / 2), (x1 - 0.03, y1 + h / 2)
        else:  # on to the next row: out of the row's last box, along between the rows, down into the next row's first
            mid, into = y1 + h + 0.8, x1 + w * 0.25
            ax.plot([x0 + w + 0.03, x0 + w + 0.22, x0 + w + 0.22, into], [y0 + h / 2, y0 + h / 2, mid, mid],
                    color="#2757dd", linewidth=1.3)
            a, b = (into, mid), (into, y1 + h + 0.03)
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=13, color="#2757dd"))
    # GPU error -> rerun on the CPU: a loop over the "CPU or GPU" box.
    gx, gy = centres[4]
    ax.add_patch(FancyArrowPatch((gx + w * 0.95, gy + h + 0.02), (gx + w * 0.55, gy + h + 0.02),
                                 connectionstyle="arc3,rad=1.0", arrowstyle="-|>", mutation_scale=11, color="#c0392b",
                                 linestyle="--"))
    ax.text(gx + w + 0.02, gy + h + 0.12, "GPU error:\nrerun on the CPU", ha="left", va="bottom", fontsize=8.5,
            color="#c0392b")
    ax.text(0, layers_top + 0.2, "the layers every step goes through (one each: a part calls the layer, never a copy)",
            fontsize=9.5, style="italic", color="#333")
    for j, (name, promise, module) in enumerate(LAYERS):
        y = layers_top - 0.45 - j * 0.48
        ax.add_patch(FancyBboxPatch((0, y), right, 0.4, boxstyle="round,pad=0.0,rounding_size=0.06",
                                    facecolor=("#f4f4f4", "#ececec")[j % 2], edgecolor="#bbb"))
        ax.text(0.12, y + 0.2, name, va="center", fontsize=9, weight="bold")
        ax.text(2.2, y + 0.2, promise, va="center", fontsize=8.3)
        ax.text(right - 0.1, y + 0.2, module, va="center", ha="right", fontsize=7.5, family="monospace",
                color="#444")
    ax.set_xlim(-0.1, right + 0.3)
    ax.set_ylim(layers_top - 0.5 - len(LAYERS) * 0.48, top)
    ax.axis("off")
    save(fig, "record_path")


#: gpumr's parts as the architecture figure groups them: node -> (label, what it holds).
PARTS = {
    "seqfile": ("seqfile", "SequenceFile format"),
    "base": ("errors · sizes · limits", "shared, imports nothing"),
    "gpumr.trusted": ("trusted", "trusted paths"),
    "gpumr.boundary": ("boundary", "error boundary, logger"),
    "gpumr.io": ("io", "filesystem, outputs, splits"),
    "gpumr.gpu": ("gpu", "CUDA launching"),
    "gpumr.devices": ("devices", "device choice, leases"),
    "gpumr.core": ("core", "record flow, counters"),
    "gpumr.faces": ("faces", "face detection"),
    "gpumr.ct": ("ct", "cone-beam CT"),
    "gpumr.workloads": ("workloads", "the workloads by name"),
    "gpumr.tasks": ("tasks", "the task runtime"),
    "gpumr.engines": ("engines", "submit and end tasks"),
    "gpumr.launch": ("launch", "one plan, one run"),
    "gpumr.cli": ("cli", "the gpumr command"),
    "jobs": ("jobs", "mrjob jobs (gpumr.jobs)"),
}
_BASE = {"gpumr.errors", "gpumr.sizes", "gpumr.limits"}


def _part_of(module):
    """The architecture node of a dotted module name, or None (outside gpumr, or the package itself)."""
    parts = module.split(".")
    if parts[0] == "seqfile":
        return "seqfile"
    if parts[0] != "gpumr" or len(parts) < 2:
        return None
    if parts[1] == "jobs":
        return "jobs"
    node = "base" if "gpumr." + parts[1] in _BASE else "gpumr." + parts[1]
    return node if node in PARTS else None


def import_graph():
    """``{part: {parts it imports}}`` from the source's import statements (:data:`PARTS`' nodes)."""
    edges = {p: set() for p in PARTS}
    for top, package in (("gpumr", "gpumr"), ("seqfile", "seqfile"), ("jobs", "gpumr.jobs")):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.join(ROOT, top))[:-3].replace(os.sep, ".")
                module = package if rel == "__init__" else f"{package}.{rel}".replace(".__init__", "")
                src = _part_of(module)
                if src is None:
                    continue
                here = module.split(".") if name == "__init__.py" else module.split(".")[:-1]
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        targets = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom):
                        base = here[:len(here) - node.level + 1] if node.level else []
                        mod = ".".join(base + ([node.module] if node.module else []))
                        targets = [f"{mod}.{a.name}" for a in node.names] + ([mod] if node.module else [])
                    else:
                        continue
                    for t in targets:
                        dst = _part_of(t)
                        if dst and dst != src:
                            edges[src].add(dst)
    return edges


def _reachable(edges, start, skip_edge):
    seen, stack = set(), [v for v in edges[start] if (start, v) != skip_edge]
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(edges[v])
    return seen


def architecture():
    """gpumr's parts in layers, each above what it imports (longest import chain to the bottom)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    edges = import_graph()
    level = {}

    def depth(p, trail=()):
        if p in trail:  # an import cycle between parts: drawn in one row, the arrow red
            return 0
        if p not in level:
            level[p] = 1 + max((depth(q, trail + (p,)) for q in edges[p]), default=-1)
        return level[p]
    for p in PARTS:
        depth(p)
    rows = {}
    for p in PARTS:
        rows.setdefault(level[p], []).append(p)
    reduced = [(u, v) for u in edges for v in edges[u] if v not in _reachable(edges, u, (u, v))]
    step, h, width = 0.72, 0.5, 8.0
    fig, ax = plt.subplots(figsize=(7.5, step * (max(rows) + 1) + 0.5))
    pos = {}  # part -> (x, y, w)
    for lv, parts in rows.items():
        parts.sort(key=lambda p: list(PARTS).index(p))
        w = (5.2 - 0.3 * (len(parts) - 1)) / len(parts)
        for i, p in enumerate(parts):
            pos[p] = ((width - 5.2) / 2 + i * (w + 0.3), lv * step, w)
    for u, v in reduced:
        (x0, y0, w0), (x1, y1, w1) = pos[u], pos[v]
        cycle = level[u] <= level[v]
        colour = "#c0392b" if cycle else "#8a96a8"
        if level[u] - level[v] == 1:  # the next row: straight down
            a, b, style = (x0 + w0 / 2, y0), (x1 + w1 / 2, y1 + h), "arc3"
        else:  # over rows between: an arc in the left margin
            a, b, style = (x0, y0 + h / 2), (x1, y1 + h / 2), "arc3,rad=0.3"
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, color=colour, linewidth=0.9,
                                     shrinkA=1, shrinkB=1, connectionstyle=style))
    for p, (x, y, w) in pos.items():
        label, what = PARTS[p]
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.06",
                                    facecolor="#fff7e0" if p in ("gpumr.faces", "gpumr.ct") else "#dbe8fb",
                                    edgecolor="#2757dd", linewidth=1.0))
        ax.text(x + w / 2, y + h * 0.68, label, ha="center", va="center", fontsize=9, weight="bold")
        ax.text(x + w / 2, y + h * 0.28, what.replace("\n", " "), ha="center", va="center", fontsize=6.8)
    ax.set_xlim(0.0, width - 0.2)
    ax.set_ylim(-0.1, max(rows) * step + h + 0.1)
    ax.axis("off")
    ax.set_title("gpumr's parts, each above what it imports\n(arrows: imports read from the source; "
                 "an arrow implied by others left out)", fontsize=9)
    save(fig, "architecture")


# -- figures from benchmark results ------------------------------------------------------------------
def scaling():
    """The engines' run times and scaling from ``bench/results/scaling.json`` (``bench/scaling.py --json``)."""
    import matplotlib.pyplot as plt
    path = os.path.join(BENCH_RESULTS, "scaling.json")
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    rows = results["engines"]
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    workers = sorted({int(r["workers"]) for r in rows})
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.6))
    colours = ["#2757dd", "#e67e22"]
    for ax, what, title in ((axes[0], "faces strong s", "faces, same work for 1 and 2 workers"),
                            (axes[1], "ct strong s", "CT, same work for 1 and 2 workers")):
        for k, n in enumerate(workers):
            xs, ys = [], []
            for i, e in enumerate(engines):
                row = next((r for r in rows if r["engine"] == e and int(r["workers"]) == n), None)
                if row:
                    xs.append(i + (k - (len(workers) - 1) / 2) * 0.38)
                    ys.append(float(row[what]))
            bars = ax.bar(xs, ys, 0.36, color=colours[k % 2], label=f"{n} worker{'s' if n > 1 else ''}")
            ax.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
        ax.set_xticks(range(len(engines)), engines)
        ax.set_ylabel("wall time, s\n(start-up included)", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(frameon=False, fontsize=9)
        ax.margins(y=0.12)
    load = results.get("load average", [None])[0]
    fig.suptitle(f"gpumr run --device cpu on each engine, {results['date']},\n{results.get('cores')} cores"
                 + (f", load average {load}" if load is not None else "") + " (bench/scaling.py)", fontsize=10)
    fig.tight_layout()
    save(fig, "scaling")


def bench_pictures():
    """Copy every PNG a benchmark left in ``bench/results/`` (e.g. ``breakdown.png``) into ``_generated``."""
    if not os.path.isdir(BENCH_RESULTS):
        return
    for name in os.listdir(BENCH_RESULTS):
        if name.endswith(".png"):
            fd, tmp = tempfile.mkstemp(suffix=".png", dir=OUT)
            with os.fdopen(fd, "wb") as f, open(os.path.join(BENCH_RESULTS, name), "rb") as src:
                f.write(src.read())
            publish(tmp, name[:-4])


def make_all(app):
    """Make every figure (the builder's start): two command chains in parallel, then the drawings."""
    import matplotlib
    matplotlib.use("Agg")
    os.makedirs(OUT, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpumr-docs-figures-") as work:
        os.makedirs(os.path.join(work, "faces"))
        os.makedirs(os.path.join(work, "ct"))
        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(faces_figures, os.path.join(work, "faces")),
                    pool.submit(ct_figure, os.path.join(work, "ct"))]
            record_path()
            architecture()
            scaling()
            bench_pictures()
            for job in jobs:
                job.result()
    log.info(f"gpumr figures made in {time.perf_counter() - t0:.1f} s")


class GpumrFigure(Figure):
    """``.. gpumr-figure:: NAME``: the figure ``_generated/NAME.png``; ``:optional:`` leaves a missing one out."""

    option_spec = dict(Figure.option_spec, optional=directives.flag)

    def run(self):
        name = self.arguments[0]
        optional = self.options.pop("optional", False) is None
        found = [f"{name}{ext}" for ext in (".png", ".jpg") if os.path.isfile(os.path.join(OUT, name + ext))]
        if not found:
            if optional:
                return []
            raise self.error(f"no figure {name!r} was made (docs/_ext/gpumr_figures.py)")
        self.arguments[0] = f"/_generated/{found[0]}"
        return super().run()


def setup(app):
    app.connect("builder-inited", make_all)
    app.add_directive("gpumr-figure", GpumrFigure)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
