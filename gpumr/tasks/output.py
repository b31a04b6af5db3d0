"""What a task writes: output lines, arrays as .npy files, sorted runs and the parts merged from them.

Each file goes into the output's hidden stage under a name of its own attempt, so that two attempts of one task
never write one file and the launcher publishes exactly one attempt of each."""

import bisect
import hashlib
import heapq
import json
import re

import numpy as np

from ..io.joboutput import key_of
from ..io.outputs import HashingWriter
from ..io.remote import locate

#: Bytes of output lines a task gathers before each write into its file.
WRITE_CHUNK = 1 << 20
#: Keys (and their offsets) a map task samples from its run, for the reduce tasks' ranges and seeks.
SAMPLES = 64
#: The folder of the output (and of the stage) that holds the arrays.
ARRAYS = "arrays"
#: The file an attempt that finished writes beside its arrays, listing them: how the arrays reach the launcher on
#: every engine (:func:`finished_arrays`).
ARRAYS_DONE = ".done"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def array_name(key, field):
    """The file name of array ``field`` of record ``key``: the key made safe for any filesystem (a hash added where it
    had to change), then the field: ``z00000.slab.npy``.

    Examples
    --------
    >>> array_name("z00016", "slab")
    'z00016.slab.npy'
    >>> array_name("dir/a b.jpg", "mask")
    'dir_a_b.jpg-39f9f48e.mask.npy'
    """
    safe = _UNSAFE.sub("_", key)[:120]
    if safe.startswith((".", "_")) or safe != key or not safe:
        safe = f"{safe.lstrip('._')[:120]}-{hashlib.sha1(key.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return f"{safe}.{_UNSAFE.sub('_', field)}.npy"


class Arrays:
    """Writes the numpy arrays of results into ``stage/arrays/<attempt>/`` and, once the attempt finishes, lists
    them there for the launcher (:func:`finished_arrays`).

    Parameters
    ----------
    stage : str
        The output transaction's stage (a path or URI).
    attempt : str
        This task attempt's name: its arrays' folder.

    Attributes
    ----------
    written : list of (str, str, int, str)
        ``(name in the output, name in the stage, size, sha256)`` of each array written."""

    def __init__(self, stage, attempt):
        self.stage, self.attempt = stage, attempt
        self.written = []

    def encode(self, key, value):
        """``value`` with each top-level numpy array written as a file and replaced by where it is."""
        if not any(isinstance(v, np.ndarray) for v in value.values()):
            return value
        if self.stage is None:
            raise RuntimeError("a result holds arrays, and this task has no stage to write them")
        out = dict(value)
        if not self.written:
            locate(self.stage).child(f"{ARRAYS}/{self.attempt}").make_folder()
        for field, array in value.items():
            if isinstance(array, np.ndarray):
                name = f"{ARRAYS}/{array_name(key, field)}"
                staged = f"{ARRAYS}/{self.attempt}/{array_name(key, field)}"
                with locate(self.stage).child(staged).open_output() as f:
                    h = HashingWriter(f)
                    np.lib.format.write_array(h, np.ascontiguousarray(array), allow_pickle=False)
                self.written.append((name, staged, *h.digest()))
                out[field] = {"array": name, "shape": list(array.shape), "dtype": array.dtype.str}
        return out

    def close(self):
        """The attempt finished: list its arrays in its :data:`ARRAYS_DONE` file (none written: nothing)."""
        if self.written:
            listing = json.dumps(self.written).encode()
            locate(self.stage).child(f"{ARRAYS}/{self.attempt}/{ARRAYS_DONE}").write_bytes(listing)


def write_lines(stage, name, lines, samples=0):
    """Write ``lines`` (str, without newlines) as file ``name`` in ``stage``."""
    offsets = []  # (key, offset) of every line while the file is small, thinned as it grows
    step, count = 1, 0
    with locate(stage).child(name).open_output() as f:
        out = HashingWriter(f)
        chunk, held = [], 0
        for text in lines:
            data = text.encode("utf-8") + b"\n"
            if samples and count % step == 0:
                offsets.append((key_of(text), out.size + held))
                if len(offsets) >= 4 * samples:
                    offsets, step = offsets[::2], step * 2
            count += 1
            chunk.append(data)
            held += len(data)
            if held >= WRITE_CHUNK:
                out.write(b"".join(chunk))
                chunk, held = [], 0
        out.write(b"".join(chunk))
    sample = offsets[::max(1, len(offsets) // samples)] if samples else []
    return (*out.digest(), sample)


def bounds(samples, reducers):
    """``reducers`` key ranges ``(low, high)`` (None: open) cut at quantiles of the map tasks' sampled keys."""
    keys = sorted(k for run in samples for k, _ in run)
    cuts = sorted(set(keys[len(keys) * r // reducers] for r in range(1, reducers))) if keys else []
    edges = [None, *cuts, None]
    ranges = list(zip(edges[:-1], edges[1:]))
    return ranges + [("\uffff", "\uffff")] * (reducers - len(ranges))  # empty parts where keys are few


def _run_lines(stage, name, sample, low, high):
    """The lines of run ``name`` with keys in ``[low, high)``, read from the sampled offset nearest below ``low``."""
    start = 0
    if low is not None and sample:
        i = bisect.bisect_left([k for k, _ in sample], low) - 1
        start = sample[i][1] if i >= 0 else 0
    with locate(stage).child(name).open_input() as f:
        f.seek(start)
        for raw in f:
            text = raw.decode("utf-8").rstrip("\n")
            k = key_of(text)
            if low is not None and k < low:
                continue
            if high is not None and k >= high:
                return
            yield text


def merge(stage, runs, low, high):
    """The lines of the sorted ``runs`` (``[(name, sample)]``) with keys in ``[low, high)``, merged in order."""
    return heapq.merge(*(_run_lines(stage, name, sample, low, high) for name, sample in runs))


def staged_parts(folder):
    """``{name: ("job/" + name, size, sha256)}`` of the part files an engine's own reducers wrote into ``folder``
    (a location: the stage's ``job/``), to publish."""
    from ..io.outputs import digest
    names = sorted(rel for rel, what, _ in folder.entries() if what == "file" and rel.startswith("part-"))
    return {n: (f"job/{n}", *digest(folder.child(n))) for n in names}


def finished_arrays(stage):
    """The arrays of the attempts that finished (listed in their :data:`ARRAYS_DONE` files), to publish:
    ``{name: (staged, size, sha256)}``; of two attempts of one task, either."""
    folder = stage.child(ARRAYS)
    if folder.stat()[0] != "folder":
        return {}
    parts = {}
    for rel, what, _ in folder.entries():
        if what == "file" and rel.endswith("/" + ARRAYS_DONE):
            with folder.child(rel).open_input() as f:
                for name, staged, size, sha in json.loads(f.read().decode("utf-8")):
                    parts.setdefault(name, (staged, size, sha))
    return parts
