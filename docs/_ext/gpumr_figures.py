"""The documentation's pictures, made at build time by gpumr's own commands and from its code and benchmarks.

Nothing here is a screenshot or a committed picture that could go stale:

* ``contact_sheet`` (a JPEG: photographs): ``gpumr sample``, ``gpumr pack``, ``gpumr run faces``
  and ``gpumr faces render``, as the faces page runs them;
* ``ct_preview``: ``gpumr ct geometry``, ``ct phantom``, ``gpumr run
  backproject`` and ``gpumr ct assemble --preview`` (the PNG that command writes), as the backproject
  page runs them;
* ``seqfile_layout``: the byte layout of a SequenceFile that ``gpumr pack``
  wrote, read back with :class:`seqfile.Reader` (offsets from the file);
* ``record_path``: a record's path through the layers, each box naming the
  module that does the step (a module that no longer exists fails the build);
* ``architecture``: gpumr's packages and what imports what, read from the
  source with :mod:`ast` (arrows to what is reachable anyway are left out);
* ``scaling``: the engines' run times and scaling efficiency from
  ``bench/results/scaling.json``, which ``bench/scaling.py --json`` writes;
* ``breakdown``: where a job's time goes, from ``bench/results/breakdown.json``
  (``bench/breakdown.py --json``), drawn by that script;
* ``blobs``, ``watershed`` (and ``contact_sheet``, ``ct_preview`` above): each built-in workload's
  example (:data:`EXAMPLES`), run as its page shows it, its output drawn; ``.. gpumr-example:: NAME``
  shows the commands and what they printed;
* ``.. gpumr-plot:: NAME``: a bar chart of the results written in the page's source (``docs/benchmarks.rst``),
  drawn when the page is read;

The figures go to ``docs/_generated/`` (not committed), each written whole
under a temporary name and then renamed; a page shows one with
``.. gpumr-figure:: NAME`` (the options of ``figure``). Commands run in a
temporary folder with the installed ``gpumr`` (``python -m gpumr``), as a
user runs them; one that fails fails the build, with its output.
"""

import ast
import json
import logging as pylogging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.directives.patches import Figure
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

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


# -- each built-in workload's example, run as its page shows it ------------------------------------------
#: Each built-in workload's example: the commands its page shows (run one by one, in a fresh folder, with the
#: installed ``gpumr`` and ``python`` first on ``PATH``), and what the picture is made from.
EXAMPLES = {
    "faces": [
        "gpumr sample -n 12 frames/",
        "gpumr pack frames/ -o frames.seq --shards 2",
        "gpumr run faces frames.seq -o faces/ --engine local",
        "head -n 2 faces/part-00000",
        "gpumr faces render faces/ --images frames.seq -d pictures/",
    ],
    "backproject": [
        "gpumr ct geometry -o scan.json --voxels 64 --angles 96",
        "gpumr ct phantom --geometry scan.json -o scan.seq",
        "gpumr run backproject --projections scan.seq --slab 16 -o ct-out/ --engine local",
        "head -n 2 ct-out/part-00000",
        "gpumr ct assemble ct-out/ -o volume.npy --preview volume.png",
    ],
    "blobs": [
        "mkdir -p sky",
        "python -c \"from skimage import data, io; \\\n"
        "io.imsave('sky/hubble.png', data.hubble_deep_field()[:320, :480])\"",
        "gpumr pack sky/ -o sky.seq",
        "gpumr run blobs sky.seq -o blobs/ --engine local",
        "cut -c 1-80 blobs/part-00000",
    ],
    "watershed": [
        "mkdir -p coins",
        "python -c \"from skimage import data, io; io.imsave('coins/coins.png', data.coins()[95:])\"",
        "gpumr pack coins/ -o coins.seq",
        "gpumr run watershed coins.seq -o regions/ --engine local \\\n    --min-distance 30 --footprint 61",
        "cat regions/part-00000",
    ],
}
#: What the watershed example's command line gives :func:`gpumr.watershed.segment.segment` (its picture).
WATERSHED_OPTIONS = {"min_distance": 30, "footprint": 61}


