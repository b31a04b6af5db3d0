"""Helpers shared by the benchmark scripts: timing and a plain table."""

import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))  # the Hadoop helper lives with the tests


def frame_corpus(work, count=None, megabytes=None, distinct=96):
    """Sample frames repeated under new names: ``count`` of them, or ``megabytes`` worth.

    Returns the sorted paths (in ``work/frames``).
    """
    import shutil

    from gpumr.faces.sample import make_frames
    originals = make_frames(os.path.join(work, "distinct"), count=distinct)
    src = os.path.join(work, "frames")
    os.makedirs(src)
    paths, total = [], 0
    while (count is not None and len(paths) < count) or (megabytes is not None and total < megabytes * 1e6):
        dst = os.path.join(src, f"frame_{len(paths):06d}.jpg")
        shutil.copyfile(originals[len(paths) % len(originals)], dst)
        total += os.path.getsize(dst)
        paths.append(dst)
    return paths


def best_of(fn, repeat=3):
    """Run ``fn`` ``repeat`` times; return (best seconds, median seconds, last result)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), result


def read_in_workers(sc, paths, split_size):
    """Every record of the SequenceFiles ``paths`` read in Spark's Python workers as ``gpumr spark`` reads them.

    The driver plans the splits; each partition reads its byte ranges with
    :func:`gpumr.io.records.read_split` and sums the records and their bytes
    (no other work). Returns ``((records, bytes), tasks)``.
    """
    from gpumr.io.inputs import expand_sized, splits
    items = splits(expand_sized(paths), split_size)

    def read(part):
        from gpumr.io.records import Lost, read_split
        n = size = 0
        for path, start, end in part:
            for r in read_split(path, start, end, path):
                if not isinstance(r, Lost):
                    n, size = n + 1, size + len(r.value)
        yield n, size
    rdd = sc.parallelize(items, len(items)).mapPartitions(read)
    return rdd.reduce(lambda a, b: (a[0] + b[0], a[1] + b[1])), rdd.getNumPartitions()


def table(title, header, rows):
    """Print a fixed-width table."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    for row in [header] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
