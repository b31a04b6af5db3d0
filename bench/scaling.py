"""A published scaling study repeated with its own algorithms: blobs and watershed, weak and strong, on every engine.

The study: a published comparison of RADICAL-Pilot, Spark and Dask on image analysis (scikit-image's
blob detection and watershed segmentation over many images), strong speedups on 8 nodes.

For each engine of :data:`gpumr.engines.NAMES` (so that an engine registered
later gets rows of its own), each workload (``blobs``: ``blob_log`` with
that study's ``max_sigma=30, num_sigma=10, threshold=0.1``; ``watershed``) and
each worker count N of ``--workers``, ``gpumr run WORKLOAD`` (``--device
cpu``) runs through the one launcher over

* strong scaling: the same ``--images`` images for every N;
* weak scaling: ``--images`` x N images.

The images are tiles of scikit-image's sample images (``--size`` pixels a
side, PNG), packed into ``--tasks-per-worker`` x max(N) SequenceFiles
(weak: x N), one task per file. Times are whole runs as a user sees them
(the engine's start-up included: each run starts and stops its own cluster), best
of ``--repeat``, after one untimed run per engine and workload (imports). Strong: speedup
T1/TN, efficiency T1/(N TN); weak: scaled speedup N T1/TN, efficiency
T1/TN, both against the same engine's first worker count; "vs inline" is
the run's throughput over the inline engine's (the same-run baseline).
"record s" is the time the records' own work took (the counters' CPU
milliseconds, summed over workers): the rest of "wall s" is start-up,
scheduling and I/O, which is where small runs lose their speedup.

How an engine gets N workers here: ``local``: ``--num-cores N``;
``spark``: ``--master local-cluster[N,1,1024]``; ``dask``: ``--workers N``
(a LocalCluster); ``radical``: ``--pilot-cores N`` (a pilot on
``local.localhost``); ``flink``: ``--parallelism N`` (its embedded
cluster; run this script with the Python that has PyFlink, ``make
flink-env``'s); ``inline`` runs in this process (one worker). Hadoop and
EMR need a cluster and are skipped with the reason, unless ``--engine-args
'ENGINE=ARGS'`` says how to run them (``{n}`` in ARGS is the worker count),
as it may for any engine.

Printed beside that study's figures (:data:`PUBLISHED`); ``--plot FILE.png`` draws the speedups (matplotlib).

Usage: python bench/scaling.py [--workers 1 2] [--images 12] [--size 128] [--repeat 1]
       [--workloads blobs watershed] [--modes strong weak] [--engines E ...]
       [--engine-args 'hadoop=-c mrjob.conf'] [--plot scaling.png]
"""

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time

from _common import table

#: The published study's strong speedups on 8 nodes.
PUBLISHED = {"radical": 8.1, "spark": 7.1, "dask": 6.6}
PUBLISHED_NODES = 8
#: ``gpumr run`` options that give an engine ``{n}`` workers on this machine.
WORKERS = {"local": "--no-conf --num-cores {n}", "spark": "--master local-cluster[{n},1,1024]",
           "dask": "--workers {n}", "inline": "--no-conf", "radical": "--pilot-cores {n}",
           "flink": "--parallelism {n}"}
#: Engines that run in one process: one worker, whatever N.
ONE_WORKER = ("inline",)
#: Why an engine is not run here (unless --engine-args says how).
SKIP = {"hadoop": "needs a Hadoop cluster (give --engine-args 'hadoop=-c mrjob.conf ...' where there is one)",
        "emr": "needs AWS and an EMR cluster (give --engine-args 'emr=-c mrjob.conf --num-core-instances {n}')"}
#: The workloads' options: the published study's blob_log parameters.
OPTIONS = {"blobs": ["--max-sigma", "30", "--num-sigma", "10", "--threshold", "0.1"], "watershed": []}
SOURCES = ("hubble_deep_field", "coffee", "immunohistochemistry", "astronaut", "chelsea", "rocket")


