"""Where a job's time goes, per workload: stacked bars per device, drawn into a PNG.

Each component is measured here with the library functions the tasks call,
on one machine, one after another (no engine): engine start-up (a new Python
process that imports the workload and loads its kernel or cascade), read
(the SequenceFile records), decode (TIFF projections, JPEG frames), filter
(CT: cosine weighting and ramp), compute (CPU backprojection / OpenCV's
detector, all cores as the tasks use them), encode + write (what the job
writes now: CT slabs as binary float32 ``.npy`` files through the task's
arrays, hashed as written; faces' output lines), publish (the output
transaction making the files visible). The GPU bars keep every host
component as measured and replace compute with the GPU model's kernel
figure: a PREDICTION (``--gpu-gups``, ``--gpu-fps``; no GPU ran), labelled
so in the picture.

With ``--model`` (the ``end_to_end.json`` that ``bench/gpu_model.py --out
DIR`` writes), a second row of panels draws the model's end to end on a
16-core node with one H100, per job (faces, 512^3, 1024^3): each phase's
seconds, the one that bounds the job in red, all PREDICTIONS.

Usage: python bench/breakdown.py [--out bench-out/breakdown.png] [--voxels 128] [--angles 180] [--frames 400]
[--model bench-out/end_to_end.json] [--json bench/results/breakdown.json] (matplotlib: the ``bench`` extra)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import frame_corpus, table

COMPONENTS = ("engine start-up", "read", "decode", "filter", "compute", "encode + write", "publish")
COLOURS = ("#7f7f7f", "#1f77b4", "#17becf", "#9467bd", "#d62728", "#ff7f0e", "#2ca02c")


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def start_up(code):
    """Seconds a new Python process takes to run ``code`` (imports, kernel or cascade load)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def ct(work, n, na, slab):
    from host_costs import publish_seconds

    import seqfile
    from gpumr.ct import geometry, phantom
    from gpumr.ct.backproject import backproject, pad, threads
    from gpumr.ct.fdk import filter_projections
    from gpumr.ct.projections import read_set, write_set
    from gpumr.tasks.output import Arrays
    g = geometry.simple(n, na, n_detector=n)
    seq = os.path.join(work, "proj.seq")
    write_set(seq, phantom.projections(g))
    backproject(np.zeros((4, *geometry.simple(8, 4).nDetector), np.float32), geometry.simple(8, 4))  # cache warm
    t = {"engine start-up": start_up(
        "import numpy as np; from gpumr.ct import geometry; from gpumr.ct.backproject import backproject; "
        "g = geometry.simple(8, 4); backproject(np.zeros((4, *g.nDetector), np.float32), g)")}
    t["read"], _ = timed(lambda: sum(len(v) for _, v, _ in seqfile.Reader(seq)))
    load, raw = timed(lambda: read_set([seq], g))
    t["decode"] = max(load - t["read"], 0.0)
    t["filter"], filtered = timed(lambda: filter_projections(raw, g, threads=threads()))  # (as a task filters)
    padded = pad(filtered)
    backproject(None, g, 0, 2, padded=padded)
    starts = list(range(0, n, slab))
    t["compute"], slabs = timed(lambda: [backproject(None, g, z, min(z + slab, n), padded=padded) for z in starts])
    stage = os.path.join(work, "stage")
    os.makedirs(stage)
    arrays = Arrays(stage, "attempt")
    t["encode + write"], _ = timed(lambda: [arrays.encode(f"z{z:05d}", {"slab": s}) for z, s in zip(starts, slabs)])
    t["publish"] = publish_seconds(work, len(slabs), 1 << 10)
    return t, n ** 3 * na


def faces(work, frames):
    import cv2
    from host_costs import publish_seconds

    import seqfile
    from gpumr.core.images import decode_gray
    from gpumr.faces.cpu import cascade_path, detect, load_cascade
    from gpumr.io.packing import pack
    from gpumr.tasks.output import write_lines
    paths = frame_corpus(work, count=frames, distinct=64)
    seq = os.path.join(work, "frames.seq")
    pack([os.path.dirname(paths[0])], seq, progress=False)
    t = {"engine start-up": start_up("from gpumr.faces.cpu import load_cascade; load_cascade()")}
    t["read"], records = timed(lambda: [(k, bytes(v)) for k, v, _ in seqfile.Reader(seq)])
    t["decode"], grays = timed(lambda: [decode_gray(v) for _, v in records])
    t["filter"] = 0.0
    clf = load_cascade(cascade_path())
    cv2.setNumThreads(len(os.sched_getaffinity(0)))
    t["compute"], found = timed(lambda: [detect(clf, g) for g in grays])
    stage = os.path.join(work, "stage")
    os.makedirs(stage)
    t["encode + write"], _ = timed(lambda: write_lines(stage, "part-00000", (
        f"{json.dumps(k)}\t{json.dumps({'faces': f, 'device': 'cpu'})}" for (k, _), f in zip(records, found))))
    t["publish"] = publish_seconds(work, 1, 1 << 10)
    return t, len(records)


