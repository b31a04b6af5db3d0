"""``gpumr pack`` into tmpfs against ``cat`` of the same files, in the same run, and where its time goes.

Corpus: ``--files`` JPEG frames of ~76 KB (the built-in sample frames under new
names) in a folder on tmpfs (``--where``, default /dev/shm), page-cached. Baseline:
``cat`` of the same files into one file on the same tmpfs. Then ``gpumr pack``
(:func:`gpumr.io.packing.pack`, the command's function) into one SequenceFile
there; each the median (and the best) of ``--repeat`` interleaved runs (the best
is the least disturbed by other work on a shared machine). ``--profile`` prints
the profile of one pack (the top functions by their own time).

Usage: python bench/pack_speed.py [--files 3000] [--repeat 5] [--where /dev/shm] [--profile]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from _common import frame_corpus, table

from gpumr.io.packing import pack


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--where", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-pack-bench-", dir=args.where)
    try:
        files = frame_corpus(work, count=args.files, distinct=64)
        src = os.path.dirname(files[0])
        total = sum(os.path.getsize(f) for f in files)
        seq, cat_out = os.path.join(work, "frames.seq"), os.path.join(work, "cat.out")

        def cat():
            with open(cat_out, "wb") as f:
                subprocess.run(["cat", *files], stdout=f, check=True)

        def ours():
            pack([src], seq, force=True, progress=False)

        cat(), ours()  # warm
        times = {"cat": [], "pack": []}
        for _ in range(args.repeat):
            for name, fn in (("cat", cat), ("pack", ours)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        low = {k: min(v) for k, v in times.items()}
        mb = total / 1e6
        table(f"gpumr pack into {args.where or 'the temporary folder'}: {len(files)} files, {mb:.0f} MB "
              f"(mean {total / len(files) / 1e3:.1f} KB), median (and best) of {args.repeat} interleaved runs",
              ["what", "seconds", "MB/s", "vs cat", "best s", "best vs cat"],
              [["cat files > one file (baseline)", f"{med['cat']:.3f}", f"{mb / med['cat']:.0f}", "1.00",
                f"{low['cat']:.3f}", "1.00"],
               ["gpumr pack (files -> .seq)", f"{med['pack']:.3f}", f"{mb / med['pack']:.0f}",
                f"{med['cat'] / med['pack']:.2f}", f"{low['pack']:.3f}", f"{low['cat'] / low['pack']:.2f}"]])
        if args.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.runcall(ours)
            print()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        print(f"\ngpumr pack / cat: {med['cat'] / med['pack']:.2f} (median), {low['cat'] / low['pack']:.2f} (best)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
