"""What the ownership rule costs: outputs through gpumr.io.outputs against the bare atomic write.

Same run, same data, files page-cached (written and read back before timing):

* one file of ``--mb`` MB, new and then replacing its earlier self:
  baseline ``seqfile.atomic.AtomicFile`` (temporary name, fsync, rename);
  gpumr ``FileOutput`` (the same, plus hashing the new file, the proof
  written before and after the rename, and for a replacement the old file
  set aside, hashed and removed);
* a folder of ``--parts`` files of ``--mb`` MB in all, new and then
  replacing its earlier self: baseline ``temp_dir_beside`` + writes +
  ``swap_into_place`` + removing the old folder; gpumr ``FolderOutput``
  (plus hashing every part, the proof, and removing only what it vouches for).

The extra time is reading (hashing) what is written, and the replaced
output once more; memory stays one 1 MiB read buffer whatever the size.

Usage: python bench/outputs.py [--mb 256] [--parts 16] [--repeat 3]
"""

import argparse
import os
import shutil
import tempfile
import time

from _common import table

from gpumr.io.outputs import FileOutput, FolderOutput
from seqfile.atomic import AtomicFile, swap_into_place, temp_dir_beside, write_bytes


def plain_file(path, data):
    with AtomicFile(path) as f:
        f.write(data)


def gpumr_file(path, data):
    with FileOutput(path, "bench") as f:
        f.write(data)


def plain_folder(path, parts):
    stage = temp_dir_beside(path)
    for i, part in enumerate(parts):
        write_bytes(os.path.join(stage, f"part-{i:05d}"), part)
    old = swap_into_place(stage, path)
    if old:
        shutil.rmtree(old)


def gpumr_folder(path, parts):
    with FolderOutput(path, "bench") as stage:
        for i, part in enumerate(parts):
            write_bytes(os.path.join(stage, f"part-{i:05d}"), part)


def timed(fn, path, payload, new, repeat):
    """Best seconds of ``fn(path, payload)``: onto nothing (``new``), or over its own earlier output."""
    best = None
    for _ in range(repeat):
        fn(path, payload)  # the earlier output, page-cached
        if new:
            for p in (path, os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.gpumr")):
                if os.path.isdir(p):
                    shutil.rmtree(p)
                elif os.path.exists(p):
                    os.unlink(p)
        t0 = time.perf_counter()
        fn(path, payload)
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data = os.urandom(args.mb << 20)
    parts = [data[i::args.parts] for i in range(args.parts)]
    rows = []
    work = tempfile.mkdtemp(prefix="gpumr-bench-outputs-")
    try:
        for what, plain, ours, payload in (("file", plain_file, gpumr_file, data),
                                           (f"folder of {args.parts}", plain_folder, gpumr_folder, parts)):
            for case in ("new", "replacing"):
                times = [timed(fn, os.path.join(work, f"{what[:6]}-{i}"), payload, case == "new", args.repeat)
                         for i, fn in enumerate((plain, ours))]
                rows.append([what, case, args.mb, f"{times[0]:.3f}", f"{times[1]:.3f}", f"{times[1] / times[0]:.2f}"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table(f"outputs: the ownership rule against the bare atomic write (best of {args.repeat})",
          ["output", "case", "MB", "atomic s", "gpumr s", "ratio"], rows)


if __name__ == "__main__":
    main()
