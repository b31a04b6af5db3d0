"""Inputs at URIs: Spark reading from an S3 server against local disk, and the manifest path's per-file start-up.

1. Spark: the same SequenceFiles of frames, on local disk and in a bucket of
   moto's S3 server on loopback (started here; a thread of this process,
   so its throughput is Python's, far below a real S3's), read by the Python
   workers exactly as ``gpumr spark`` reads them (the driver lists and cuts
   byte ranges, :func:`gpumr.io.records.read_split` per range, every record's
   bytes summed; no image work). Baseline: local disk; ratio = S3 time / local.
2. The mrjob manifest path, per input file, as a fresh process each time (as
   a map task is): mrjob's way, ``hadoop fs -copyToLocal URI PATH`` and then
   reading the copy, against gpumr's, reading the URI through pyarrow (the
   import included). Baseline: ``hadoop fs``; ratio = layer time / hadoop fs.
   Needs ``hadoop`` on PATH (shared/hadoop/bin); skipped otherwise.

Usage: python bench/remote_input.py [--mb 100] [--split-size 16MiB] [--master local-cluster[2,1,1024]] [--repeat 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _common import best_of, frame_corpus, read_in_workers, table

from gpumr.engines.spark import spark_context
from gpumr.io.packing import pack
from gpumr.sizes import parse_size

#: A fresh Python reading every record of the SequenceFile (path or URI) argv[1] through gpumr's split reader.
READ = ("import sys; from gpumr.io.records import Lost, read_split; "
        "n = sum(1 for r in read_split(sys.argv[1]) if not isinstance(r, Lost)); assert n > 0")


def spark_rows(seq, uri, a):
    sc = spark_context(a.master, "gpumr bench remote_input")
    rows, results = [], {}
    try:
        for name, where in (("local disk", seq), ("S3 server (moto, loopback)", uri)):
            split = parse_size(a.split_size)
            read_in_workers(sc, [where], split)  # warm-up: page cache, workers started, pyarrow imported
            best, median, (counts, tasks) = best_of(lambda: read_in_workers(sc, [where], split), a.repeat)
            results[name] = (best, counts)
            rows.append([name, tasks, counts[0], f"{counts[1] / 1e6:.0f}", f"{best:.2f}", f"{median:.2f}",
                         f"{counts[1] / 1e6 / best:.0f}"])
    finally:
        sc.stop()
    (b0, c0), (b1, c1) = results.values()
    assert c0 == c1, f"the two inputs disagree: {c0} != {c1}"
    for row, (best, _) in zip(rows, results.values()):
        row.append(f"{best / b0:.2f}")
    return rows


def per_file_rows(one, uri, s3_uri, a):
    hadoop = shutil.which("hadoop")
    cases = [("Python reads the URI through pyarrow (file://)", [[sys.executable, "-c", READ, uri]]),
             ("Python reads the URI through pyarrow (s3://, moto)", [[sys.executable, "-c", READ, s3_uri]])]
    if hadoop:
        copy = os.path.join(os.path.dirname(one), "copy.seq")
        cases.insert(0, ("hadoop fs -copyToLocal, then Python reads the copy",
                         [[hadoop, "fs", "-copyToLocal", uri, copy], [sys.executable, "-c", READ, copy]]))
    rows, base = [], None
    for name, commands in cases:
        times = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            for cmd in commands:  # (the local hadoop launcher finds its jars in this Python's pyspark)
                subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, PYTHON=sys.executable))
            times.append(time.perf_counter() - t0)
            if hadoop and commands[0][0] == hadoop:
                os.unlink(copy)
        best = min(times)
        base = base or best
        rows.append([name, f"{best:.2f}", f"{statistics.median(times):.2f}", f"{best / base:.2f}"])
    if not hadoop:
        rows.append(["hadoop fs -copyToLocal: skipped (no hadoop on PATH)", "", "", ""])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="corpus size (default 100 MB)")
    ap.add_argument("--shards", type=int, default=4, help="SequenceFiles (default 4)")
    ap.add_argument("--split-size", default="16MiB")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from s3server import BUCKET, S3Server
    server = S3Server()
    os.environ.update(server.env)  # this process, the Spark JVMs and the per-file processes inherit it
    work = tempfile.mkdtemp(prefix="gpumr-bench-remote-input-")
    try:
        frames = frame_corpus(work, megabytes=a.mb)
        seq = os.path.join(work, "seq")
        pack([os.path.dirname(frames[0])], seq, shards=a.shards, progress=False)
        for name in sorted(os.listdir(seq)):
            with open(os.path.join(seq, name), "rb") as f:
                server.put(f"bench/seq/{name}", f.read())
        rows = spark_rows(seq, f"s3://{BUCKET}/bench/seq", a)
        table(f"Spark input, {a.master}, {len(frames)} frames ({a.mb} MB) in {a.shards} SequenceFiles, splits of "
              f"{a.split_size}, best/median of {a.repeat}",
              ["input", "tasks", "records", "MB", "best s", "median s", "MB/s", "time / local"], rows)
        one = os.path.join(seq, "part-00000.seq")
        size = os.path.getsize(one)
        rows = per_file_rows(one, "file://" + one, f"s3://{BUCKET}/bench/seq/part-00000.seq", a)
        table(f"Manifest path, per input file ({size / 1e6:.0f} MB SequenceFile), a fresh process each, "
              f"best/median of {a.repeat}", ["per file", "best s", "median s", "time / hadoop fs"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
