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


def table(title, header, rows):
    """Print a fixed-width table."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    for row in [header] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