def run_example(work, name):
    """Run example ``name``'s commands in ``work/NAME``; ``[(command, its output)]``, or the build fails."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMR_")}
    env["PYTHONPATH"] = ""  # the installed gpumr, as a user runs it (conf.py puts the checkout first for autodoc)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    transcript = []
    for command in EXAMPLES[name]:
        proc = subprocess.run(["bash", "-e", "-c", command], cwd=folder, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
        if proc.returncode:
            raise ExtensionError(f"docs example {name}: `{command}` failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
        transcript.append((command, proc.stdout))
    publish_text("\n".join(json.dumps(step) for step in transcript) + "\n", f"example_{name}", ".jsonl")
    return folder


def publish_text(text, name, ext):
    """Write ``text`` as ``_generated/NAME.EXT`` (renamed into place: never half written)."""
    os.makedirs(OUT, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=ext, dir=OUT)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(OUT, name + ext))


def _output_records(path):
    """``[(key, value)]`` of a job's part file, as JSON."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("\t")
            out.append((json.loads(key), json.loads(value)))
    return out


def faces_figures(work):
    """The faces example; its contact sheet, and the byte layout of a small file ``gpumr pack`` wrote."""
    folder = run_example(work, "faces")
    publish(as_jpeg(os.path.join(folder, "pictures", "contact_sheet.png")), "contact_sheet", ".jpg")
    gpumr(folder, "sample", "-n", "3", "three/")
    gpumr(folder, "pack", "three/", "-o", "three.seq")
    seqfile_layout(os.path.join(folder, "three.seq"))


def ct_figure(work):
    """The backprojection example; ``gpumr ct assemble``'s preview of its volume (64^3 from 96 projections)."""
    folder = run_example(work, "backproject")
    publish(os.path.join(folder, "volume.png"), "ct_preview")


def blobs_figure(work):
    """The blobs example; its blobs drawn as circles (radius sigma * sqrt(2), as ``blob_log`` means) on its image."""
    import cv2
    folder = run_example(work, "blobs")
    image = cv2.imread(os.path.join(folder, "sky", "hubble.png"))
    ((key, value),) = _output_records(os.path.join(folder, "blobs", "part-00000"))
    scale = 1.5
    image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    for row, col, sigma in value["blobs"]:
        cv2.circle(image, (round(col * scale), round(row * scale)), max(3, round(sigma * 2 ** 0.5 * scale)),
                   (0, 230, 255), 1, cv2.LINE_AA)
    path = os.path.join(folder, "blobs.png")
    cv2.imwrite(path, image)
    publish(as_jpeg(path, quality=92), "blobs", ".jpg")


def watershed_figure(work):
    """The watershed example; its regions coloured over its image.

    The job's output holds each region's area, not its pixels: the picture segments the same image again with
    the same options (:func:`gpumr.watershed.segment.segment`) and is drawn only if its areas are the job's.
    """
    import cv2
    import numpy as np
    from skimage.color import label2rgb, rgb2gray

    from gpumr.watershed.segment import areas, segment
    folder = run_example(work, "watershed")
    image = cv2.cvtColor(cv2.imread(os.path.join(folder, "coins", "coins.png")), cv2.COLOR_BGR2RGB)
    ((key, value),) = _output_records(os.path.join(folder, "regions", "part-00000"))
    labels = segment(rgb2gray(image), **WATERSHED_OPTIONS)
    if areas(labels) != value["areas"]:
        raise ExtensionError(f"docs figure watershed: segmenting {key} again gave other regions than the job's "
                             f"({labels.max()} against {value['regions']}): the picture would not be its output")
    coloured = (label2rgb(labels, rgb2gray(image), alpha=0.45, bg_label=0, bg_color=None) * 255).astype(np.uint8)
    coloured = cv2.resize(coloured, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)
    path = os.path.join(folder, "watershed.png")
    cv2.imwrite(path, cv2.cvtColor(coloured, cv2.COLOR_RGB2BGR))
    publish(as_jpeg(path, quality=92), "watershed", ".jpg")


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


#: gpumr's parts as the architecture figure groups them: node -> (label, what it holds). The built-in
#: workloads' packages and the engines' names are added from the code's own tables (:func:`parts`).
PARTS = {
    "seqfile": ("seqfile", "SequenceFile format"),
    "base": ("errors · sizes · limits", "shared, imports nothing"),
    "gpumr.trusted": ("trusted", "trusted paths"),
    "gpumr.boundary": ("boundary", "error boundary, logger"),
    "gpumr.io": ("io", "filesystem, outputs, splits"),
    "gpumr.gpu": ("gpu", "CUDA launching"),
    "gpumr.devices": ("devices", "device choice, leases"),
    "gpumr.core": ("core", "record flow, counters"),
    "gpumr.workloads": ("workloads", "the workloads by name"),
    "gpumr.tasks": ("tasks", "the task runtime"),
    "gpumr.engines": ("engines", "submit and end tasks"),
    "gpumr.launch": ("launch", "one plan, one run"),
    "gpumr.cli": ("cli", "the gpumr command"),
    "jobs": ("jobs", "mrjob jobs (gpumr.jobs)"),
}
_BASE = {"gpumr.errors", "gpumr.sizes", "gpumr.limits"}


