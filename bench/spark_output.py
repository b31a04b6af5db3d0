"""Spark writing its output: saveAsTextFile against gpumr's one writer, to local disk, file:// and an S3 server.

The same RDD of output lines (the face job's JSON lines, synthetic: no
image work) is written

1. by ``saveAsTextFile`` into a new local folder (Hadoop's output committer:
   how ``gpumr spark -o DIR`` wrote before, and the baseline),
2. by gpumr's writer (each task writes its part through the filesystem
   layer into the hidden stage, :func:`gpumr.tasks.output.write_lines`, and
   the driver publishes one attempt per part under the ownership rule, with
   the proof, :func:`gpumr.io.outputs.open_output`: what every engine's
   tasks do) to a local folder, to a ``file://`` URI (the rename path HDFS takes)
   and to a bucket of moto's S3 server on loopback (a thread of this
   process, so Python-bound: far below a real S3's throughput).

Ratio = time / saveAsTextFile's. Usage:
python bench/spark_output.py [--lines 400000] [--parts 8] [--master local-cluster[2,1,1024]] [--repeat 3]
"""

import argparse
import os
import shutil
import sys
import tempfile

from _common import best_of, table

from gpumr.engines.spark import spark_context
from gpumr.io.outputs import open_output
from gpumr.tasks.output import write_lines

#: One output line of the face job, as its JSONProtocol writes it (about 150 bytes).
LINE = '"frames/frame_{:08d}.jpg"\t{{"device": "cpu", "faces": [[211, 97, 64, 64], [402, 130, 58, 58]], ' \
       '"height": 480, "width": 640}}'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=400_000, help="output lines (default 400,000, about 60 MB)")
    ap.add_argument("--parts", type=int, default=8, help="partitions, one part file each (default 8)")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from s3server import BUCKET, S3Server
    server = S3Server()
    os.environ.update(server.env)  # this process and the Spark JVMs (and their Python workers) inherit it
    work = tempfile.mkdtemp(prefix="gpumr-bench-spark-output-")
    sc = spark_context(a.master, "gpumr bench spark_output")
    runs = iter(range(10 ** 6))
    try:
        lines = sc.parallelize(range(a.lines), a.parts).map(LINE.format).cache()
        size = lines.map(lambda line: len(line) + 1).sum()  # also computes the cache: every case reads it

        def save_as_text_file():
            lines.saveAsTextFile(f"file://{work}/saved-{next(runs)}")

        def gpumr_writer(where):
            def write():
                out = open_output(where(next(runs)), "gpumr bench", folder=True)
                stage = str(out.begin())

                def task(i, part):
                    name = f"part-{i:05d}"
                    yield name, *write_lines(stage, name, part)[:2]
                parts = lines.mapPartitionsWithIndex(task).collect()
                out.commit({name: (name, size, sha) for name, size, sha in parts})
            return write
        cases = [("saveAsTextFile, local folder (before)", save_as_text_file),
                 ("gpumr writer, local folder", gpumr_writer(lambda i: f"{work}/local-{i}")),
                 ("gpumr writer, file:// URI", gpumr_writer(lambda i: f"file://{work}/uri-{i}")),
                 ("gpumr writer, S3 server (moto, loopback)", gpumr_writer(lambda i: f"s3://{BUCKET}/out-{i}"))]
        rows, base = [], None
        for name, write in cases:
            write()  # warm-up: workers started, pyarrow imported
            best, median, _ = best_of(write, a.repeat)
            base = base or best
            rows.append([name, f"{best:.2f}", f"{median:.2f}", f"{size / 1e6 / best:.0f}", f"{best / base:.2f}"])
        table(f"Spark output, {a.master}, {a.lines} lines ({size / 1e6:.0f} MB) in {a.parts} parts, best/median of "
              f"{a.repeat}", ["writer, destination", "best s", "median s", "MB/s", "time / saveAsTextFile"], rows)
    finally:
        sc.stop()
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