def tiles(folder, count, size):
    """``count`` PNG tiles of ``size`` x ``size`` cut from scikit-image's sample images (repeated under new names
    when there are fewer distinct tiles); their paths."""
    import cv2
    import skimage.data
    os.makedirs(folder)
    distinct = []
    for name in SOURCES:
        image = getattr(skimage.data, name)()
        for y in range(0, image.shape[0] - size + 1, size):
            for x in range(0, image.shape[1] - size + 1, size):
                distinct.append(image[y:y + size, x:x + size, ::-1])
    paths = []
    for i in range(count):
        paths.append(os.path.join(folder, f"tile_{i:05d}.png"))
        cv2.imwrite(paths[-1], distinct[i % len(distinct)])
    return paths


def packed(work, name, images, shards):
    """Pack ``images`` (paths) into ``shards`` SequenceFiles; the folder."""
    from gpumr.io.packing import pack
    src = os.path.join(work, name + "-src")
    os.makedirs(src)
    for f in images:
        os.link(f, os.path.join(src, os.path.basename(f)))
    out = os.path.join(work, name)
    pack([src], out, shards=shards, progress=False)
    return out


def engine_plan(engines, given):
    """``[(engine, args template or None, why skipped or None)]`` for every engine of ``engines``."""
    rows = []
    for engine in engines:
        if engine in given:
            rows.append((engine, given[engine], None))
        elif engine in SKIP:
            rows.append((engine, None, SKIP[engine]))
        else:
            rows.append((engine, WORKERS.get(engine, ""), None))  # a later engine: its defaults
    return rows


_WARM = set()


def timed(workload, engine, template, n, seq, out, repeat):
    """Best wall time of ``gpumr run`` and its counters.

    The first run of each engine and workload in this process is not timed:
    it would also pay for importing the framework (pyspark,
    dask.distributed) and the workload's libraries once, which every later
    run here finds imported (as every run of a user's own ``gpumr`` process
    would not). Each timed run still starts and stops its own cluster.
    """
    from gpumr.launch.job import launch
    args = shlex.split(template.format(n=n)) if template else []
    argv = [workload, seq, "-o", out, "--engine", engine, "--device", "cpu", *OPTIONS[workload], *args]
    if (engine, workload) not in _WARM:
        _WARM.add((engine, workload))
        shutil.rmtree(out, ignore_errors=True)
        launch(argv, verbosity="quiet")
    best, counts = None, None
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        result = launch(argv, verbosity="quiet")
        took = time.perf_counter() - t0
        best, counts = (took, result.counts) if best is None or took < best else (best, counts)
    return best, counts


def study(a, work):
    corpus = tiles(os.path.join(work, "tiles"), a.images * max(a.workers), a.size)
    rows, points, inline_rate = [], {}, {}
    plan = engine_plan(a.engines, dict(e.split("=", 1) for e in a.engine_args))
    for workload in a.workloads:
        for mode in a.modes:
            for engine, template, why in plan:
                if why:
                    continue
                counts_n = a.workers[:1] if engine in ONE_WORKER or "{n}" not in (template or "") else a.workers
                t1 = None
                for n in counts_n:
                    m = n if mode == "weak" else 1
                    images = a.images * m
                    shards = a.tasks_per_worker * (n if mode == "weak" else max(a.workers))
                    seq = packed(work, f"{workload}-{mode}-{engine}-{n}", corpus[:images], shards)
                    wall, counts = timed(workload, engine, template, n, seq, os.path.join(work, "out"), a.repeat)
                    done = counts.get("records on CPU", 0)
                    assert done == images and not counts.get("bad records"), (engine, counts)
                    t1 = wall if t1 is None else t1
                    speedup = t1 / wall * m
                    eff = t1 / wall / (1 if mode == "weak" else n)
                    rate = images / wall
                    if engine == "inline":
                        inline_rate[(workload, mode)] = rate
                    base = inline_rate.get((workload, mode))
                    shown = n if "{n}" in (template or "") else 1 if engine in ONE_WORKER else "default"
                    rows.append([workload, mode, engine, shown, images, shards,
                                 f"{wall:.1f}", f"{counts.get('CPU milliseconds', 0) / 1000:.1f}", f"{speedup:.2f}",
                                 f"{eff:.2f}", f"{rate / base:.2f}" if base else "-"])
                    points.setdefault((workload, mode, engine), []).append((n, speedup))
                    print("  ".join(map(str, rows[-1])), flush=True)
    load = os.getloadavg()
    table(f"Scaling, gpumr run --device cpu, best of {a.repeat}, {a.size}x{a.size} tiles; strong: {a.images} images, "
          f"weak: {a.images} per worker; speedup and efficiency against the engine's first worker count; vs inline: "
          f"throughput over the inline engine's. This machine: {os.cpu_count()} cores, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (shared: other work ran beside)",
          ["workload", "scaling", "engine", "workers", "images", "tasks", "wall s", "record s", "speedup",
           "efficiency", "vs inline"], rows)
    for engine, _, why in plan:
        if why:
            print(f"skipped {engine}: {why}")
    published_rows = []
    for engine in sorted(set(PUBLISHED) | {e for e, _, why in plan if not why and e not in ONE_WORKER}):
        here = []
        for workload in a.workloads:
            got = dict(points.get((workload, "strong", engine), []))
            n = max(got) if got else None
            here.append(f"{got[n]:.2f}x at {n}" if got else "not run here")
        published = f"{PUBLISHED[engine]}x at {PUBLISHED_NODES}" if engine in PUBLISHED else "-"
        published_rows.append([engine, published, f"{PUBLISHED[engine] / PUBLISHED_NODES:.2f}"
                               if engine in PUBLISHED else "-", *here])
    table(f"Strong speedup beside the published study's (its {PUBLISHED_NODES} nodes; here at most "
          f"{max(a.workers)} workers on {os.cpu_count()} cores: the most a run here can show is "
          f"{min(max(a.workers), os.cpu_count())}x)",
          ["engine", "published", "published efficiency", *[f"here: {w}" for w in a.workloads]], published_rows)
    return points