def workload_parts():
    """``{package: workload name}`` of the built-in workloads (``gpumr.ct`` -> ``backproject``)."""
    from gpumr.workloads import BUILT_IN
    return {".".join(ref.split(":")[0].split(".")[:2]): name for name, ref in BUILT_IN.items()}


def parts():
    """:data:`PARTS` with a box per built-in workload's package, and the engines' box naming every engine."""
    from gpumr.engines import NAMES
    out = dict(PARTS)
    for package, name in workload_parts().items():
        out[package] = (package.split(".")[1], f"workload {name}")
    out["gpumr.engines"] = ("engines", " · ".join(NAMES))
    return out


def _part_of(module, known):
    """The architecture node (one of ``known``) of a dotted module name, or None (outside gpumr, or the package
    itself)."""
    parts = module.split(".")
    if parts[0] == "seqfile":
        return "seqfile"
    if parts[0] != "gpumr" or len(parts) < 2:
        return None
    if parts[1] == "jobs":
        return "jobs"
    node = "base" if "gpumr." + parts[1] in _BASE else "gpumr." + parts[1]
    return node if node in known else None


def _main_block_nodes(tree):
    """The ids of the nodes under a module's ``if __name__ == "__main__":`` (its program entry: a command line's
    layer, which tests/test_layers.py exempts too)."""
    exempt = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                getattr(node.test.left, "id", None) == "__name__":
            exempt.update(id(sub) for sub in ast.walk(node))
    return exempt