def draw(data, out):
    """The picture of ``data`` (what :func:`as_data` returns, or ``--json`` wrote) as a PNG at ``out``, sized to
    read at a documentation page's width: the measured jobs side by side (where ``data`` has them), then one panel
    per predicted job."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    measured, model = data.get("measured") or {}, data.get("model") or {}
    heights = ([3.3] if measured else []) + ([sum(0.34 * len(p["phases"]) + 1.0 for p in model.values())]
                                             if model else [])
    fig = plt.figure(figsize=(8.0, sum(heights) + 0.9), layout="constrained")
    fig.get_layout_engine().set(hspace=0.06)
    parts = fig.subfigures(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
    if measured:
        axes = parts[0].subplots(1, len(measured), squeeze=False)[0]
        for ax, (title, cases) in zip(axes, measured.items()):
            labels = list(cases)
            bottom = np.zeros(len(labels))
            for comp, colour in zip(COMPONENTS, COLOURS):
                vals = np.array([cases[lab].get(comp, 0.0) for lab in labels])
                ax.bar(labels, vals, bottom=bottom, color=colour, label=comp)
                bottom += vals
            for x, total in enumerate(bottom):
                ax.text(x, total, f"{total:.2f} s", ha="center", va="bottom", fontsize=10)
            ax.set_title(title, fontsize=11)
            ax.set_ylabel("seconds", fontsize=10)
            ax.tick_params(labelsize=9.5)
            ax.margins(y=0.12)
            ax.spines[["top", "right"]].set_visible(False)
        handles, labels = axes[0].get_legend_handles_labels()
        parts[0].legend(handles[::-1], labels[::-1], loc="outside right upper", fontsize=9, frameon=False)
    if model:
        axes = parts[-1].subplots(len(model), 1, squeeze=False,
                                  height_ratios=[0.34 * len(p["phases"]) + 1.0 for p in model.values()])[:, 0]
        for ax, (title, panel) in zip(axes, model.items()):
            phases = panel["phases"]
            names = list(phases)
            worst = max(phases, key=phases.get)
            ax.barh(names, [phases[k] for k in names],
                    color=["#d62728" if k == worst else "#1f77b4" for k in names])
            for y, k in enumerate(names):
                ax.text(phases[k], y, f" {phases[k]:g}", va="center", fontsize=9)
            ax.invert_yaxis()
            ax.margins(x=0.08)
            ax.tick_params(axis="y", labelsize=9.5)
            ax.tick_params(axis="x", labelsize=9)
            ax.set_xlabel("seconds (PREDICTION)", fontsize=10)
            ax.set_title(f"{title}: {panel['note']}", fontsize=11)
            ax.spines[["top", "right"]].set_visible(False)
    lines = [f"Where the job's time goes ({data.get('date', '')})"]
    if measured:
        lines.append(f"Top: measured on {data.get('cores', '?')} cores, the GPU bars' compute a PREDICTION")
    if model:
        lines.append(f"{'Below: ' if measured else ''}PREDICTION for a 16-core node with one H100 (no GPU ran), "
                     "the bound in red")
    fig.suptitle("\n".join(lines), fontsize=11)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)


def as_data(bars, model, cores):
    """What the picture shows, as JSON can hold it (``--json``; the documentation draws it from that file)."""
    return {"date": time.strftime("%Y-%m-%d"), "cores": cores, "measured": bars,
            "model": {title: {"phases": phases, "note": note} for title, (phases, note) in (model or {}).items()}}


def model_panels(path):
    """The predicted jobs of ``end_to_end.json``: ``{title: (phases, note)}``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    faces = data["faces"]
    fixed = faces.get("start-up", 0.0) + faces.get("publish", 0.0)
    busiest = max(v for k, v in faces.items() if k not in ("start-up", "publish"))
    out = {"faces, 100,000 frames 640x480": (faces, f"phases side by side, {busiest + fixed:.1f} s, "
                                                     f"{100_000 / (busiest + fixed):,.0f} fps")}
    for job, phases in data["ct"].items():
        out[f"CT {job}"] = (phases, f"phases one after another, {sum(phases.values()):.1f} s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("bench-out", "breakdown.png"))
    ap.add_argument("--voxels", type=int, default=128)
    ap.add_argument("--angles", type=int, default=180)
    ap.add_argument("--slab", type=int, default=32)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--gpu-gups", type=float, default=900.0, help="the model's kernel GUPS (H100, PREDICTION)")
    ap.add_argument("--gpu-fps", type=float, default=4700.0, help="the model's kernel fps (H100, PREDICTION)")
    ap.add_argument("--model", help="end_to_end.json of bench/gpu_model.py --out DIR: draw its predicted phases")
    ap.add_argument("--json", help="write what the picture shows here too (bench/results/breakdown.json: the "
                                   "documentation draws it at each build)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-breakdown-")
    try:
        os.makedirs(os.path.join(work, "ct"))
        t_ct, updates = ct(os.path.join(work, "ct"), args.voxels, args.angles, args.slab)
        t_faces, n = faces(os.path.join(work, "faces"), args.frames)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cores = len(os.sched_getaffinity(0))
    bars = {
        f"CT {args.voxels}^3 from {args.angles} projections": {
            f"CPU, {cores} cores\n(measured)": t_ct,
            "GPU\n(PREDICTION)": dict(t_ct, compute=updates / (args.gpu_gups * 1e9))},
        f"faces, {n} frames": {
            f"CPU, {cores} cores\n(measured)": t_faces,
            "GPU\n(PREDICTION)": dict(t_faces, compute=n / args.gpu_fps)},
    }
    rows = [[comp] + [f"{case.get(comp, 0.0):.3f}" for cases in bars.values() for case in cases.values()]
            for comp in COMPONENTS]
    rows.append(["total"] + [f"{sum(case.values()):.3f}" for cases in bars.values() for case in cases.values()])
    header = ["component (s)"] + [f"{w.split()[0]} {d.splitlines()[0]}{' PREDICTION' if 'PREDICTION' in d else ''}"
                                  for w, cases in bars.items() for d in cases]
    table("Where the time goes (CPU measured here; GPU columns: PREDICTION, compute from the model, no GPU ran)",
          header, rows)
    data = as_data(bars, model_panels(args.model) if args.model else None, cores)
    draw(data, args.out)
    print(f"\npicture: {args.out}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        print(f"data: {args.json}")


if __name__ == "__main__":
    main()
