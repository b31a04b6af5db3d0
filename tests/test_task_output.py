"""What tasks write: sorted runs with sampled offsets, reduce ranges that cover every line once, reads bounded by
the range; arrays as .npy files named by their record; lines as the same bytes on every engine."""

import json
import os
import random

import numpy as np

from gpumr.io import joboutput
from gpumr.tasks import output


def test_ranges_cover_every_line_once_and_a_range_is_read_from_its_sampled_offset(tmp_path, monkeypatch):
    """Each reduce task read every map file whole (and the client held samples of whole lines): now a run is read
    from the sampled offset nearest below the range, one line at a time, and samples are keys only."""
    rng = random.Random(3)
    runs = []
    every = []
    for r in range(4):
        lines = sorted(joboutput.line(f"k{rng.randrange(10 ** 6):07d}", {"v": "x" * rng.randrange(200)})
                       for _ in range(2000))
        every += lines
        size, sha, sample = output.write_lines(str(tmp_path), f"map-{r}", lines, output.SAMPLES)
        assert size == os.path.getsize(tmp_path / f"map-{r}") and len(sample) <= 2 * output.SAMPLES
        assert all(len(k) < 20 for k, _ in sample)  # keys, not whole lines
        runs.append((f"map-{r}", sample))
    ranges = output.bounds([s for _, s in runs], 5)
    assert len(ranges) == 5
    read = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f, self.start = f, None

        def seek(self, pos):
            self.start = pos
            read.append(pos)
            return self.f.seek(pos)

        def __iter__(self):
            return iter(self.f)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    from gpumr.io.remote import location
    monkeypatch.setattr(location.Location, "open_input", lambda self, *a, **k: Counting(real_open(self.local, "rb")))
    merged = [list(output.merge(str(tmp_path), runs, low, high)) for low, high in ranges]
    assert [ln for part in merged for ln in part] == sorted(every)  # every line once, in order across the parts
    assert all(part == sorted(part) for part in merged)
    assert max(read) > 0 and sum(1 for p in read if p > 0) >= 3 * len(runs)  # later ranges start inside the runs


def test_arrays_are_npy_files_named_by_their_record_and_listed_for_the_launcher(tmp_path):
    arrays = output.Arrays(str(tmp_path), "attempt-1")
    slab = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    value = arrays.encode("z00016", {"z": [16, 18], "slab": slab, "n": np.int64(3)})
    assert value["slab"] == {"array": "arrays/z00016.slab.npy", "shape": [2, 3, 4], "dtype": "<f4"}
    ((name, staged, size, sha),) = arrays.written
    assert name == "arrays/z00016.slab.npy" and staged == "arrays/attempt-1/z00016.slab.npy"
    assert np.array_equal(np.load(tmp_path / staged), slab) and size == os.path.getsize(tmp_path / staged)
    from gpumr.io.remote import locate
    assert output.finished_arrays(locate(str(tmp_path))) == {}  # (listed once the attempt finishes)
    arrays.close()
    assert output.finished_arrays(locate(str(tmp_path))) == {name: (staged, size, sha)}
    assert json.loads(joboutput.line("z00016", value).split("\t")[1])["n"] == 3  # numpy scalars are JSON numbers
    assert output.array_name("a/b c.jpg", "mask").startswith("a_b_c.jpg-") and "/" not in output.array_name("../x", "m")
    assert output.array_name(".hidden", "m").split("-")[0] == "hidden"


def test_a_line_is_the_same_bytes_whatever_json_library_is_installed():
    assert joboutput.line("é/1.jpg", {"faces": [[1, 2, 3, 4]], "device": "cpu"}) == \
        '"\\u00e9/1.jpg"\t{"faces": [[1, 2, 3, 4]], "device": "cpu"}'
