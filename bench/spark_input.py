"""Spark input: Hadoop's SequenceFile input format (JVM) against gpumr's split reader in the Python workers.

Both read the same SequenceFiles of frames (~76 KB JPEGs) in splits of the
same size on the same cluster and hand every record's bytes to Python code
that sums their lengths (no image work), so the figures are the cost of
getting ``(key, bytes)`` into a Python worker:

* ``hadoop``: ``sc.newAPIHadoopFile`` with ``SequenceFileInputFormat``
  (Text, BytesWritable): the JVM reads and splits, then each record is
  converted (``BytesWritable`` -> Python bytes) and pickled across to Python;
* ``read_split``: the driver cuts byte ranges, each Python worker reads its
  own with :func:`gpumr.io.records.read_split` (what ``gpumr spark`` does).

Usage: python bench/spark_input.py [--mb 200] [--split-size 16MiB] [--master local-cluster[2,1,1024]] [--repeat 3]
"""

import argparse
import os
import shutil
import sys
import tempfile

from _common import best_of, frame_corpus, read_in_workers, table

from gpumr.engines.spark import spark_context
from gpumr.io.packing import pack
from gpumr.sizes import parse_size


def via_hadoop(sc, folder, split_size):
    conf = {"mapreduce.input.fileinputformat.split.maxsize": str(split_size),
            "mapreduce.input.fileinputformat.split.minsize": "1"}
    rdd = sc.newAPIHadoopFile("file://" + folder, "org.apache.hadoop.mapreduce.lib.input.SequenceFileInputFormat",
                              "org.apache.hadoop.io.Text", "org.apache.hadoop.io.BytesWritable", conf=conf)
    return rdd.map(lambda kv: (1, len(kv[1]))).reduce(lambda a, b: (a[0] + b[0], a[1] + b[1])), rdd.getNumPartitions()


def via_read_split(sc, folder, split_size):
    return read_in_workers(sc, [folder], split_size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="corpus size (default 200 MB)")
    ap.add_argument("--shards", type=int, default=4, help="SequenceFiles (default 4)")
    ap.add_argument("--split-size", default="16MiB")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    split_size = parse_size(a.split_size)
    work = tempfile.mkdtemp(prefix="gpumr-bench-spark-input-")
    try:
        frames = frame_corpus(work, megabytes=a.mb)
        seq = os.path.join(work, "seq")
        pack([os.path.dirname(frames[0])], seq, shards=a.shards, progress=False)
        sc = spark_context(a.master, "gpumr bench spark_input")
        sc.setLogLevel("ERROR")
        rows, results = [], {}
        try:
            for name, fn in (("read_split (Python workers)", via_read_split), ("hadoop input format (JVM)", via_hadoop)):
                fn(sc, seq, split_size)  # warm-up: page cache, Python workers started
                best, median, (counts, parts) = best_of(lambda: fn(sc, seq, split_size), a.repeat)
                results[name] = (best, counts)
                rows.append([name, parts, counts[0], f"{counts[1] / 1e6:.0f}", f"{best:.2f}", f"{median:.2f}",
                             f"{counts[1] / 1e6 / best:.0f}"])
        finally:
            sc.stop()
        (b0, c0), (b1, c1) = results.values()
        assert c0 == c1, f"the two readers disagree: {c0} != {c1}"
        table(f"Spark input, {a.master}, {len(frames)} frames in {a.shards} SequenceFiles, splits of "
              f"{a.split_size}, best/median of {a.repeat}",
              ["reader", "tasks", "records", "MB", "best s", "median s", "MB/s"], rows)
        print(f"\nhadoop input format / read_split time: {b1 / b0:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
