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
image headers with :func:`gpumr.faces.decode.image_size`, greedy longest
first), and the new ratio.

Usage: python bench/scaling.py [--workers 1 2] [--frames 48] [--repeat 3] [--engines spark hadoop]
       [--modes strong weak] [--skip-scaling] [--skip-balance]
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
from gpumr.engines.streaming import run_job
from gpumr.io.packing import pack

HADOOP = os.path.join(os.path.dirname(REPO), "shared", "hadoop")


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
    table(f"Scaling, face detection --device cpu, best/median of {a.repeat} (speedup and efficiency against "
          f"the first worker count)",
          ["scaling", "engine", "workers", "frames", "tasks", "best s", "median s", "speedup", "efficiency"], rows)


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
    from gpumr.faces.decode import image_size
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
    table(f"Partition balance, {len(corpus)} frames of 1/4 to 3x size (every 5th an empty scene), {shards} tasks "
          f"on {max(a.workers)} executors; slowest task / mean task run time, best/median of {a.repeat}",
          ["partitioning", "tasks", "frames", "max/mean best", "max/mean median", "wall best s"], rows)


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
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-bench-scaling-")
    try:
        frames = frame_corpus(work, count=a.frames * max(a.workers))
        if not a.skip_scaling:
            scaling(a, work, frames)
        if not a.skip_balance:
            balance(a, work, frames)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
