"""Strong and weak scaling of face detection on Spark and Hadoop, and Spark's partition balance.

Scaling: for each worker count N (arguments), Spark ``local-cluster[N,1,1024]``
(N executors of one core) and Hadoop local mode (``-r hadoop`` through
``shared/hadoop``, ``mapreduce.local.map.tasks.maximum=N``) run the face job
(``--device cpu``) over

* strong scaling: the same ``--frames`` frames for every N;
* weak scaling: ``--frames`` x N frames.

Each run's input is packed into ``--tasks-per-worker`` x max(N) SequenceFiles
(weak: x N), one task per file on both engines. Times are the job's wall
time (Spark: after a warm-up job on the same cluster; Hadoop: its whole run,
JVM start included, as a user sees it), best and median of ``--repeat``.
Strong: speedup T1/TN, efficiency T1/(N*TN). Weak: scaled speedup N*T1/TN,
efficiency T1/TN.

Balance: a corpus of frames of very different sizes (1/4 to 3x the sample
frames' sides) and crowdedness (empty grey scenes among them), packed into
shards of equal bytes (``gpumr pack``), one Spark task per shard; the
slowest task's run time over the mean (Spark's REST API). Then the same
frames packed into shards of equal estimated cost (pixels, read from the
image headers with :func:`gpumr.core.images.image_size`, greedy longest
first), and the new ratio.

Engines (seed 004's table): ``gpumr run`` with the same face and CT work on
every engine named by ``--table-engines`` (inline, local, hadoop in local
mode, spark on ``local-cluster[N,1,1024]``, dask on a ``LocalCluster`` of N
worker processes) with each worker count: whole runs as a user sees them
(start-up included), strong and weak scaling efficiency against the same
engine's first worker count, and the per-record overhead: the extra time of
``--tiny`` x 2 over ``--tiny`` records of a 32x32 image (no face work to
speak of), in ms per record. inline runs one process, so only its first
worker count. The same baseline for every row: the inline engine.

``--json FILE`` also writes every table's rows as JSON (with the date, the
command line, the core count and the load average); the documentation draws
its scaling figure from ``bench/results/scaling.json`` written this way
(``docs/_ext/gpumr_figures.py``).

Usage: python bench/scaling.py [--workers 1 2] [--frames 48] [--repeat 3] [--engines spark hadoop]
       [--modes strong weak] [--skip-scaling] [--skip-balance]
       [--table-engines inline local hadoop spark dask] [--tiny 200] [--skip-table] [--json FILE]
"""

import argparse
import heapq
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request

from _common import REPO, best_of, frame_corpus, table

from gpumr.engines.spark import run, spark_context
from gpumr.launch.job import run_job
from gpumr.io.packing import pack

HADOOP = os.path.join(os.path.dirname(REPO), "shared", "hadoop")
#: Every table's rows, by table name, as printed: what ``--json`` writes.
RESULTS = {}


def keep(name, header, rows):
    """Print the table (:func:`_common.table` prints it) and keep its rows for ``--json``, as dicts."""
    RESULTS[name] = [dict(zip(header, row)) for row in rows]


def packed(work, name, frames, shards):
    """Pack ``frames`` (paths) into ``shards`` SequenceFiles of equal bytes; return the folder."""
    src = os.path.join(work, name + "-src")
    os.makedirs(src)
    for f in frames:
        os.link(f, os.path.join(src, os.path.basename(f)))  # pack follows no link out of its folder
    out = os.path.join(work, name)
    pack([src], out, shards=shards, progress=False)
    return out


def spark_times(seq, workers, repeat, work):
    sc = spark_context(f"local-cluster[{workers},1,1024]", f"gpumr scaling {workers}")
    sc.setLogLevel("ERROR")
    try:
        out = os.path.join(work, f"spark-out-{workers}")
        run("faces", [seq, "-o", out, "--split-size", "1GiB", "--device", "cpu"], sc=sc)  # warm-up
        return best_of(lambda: run("faces", [seq, "-o", out, "--split-size", "1GiB", "--device", "cpu"],
                                   sc=sc)[0], repeat)
    finally:
        sc.stop()