def import_graph(known=None):
    """``{part: {parts it imports}}`` from the source's import statements (:func:`parts`' nodes), a module's
    ``__main__`` block left out."""
    known = parts() if known is None else known
    edges = {p: set() for p in known}
    for top, package in (("gpumr", "gpumr"), ("seqfile", "seqfile"), ("jobs", "gpumr.jobs")):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.join(ROOT, top))[:-3].replace(os.sep, ".")
                module = package if rel == "__init__" else f"{package}.{rel}".replace(".__init__", "")
                src = _part_of(module, known)
                if src is None:
                    continue
                here = module.split(".") if name == "__init__.py" else module.split(".")[:-1]
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                exempt = _main_block_nodes(tree)
                for node in ast.walk(tree):
                    if id(node) in exempt:
                        continue
                    if isinstance(node, ast.Import):
                        targets = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom):
                        base = here[:len(here) - node.level + 1] if node.level else []
                        mod = ".".join(base + ([node.module] if node.module else []))
                        targets = [f"{mod}.{a.name}" for a in node.names] + ([mod] if node.module else [])
                    else:
                        continue
                    for t in targets:
                        dst = _part_of(t, known)
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
    known = parts()
    edges = import_graph(known)
    level = {}

    def depth(p, trail=()):
        if p in trail:  # tests/test_layers.py holds the layers' order: a cycle is a layering to fix, not to draw
            raise ExtensionError(f"docs figure architecture: the parts import each other in a cycle: "
                                 f"{' -> '.join(trail[trail.index(p):] + (p,))}")
        if p not in level:
            level[p] = 1 + max((depth(q, trail + (p,)) for q in edges[p]), default=-1)
        return level[p]
    for p in known:
        depth(p)
    rows = {}
    for p in known:
        rows.setdefault(level[p], []).append(p)
    reduced = [(u, v) for u in edges for v in edges[u] if v not in _reachable(edges, u, (u, v))]
    step, h, left, span = 0.78, 0.56, 0.45, 7.3
    fig, ax = plt.subplots(figsize=(8.0, step * (max(rows) + 1) + 0.6))
    pos = {}  # part -> (x, y, w)
    for lv, row in rows.items():
        row.sort(key=lambda p: list(known).index(p))
        w = (span - 0.25 * (len(row) - 1)) / len(row)
        for i, p in enumerate(row):
            pos[p] = (left + i * (w + 0.25), lv * step, w)
    for u, v in reduced:
        (x0, y0, w0), (x1, y1, w1) = pos[u], pos[v]
        if level[u] - level[v] == 1:  # the next row: straight down
            a, b, style = (x0 + w0 / 2, y0), (x1 + w1 / 2, y1 + h), "arc3"
        else:  # over rows between: an arc in the left margin
            a, b, style = (x0, y0 + h / 2), (x1, y1 + h / 2), "arc3,rad=0.3"
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=9, color="#8a96a8", linewidth=0.9,
                                     shrinkA=1, shrinkB=1, connectionstyle=style))
    workloads = workload_parts()
    for p, (x, y, w) in pos.items():
        label, what = known[p]
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.06",
                                    facecolor="#fff7e0" if p in workloads else "#dbe8fb",
                                    edgecolor="#2757dd", linewidth=1.0))
        ax.text(x + w / 2, y + h * 0.68, label, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(x + w / 2, y + h * 0.27, what.replace("\n", " "), ha="center", va="center", fontsize=8)
    ax.set_xlim(0.0, left + span + 0.05)
    ax.set_ylim(-0.1, max(rows) * step + h + 0.1)
    ax.axis("off")
    ax.set_title("gpumr's parts, each above what it imports; yellow: the built-in workloads\n(arrows: imports "
                 "read from the source; an arrow implied by others left out)", fontsize=10)
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
    fig, axes = plt.subplots(2, 1, figsize=(6.8, 6.8))
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
            ax.bar_label(bars, fmt="%.1f", fontsize=10, padding=2)
        ax.set_xticks(range(len(engines)), engines, fontsize=11)
        ax.set_ylabel("wall time, s\n(start-up included)", fontsize=10.5)
        ax.set_title(title, fontsize=11.5)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(frameon=False, fontsize=10.5)
        ax.tick_params(axis="y", labelsize=10)
        ax.margins(y=0.12)
    load = results.get("load average", [None])[0]
    fig.suptitle(f"gpumr run --device cpu on each engine, {results['date']},\n{results.get('cores')} cores"
                 + (f", load average {load}" if load is not None else "") + " (bench/scaling.py)", fontsize=11.5)
    fig.tight_layout()
    save(fig, "scaling")


def breakdown():
    """Where a job's time goes, from ``bench/results/breakdown.json`` (``bench/breakdown.py --json``), drawn by
    that script's own :func:`draw`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpumr_bench_breakdown", os.path.join(ROOT, "bench", "breakdown.py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(ROOT, "bench"))  # (its helpers: bench/_common.py)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    with open(os.path.join(BENCH_RESULTS, "breakdown.json"), encoding="utf-8") as f:
        data = json.load(f)
    fd, tmp = tempfile.mkstemp(prefix=".breakdown.", suffix=".png", dir=OUT)
    os.close(fd)
    module.draw(data, tmp)
    publish(tmp, "breakdown")


def make_all(app):
    """Make every figure (the builder's start): the workloads' examples two at a time, and the drawings."""
    import matplotlib
    matplotlib.use("Agg")
    # furo's accessible-pygments sets the root logger to INFO: matplotlib's first font scan would say so, and warn
    # that it builds its font cache (on a fresh machine: not a problem of the docs)
    pylogging.getLogger("matplotlib").setLevel(pylogging.WARNING)
    pylogging.getLogger("matplotlib.font_manager").setLevel(pylogging.ERROR)
    os.makedirs(OUT, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpumr-docs-figures-") as work:
        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(f, work) for f in (faces_figures, ct_figure, blobs_figure, watershed_figure)]
            record_path()
            architecture()
            scaling()
            breakdown()
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


def parse_bars(lines):
    """``[(label, low, high, baseline, text)]`` of a ``gpumr-plot``'s lines ``LABEL = VALUE`` or ``LABEL =
    LOW-HIGH`` (``baseline: LABEL = ...`` marks the baseline's bar; ``text`` is the value as written)."""
    bars = []
    for line in lines:
        if not line.strip():
            continue
        label, eq, value = line.rpartition("=")
        if not eq:
            raise ValueError(f"not 'LABEL = VALUE': {line!r}")
        label, baseline = label.strip(), label.strip().startswith("baseline:")
        label = label.split(":", 1)[1].strip() if baseline else label
        low, _, high = value.strip().replace(",", "").partition("-")
        bars.append((label, float(low), float(high or low), baseline, value.strip()))
    return bars


def draw_bars(name, bars, unit, log=False, goal=None, mark=None):
    """One horizontal bar per result, its value (as written) at its end; the baseline's bar grey; a range's upper
    part lighter; ``goal`` a dashed red line, ``mark`` (value, label) a dashed grey one. Sized to show whole at
    the page's width."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.6, 0.44 * len(bars) + 1.0))
    ys = list(range(len(bars)))[::-1]
    top = max(high for _, _, high, _, _ in bars)
    for y, (label, low, high, baseline, text) in zip(ys, bars):
        colour = "#8c8c8c" if baseline else "#2757dd"
        ax.barh(y, low, 0.62, color=colour)
        if high > low:
            ax.barh(y, high - low, 0.62, left=low, color=colour, alpha=0.4)
        ax.text(high * (1.06 if log else 1) + (0 if log else top * 0.01), y, text, va="center", fontsize=11.5,
                bbox=dict(facecolor="white", edgecolor="none", pad=1), zorder=3)
    ax.set_yticks(ys, [label + (" (baseline)" if baseline else "") for label, _, _, baseline, _ in bars],
                  fontsize=11.5)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(low for _, low, _, _, _ in bars) * 0.5, top * 4)
    else:
        ax.set_xlim(0, top * 1.2)
    # (the goal's label left of its line, the mark's right of its: a goal is often just under the mark)
    lines = ([(goal, f"goal {goal:g} ", "#c0392b", "right")] if goal is not None else []) + \
        ([(mark[0], f" {mark[1]}", "#555555", "left")] if mark else [])
    for value, label, colour, side in lines:
        ax.axvline(value, color=colour, linestyle="--", linewidth=1.2)
        ax.text(value, len(bars) - 0.45, label, color=colour, fontsize=11, va="bottom", ha=side)
    ax.set_xlabel(unit, fontsize=11.5)
    ax.tick_params(axis="x", labelsize=10.5)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_ylim(-0.6, len(bars) - 0.2 + (0.55 if lines else 0))
    os.makedirs(OUT, exist_ok=True)
    save(fig, f"plot_{name}")


def _mark(argument):
    value, _, label = directives.unchanged_required(argument).partition(" ")
    return float(value), label.strip() or value


class GpumrPlot(SphinxDirective):
    """``.. gpumr-plot:: NAME``: a bar chart of the results in its content (``LABEL = VALUE``, ``LABEL =
    LOW-HIGH``, ``baseline: LABEL = VALUE``), drawn when the page is read; ``:unit:`` the axis, ``:log:`` a log
    scale, ``:goal:`` a dashed red line, ``:mark: VALUE LABEL`` a dashed grey one. The figures stay in the page's
    source, beside the text that says what they are."""

    required_arguments = 1
    has_content = True
    option_spec = {"unit": directives.unchanged_required, "log": directives.flag, "goal": float, "mark": _mark}

    def run(self):
        import matplotlib
        matplotlib.use("Agg")
        name = self.arguments[0]
        try:
            bars = parse_bars(self.content)
        except ValueError as exc:
            raise self.error(f"gpumr-plot {name}: {exc}")
        draw_bars(name, bars, self.options.get("unit", ""), "log" in self.options, self.options.get("goal"),
                  self.options.get("mark"))
        alt = "; ".join(f"{label}{' (baseline)' if b else ''}: {text}" for label, _, _, b, text in bars)
        lines = [f".. image:: /_generated/plot_{name}.png", f"   :alt: {self.options.get('unit', '')}: {alt}",
                 "   :width: 100%", ""]
        node = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.get_source_info()[0]), self.content_offset, node)
        return node.children


class GpumrExample(SphinxDirective):
    """``.. gpumr-example:: NAME``: example NAME's commands (:data:`EXAMPLES`) and what each printed, as this
    build ran them, in a console block."""

    required_arguments = 1

    def run(self):
        name = self.arguments[0]
        path = os.path.join(OUT, f"example_{name}.jsonl")
        if name not in EXAMPLES or not os.path.isfile(path):
            raise self.error(f"no example {name!r} was run (docs/_ext/gpumr_figures.py, EXAMPLES)")
        self.env.note_dependency(path)
        self.env.note_dependency(__file__)
        lines = [".. code-block:: console", ""]
        with open(path, encoding="utf-8") as f:
            for command, output in (json.loads(line) for line in f):
                lines += ["   " + ("$ " if i == 0 else "  ") + part for i, part in enumerate(command.split("\n"))]
                lines += ["   " + line for line in output.rstrip("\n").split("\n") if output.strip()]
        node = nodes.container()
        self.state.nested_parse(StringList(lines + [""], source=self.get_source_info()[0]), self.content_offset, node)
        return node.children


def setup(app):
    app.connect("builder-inited", make_all)
    app.add_directive("gpumr-figure", GpumrFigure)
    app.add_directive("gpumr-example", GpumrExample)
    app.add_directive("gpumr-plot", GpumrPlot)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