def plot(points, a, path):
    """Speedup against workers per engine and workload (strong, weak), the ideal, and the published study's 8-node
    points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(a.modes), figsize=(6 * len(a.modes), 4.5), squeeze=False)
    top = max(max(a.workers), PUBLISHED_NODES)
    for ax, mode in zip(axes[0], a.modes):
        ax.plot([1, top], [1, top], "k:", label="ideal")
        for (workload, m, engine), pts in sorted(points.items()):
            if m == mode and len(pts) > 1:
                ax.plot(*zip(*pts), "o-", label=f"{engine} {workload}")
        if mode == "strong":
            for engine, s in PUBLISHED.items():
                ax.plot([PUBLISHED_NODES], [s], "s", label=f"published {engine} ({s}x)")
        ax.set(title=f"{mode} scaling", xlabel="workers", ylabel="speedup" if mode == "strong" else "scaled speedup")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def main():
    from gpumr.engines import NAMES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2; 1 2 4 8 on "
                                                                            "a cluster)")
    ap.add_argument("--images", type=int, default=12, help="images per run (strong) or per worker (weak)")
    ap.add_argument("--size", type=int, default=128, help="tile side, pixels")
    ap.add_argument("--tasks-per-worker", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workloads", nargs="+", choices=sorted(OPTIONS), default=["blobs", "watershed"])
    ap.add_argument("--modes", nargs="+", choices=["strong", "weak"], default=["strong", "weak"])
    ap.add_argument("--engines", nargs="+", choices=NAMES, default=list(NAMES), help="default: every engine")
    ap.add_argument("--engine-args", action="append", default=[], metavar="ENGINE=ARGS",
                    help="how to run ENGINE with {n} workers (e.g. 'hadoop=-c mrjob.conf')")
    ap.add_argument("--plot", metavar="PNG", help="draw the speedups into this PNG file (needs matplotlib)")
    a = ap.parse_args()
    if a.plot:
        try:
            import matplotlib  # noqa: F401 (only whether it imports)
        except ImportError:
            sys.exit("bench/scaling.py: --plot needs matplotlib (pip install 'gpumr[plot]')")
    print(f"load average now: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores", flush=True)
    work = tempfile.mkdtemp(prefix="gpumr-bench-scaling-")
    t0 = time.perf_counter()
    try:
        points = study(a, work)
        if a.plot:
            plot(points, a, a.plot)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nscaling study done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