def hadoop_times(seq, workers, repeat, work):
    from gpumr.jobs.face_detect import MRFaceDetect
    os.environ["PATH"] = os.path.join(HADOOP, "bin") + os.pathsep + os.environ["PATH"]
    os.environ.setdefault("PYTHON", sys.executable)  # where the launcher finds pyspark's Hadoop jars
    extra = ["--hadoop-streaming-jar", os.path.join(HADOOP, "lib", "hadoop-streaming-2.7.5.jar"),
             "--hadoop-tmp-dir", "file://" + os.path.join(work, "hadoop-tmp"),
             "--jobconf", f"mapreduce.local.map.tasks.maximum={workers}", "--python-bin", sys.executable,
             "--device", "cpu"]

    def once():
        cwd = tempfile.mkdtemp(dir=work)  # local mode makes the distributed cache's links in the cwd
        old = os.getcwd()
        os.chdir(cwd)
        try:
            return run_job(MRFaceDetect, [seq], "file://" + os.path.join(cwd, "out"), "hadoop", extra)[0]
        finally:
            os.chdir(old)
    return best_of(once, repeat)


def scaling(a, work, frames):
    rows = []
    engines = [(e, t) for e, t in (("spark", spark_times), ("hadoop", hadoop_times)) if e in a.engines]
    for mode in a.modes:
        for engine, timer in engines:
            t1 = None
            for n in a.workers:
                count = a.frames * (n if mode == "weak" else 1)
                shards = a.tasks_per_worker * (n if mode == "weak" else max(a.workers))
                seq = packed(work, f"{mode}-{engine}-{n}", frames[:count], shards)
                best, median, counts = timer(seq, n, a.repeat, work)
                assert counts.get("records on CPU", 0) == count, counts
                t1 = best if t1 is None else t1
                speedup = (t1 / best) * (n if mode == "weak" else 1)
                eff = t1 / best / (1 if mode == "weak" else n)
                rows.append([mode, engine, n, count, shards, f"{best:.1f}", f"{median:.1f}", f"{speedup:.2f}",
                             f"{eff:.2f}"])
                print(rows[-1], flush=True)
    header = ["scaling", "engine", "workers", "frames", "tasks", "best s", "median s", "speedup", "efficiency"]
    table(f"Scaling, face detection --device cpu, best/median of {a.repeat} (speedup and efficiency against "
          f"the first worker count)", header, rows)
    keep("scaling", header, rows)


def task_times(sc):
    """Run times (s) of the tasks of the last job's first stage, from Spark's REST API."""
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    jobs = json.load(urllib.request.urlopen(f"{base}/jobs"))
    stage = min(jobs[0]["stageIds"])  # newest job first; its map stage
    tasks = json.load(urllib.request.urlopen(f"{base}/stages/{stage}/0/taskList?length=10000"))
    return [t["taskMetrics"]["executorRunTime"] / 1000 for t in tasks if t["status"] == "SUCCESS"]


def uneven_corpus(work, frames, n):
    """``n`` frames of very different sizes and crowdedness (resized sample frames, empty scenes)."""
    import cv2
    import numpy as np
    d = os.path.join(work, "uneven")
    os.makedirs(d)
    scales = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
    out = []
    for i in range(n):
        img = cv2.imread(frames[i % len(frames)])
        s = scales[(i * 7) % len(scales)]
        img = cv2.resize(img, (int(img.shape[1] * s), int(img.shape[0] * s)))
        if i % 5 == 4:
            img = np.full_like(img, 128)  # an empty scene
        path = os.path.join(d, f"uneven_{i:05d}.jpg")
        cv2.imwrite(path, img)
        out.append(path)
    return out


def cost_balanced(work, name, frames, shards):
    """Pack ``frames`` into ``shards`` SequenceFiles of near-equal pixels (from the image headers)."""
    from gpumr.core.images import image_size
    costs = []
    for f in frames:
        w, h = image_size(open(f, "rb").read(64 * 1024))
        costs.append((w * h, f))
    heap = [(0, i) for i in range(shards)]
    groups = [[] for _ in range(shards)]
    for cost, f in sorted(costs, reverse=True):
        load, i = heapq.heappop(heap)
        groups[i].append(f)
        heapq.heappush(heap, (load + cost, i))
    out = os.path.join(work, name)
    os.makedirs(out)
    for i, group in enumerate(groups):
        seq = packed(work, f"{name}-{i}", sorted(group), 1)
        if os.path.isdir(seq):
            (seq,) = [os.path.join(seq, n) for n in os.listdir(seq)]
        os.rename(seq, os.path.join(out, f"part-{i:05d}.seq"))
    return out


