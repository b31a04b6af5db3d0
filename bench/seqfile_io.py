"""Pack and read throughput of seqfile against same-run baselines.

Corpus: ~76 KB JPEG frames (the built-in sample frames, repeated under new
names) of at least 200 MB, page-cached by a warm-up pass. Baselines:

* copy: ``cat`` of the same files into one file (pack), and ``cat`` of the
  SequenceFile to /dev/null (read);
* Hadoop: its ``SequenceFile.Writer`` / ``Reader`` (uncompressed,
  RawLocalFileSystem) timed inside one JVM with ``System.nanoTime`` around
  the write and read loops only; the records are already in the JVM's memory,
  so Hadoop's write figure excludes reading the source files, unlike ours.

Usage: python bench/seqfile_io.py [--mb 200] [--repeat 3]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from _common import best_of, frame_corpus, table

import seqfile
from gpumr.io.packing import pack


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-bench-")
    try:
        run(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work, args):
    files = frame_corpus(work, megabytes=args.mb, distinct=64)
    src = os.path.dirname(files[0])
    n, total = len(files), sum(os.path.getsize(f) for f in files)
    print(f"corpus: {n} frames, {total / 1e6:.0f} MB, mean {total / n / 1e3:.1f} KB")
    seq = os.path.join(work, "frames.seq")
    cat_out = os.path.join(work, "cat.out")

    def cat_pack():
        with open(cat_out, "wb") as f:
            subprocess.run(["cat", *files], stdout=f, check=True)

    def our_pack():
        pack([src], seq, force=True, progress=False)

    records = [(os.path.basename(p), open(p, "rb").read()) for p in files]

    def our_write_mem():
        with seqfile.Writer(seq) as w:
            for k, v in records:
                w.append(k, v)

    def cat_read():
        subprocess.run(["cat", seq], stdout=subprocess.DEVNULL, check=True)

    def our_read():
        got = 0
        for _, v, _ in seqfile.Reader(seq):
            got += len(v)
        assert got == total
        return got

    for fn in (cat_pack, our_pack, cat_read, our_read):  # warm the page cache
        fn()
    r = args.repeat
    t_cat_pack = best_of(cat_pack, r)[0]
    t_pack = best_of(our_pack, r)[0]
    t_write_mem = best_of(our_write_mem, r)[0]
    t_cat_read = best_of(cat_read, r)[0]
    t_read = best_of(our_read, r)[0]

    hadoop_w = hadoop_r = None
    try:
        from hadoop import Hadoop, write_framing
        h = Hadoop(os.path.join(work, "hadoop"))
        framing = os.path.join(work, "records.frames")
        write_framing(framing, records)
        res = h.bench(os.path.join(work, "hadoop.seq"), framing, r + 1)
        hadoop_w, hadoop_r = res["write_s"], res["read_s"]
    except Exception as exc:  # noqa: BLE001 (the Hadoop baseline's failure is printed; the rest runs)
        print(f"Hadoop baseline unavailable: {exc}", file=sys.stderr)

    mb = total / 1e6
    rows = [
        ["pack: cat files > one file (baseline)", f"{mb / t_cat_pack:8.0f}", "1.00"],
        ["pack: gpumr pack (files -> .seq)", f"{mb / t_pack:8.0f}", f"{t_cat_pack / t_pack:.2f}"],
        ["pack: seqfile.Writer (memory -> .seq)", f"{mb / t_write_mem:8.0f}", f"{t_cat_pack / t_write_mem:.2f}"],
    ]
    if hadoop_w:
        rows.append(["pack: Hadoop Writer in JVM (memory -> .seq)", f"{mb / hadoop_w:8.0f}", f"{t_cat_pack / hadoop_w:.2f}"])
    rows += [
        ["read: cat .seq > /dev/null (baseline)", f"{mb / t_cat_read:8.0f}", "1.00"],
        ["read: seqfile.Reader", f"{mb / t_read:8.0f}", f"{t_cat_read / t_read:.2f}"],
    ]
    if hadoop_r:
        rows.append(["read: Hadoop Reader in JVM", f"{mb / hadoop_r:8.0f}", f"{t_cat_read / hadoop_r:.2f}"])
    table(f"seqfile I/O, {n} records, {mb:.0f} MB, best of {r}", ["what", "MB/s", "vs copy"], rows)
    if hadoop_w:
        print(f"\nours/Hadoop: pack {hadoop_w / t_pack:.2f}x (files) {hadoop_w / t_write_mem:.2f}x (memory), "
              f"read {hadoop_r / t_read:.2f}x")


if __name__ == "__main__":
    main()