def balance(a, work, frames):
    corpus = uneven_corpus(work, frames, a.balance_frames)
    shards = a.balance_tasks
    sc = spark_context(f"local-cluster[{max(a.workers)},1,1024]", "gpumr balance")
    sc.setLogLevel("ERROR")
    rows = []
    try:
        for label, seq in (("equal bytes (gpumr pack)", packed(work, "bytes", corpus, shards)),
                           ("equal pixels (image headers)", cost_balanced(work, "pixels", corpus, shards))):
            out = os.path.join(work, "balance-out")
            run("faces", [seq, "-o", out, "--split-size", "1GiB", "--device", "cpu"], sc=sc)  # warm-up
            ratios, walls = [], []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                run("faces", [seq, "-o", out, "--split-size", "1GiB", "--device", "cpu"], sc=sc)
                walls.append(time.perf_counter() - t0)
                times = task_times(sc)
                ratios.append(max(times) / (sum(times) / len(times)))
            rows.append([label, shards, len(corpus), f"{min(ratios):.2f}", f"{sorted(ratios)[len(ratios) // 2]:.2f}",
                         f"{min(walls):.1f}"])
            print(rows[-1], flush=True)
    finally:
        sc.stop()
    header = ["partitioning", "tasks", "frames", "max/mean best", "max/mean median", "wall best s"]
    table(f"Partition balance, {len(corpus)} frames of 1/4 to 3x size (every 5th an empty scene), {shards} tasks "
          f"on {max(a.workers)} executors; slowest task / mean task run time, best/median of {a.repeat}",
          header, rows)
    keep("balance", header, rows)


def _engine_args(engine, n, work):
    """``gpumr run`` options that give ``engine`` ``n`` workers here."""
    if engine == "local":
        return ["--no-conf", "--num-cores", str(n)]
    if engine == "inline":
        return ["--no-conf"]
    if engine == "hadoop":
        os.environ["PATH"] = os.path.join(HADOOP, "bin") + os.pathsep + os.environ["PATH"]
        os.environ.setdefault("PYTHON", sys.executable)
        from hadoop import cluster
        return ["-c", cluster.CONF, "--hadoop-streaming-jar", cluster.streaming_jar(),
                "--hadoop-tmp-dir", "file://" + os.path.join(work, "hadoop-tmp"),
                "--jobconf", f"mapreduce.local.map.tasks.maximum={n}", "--python-bin", sys.executable]
    if engine == "spark":
        return ["--master", f"local-cluster[{n},1,1024]"]
    return ["--workers", str(n)]  # dask


def _timed(kind, engine, n, work, argv, repeat):
    """Best and median wall time of ``gpumr run KIND`` on ``engine`` with ``n`` workers; and its counters."""
    from gpumr.cli.run import run as gpumr_run
    out = os.path.join(work, f"table-out-{engine}-{n}")
    whole = ["--split-size", "1GiB"] if kind == "faces" and engine in ("spark", "dask") else []  # a task per file
    return best_of(lambda: gpumr_run(kind, engine, [*argv, "-o", out, "--device", "cpu", *whole,
                                                    *_engine_args(engine, n, work)])[0], repeat)


def _tiny(work, count):
    """``count`` records of a 32x32 JPEG, packed into 4 SequenceFiles (as many tasks)."""
    import cv2
    import numpy as np
    d = os.path.join(work, f"tiny-{count}")
    os.makedirs(d)
    ok, data = cv2.imencode(".jpg", np.full((32, 32), 128, np.uint8))
    for i in range(count):
        with open(os.path.join(d, f"t{i:06d}.jpg"), "wb") as f:
            f.write(data.tobytes())
    out = d + ".seq"
    pack([d], out, shards=4, progress=False)
    return out


def _phantom(work, z):
    """Projections of a phantom of ``z`` x 48 x 48 voxels (48 angles); returns the SequenceFile."""
    from gpumr.cli import main as gpumr
    seq = os.path.join(work, f"ct-{z}.seq")
    if os.path.exists(seq):
        return seq
    assert gpumr(["ct", "geometry", "-o", seq + ".json", "--voxels", str(z), "48", "48", "--angles", "48"]) == 0
    assert gpumr(["ct", "phantom", "--geometry", seq + ".json", "-o", seq]) == 0
    return seq


def engine_table(a, work, frames):
    """Seed 004's table: every engine, face and CT work, strong/weak scaling and per-record overhead."""
    rows, base = [], {}
    tiny = {k: _tiny(work, k) for k in (a.tiny, 2 * a.tiny)}
    for engine in a.table_engines:
        counts = a.workers[:1] if engine == "inline" else a.workers
        t1 = {}
        for n in counts:
            row = [engine, n]
            for mode in a.modes:
                m = n if mode == "weak" else 1
                seq = packed(work, f"t-{mode}-{engine}-{n}", frames[:a.frames * m], a.tasks_per_worker * max(counts) * m)
                best, _, c = _timed("faces", engine, n, work, [seq], a.repeat)
                assert c.get("records on CPU", 0) == a.frames * m, c
                ct = _phantom(work, 16 * a.slabs * m)
                cbest, _, c = _timed("backproject", engine, n, work, ["--projections", ct, "--slab", "16"], a.repeat)
                assert c.get("records on CPU", 0) == a.slabs * m, c
                for what, t in ((f"faces {mode}", best), (f"ct {mode}", cbest)):
                    t1.setdefault(what, t)
                    base.setdefault(what, t)
                    eff = t1[what] / t / (1 if mode == "weak" else n)
                    row += [f"{t:.1f}", f"{eff:.2f}", f"{base[what] / t:.2f}"]
            small, _, _ = _timed("faces", engine, n, work, [tiny[a.tiny]], 1)
            large, _, _ = _timed("faces", engine, n, work, [tiny[2 * a.tiny]], 1)
            row.append(f"{max(large - small, 0) / a.tiny * 1000:.2f}")
            rows.append(row)
            print(rows[-1], flush=True)
    header = ["engine", "workers"]
    for mode in a.modes:
        for what in ("faces", "ct"):
            header += [f"{what} {mode} s", "eff", "vs inline"]
    table(f"Engines, gpumr run --device cpu, best of {a.repeat} (whole runs, start-up included): faces "
          f"{a.frames} frames (weak: x workers), CT {a.slabs} slabs of 16x48x48 (weak: x workers); eff = scaling "
          f"efficiency against the engine's first worker count; vs inline = the inline run's time over this one; "
          f"last column: ms per extra tiny record", header + ["ms/record"], rows)
    keep("engines", header + ["ms/record"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)")
    ap.add_argument("--frames", type=int, default=48, help="frames per run (strong) or per worker (weak)")
    ap.add_argument("--tasks-per-worker", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--balance-frames", type=int, default=60)
    ap.add_argument("--balance-tasks", type=int, default=6)
    ap.add_argument("--engines", nargs="+", choices=["spark", "hadoop"], default=["spark", "hadoop"])
    ap.add_argument("--modes", nargs="+", choices=["strong", "weak"], default=["strong", "weak"])
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-balance", action="store_true")
    ap.add_argument("--table-engines", nargs="+", choices=["inline", "local", "hadoop", "spark", "dask"],
                    default=["inline", "local", "hadoop", "spark", "dask"])
    ap.add_argument("--tiny", type=int, default=200, help="tiny records for the per-record overhead (and twice as many)")
    ap.add_argument("--slabs", type=int, default=4, help="CT slabs of 16 slices per run (weak: per worker)")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every table's rows to FILE as JSON")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-bench-scaling-")
    try:
        frames = frame_corpus(work, count=a.frames * max(a.workers))
        if not a.skip_scaling:
            scaling(a, work, frames)
        if not a.skip_balance:
            balance(a, work, frames)
        if not a.skip_table:
            engine_table(a, work, frames)
        if a.json:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump({"date": time.strftime("%Y-%m-%d"), "command": ["bench/scaling.py", *sys.argv[1:]],
                           "cores": os.cpu_count(), "load average": [round(x, 1) for x in os.getloadavg()],
                           **RESULTS}, f, indent=1)
                f.write("\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
