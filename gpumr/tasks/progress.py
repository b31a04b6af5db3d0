"""Progress of a running job, on every engine: tasks report, the launcher shows.

What the bar and lines show: :doc:`/concepts/record-path`."""

import logging
import os
import sys
import threading
import time

from ..core.counters import BAD, FALLBACKS, ON_CPU, ON_GPU
from ..errors import GpumrError
from ..trusted import check_folder, open_regular, warn_once

#: What a task's progress file holds, in this order.
FIELDS = (ON_CPU, ON_GPU, BAD, FALLBACKS, "input bytes")
#: Seconds between progress lines when stderr is not a terminal.
LINE_EVERY = 30.0
_WIDTH = 20


class TaskProgress:
    """A task's side: counts kept in memory and written to its progress file now and then."""

    def __init__(self, folder=None, every=0.5):
        self.counts = dict.fromkeys(FIELDS, 0)
        self._fd = None
        self._every, self._last = every, 0.0
        if folder and os.path.isdir(folder):
            path = os.path.join(folder, f"task-{os.getpid()}-{id(self):x}")
            try:
                check_folder(folder, "gpumr's progress files")
                self._fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, what="a progress file")
            except GpumrError as exc:  # (gpumr.trusted.Untrusted) no progress shown, and why
                warn_once(f"{exc}; this task's progress is not shown")

    def count(self, name, n=1):
        """Add ``n`` to counter ``name`` (other names are ignored)."""
        if name in self.counts:
            self.counts[name] += n
            self._maybe_write()

    def set_bytes(self, n):
        """How many input bytes this task has consumed so far."""
        self.counts["input bytes"] = n
        self._maybe_write()

    def _maybe_write(self, force=False):
        if self._fd is None:
            return
        now = time.monotonic()
        if force or now - self._last >= self._every:
            self._last = now
            line = "".join(str(self.counts[f]).rjust(_WIDTH) for f in FIELDS) + "\n"
            os.pwrite(self._fd, line.encode("ascii"), 0)

    def close(self):
        """Write the final counts and close the file."""
        if self._fd is not None:
            self._maybe_write(force=True)
            os.close(self._fd)
            self._fd = None


def read_totals(folder):
    """The sum of every task's progress file in ``folder``."""
    totals = dict.fromkeys(FIELDS, 0)
    try:
        names = os.listdir(folder)
    except OSError:
        return totals
    for name in names:
        try:
            with open(open_regular(os.path.join(folder, name), what="a progress file"), "rb") as f:
                line = f.read(_WIDTH * len(FIELDS))
            values = [int(line[i * _WIDTH:(i + 1) * _WIDTH]) for i in range(len(FIELDS))]
        except (OSError, ValueError, GpumrError):
            continue  # being written this instant (or not a progress file): next time
        for field, v in zip(FIELDS, values):
            totals[field] += v
    return totals


class Display:
    """The launcher's side: a thread that shows the job's progress until stopped.

    Parameters
    ----------
    folder : str or None
        The progress folder tasks on this machine write to.
    total_bytes : int or None
        Input bytes of the whole job, for a percentage; None when unknown.
    label : str
    stream : file, optional
    shown : bool
        Whether to show anything (nothing where no task can report). stderr by default; a bar on a terminal, plain
        lines otherwise."""

    def __init__(self, folder=None, total_bytes=None, label="gpumr", stream=None, shown=True):
        self.folder, self.total, self.label, self.shown = folder, total_bytes, label, shown
        self.stream = stream or sys.stderr
        self._finished = dict.fromkeys(FIELDS, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = None
        self._thread = threading.Thread(target=self._run, name="gpumr-progress", daemon=True)

    def done(self, counts, input_bytes=0):
        """A task finished with these counters (and read this many input bytes)."""
        with self._lock:
            for name in FIELDS:
                self._finished[name] += counts.get(name, 0)
            self._finished["input bytes"] += input_bytes

    def totals(self):
        """The job's counts so far: each field the larger of the finished tasks' and the progress files'."""
        files = read_totals(self.folder) if self.folder else dict.fromkeys(FIELDS, 0)
        with self._lock:
            return {name: max(files[name], self._finished[name]) for name in FIELDS}

    def __enter__(self):
        from ..log import logger, quiet
        isatty = getattr(self.stream, "isatty", None)
        terminal = isatty is not None and isatty()
        if quiet() or not self.shown or not (terminal or logger(__name__).isEnabledFor(logging.DEBUG)):
            self._thread = None  # -q, nothing to show, or lines no one asked for: the engines' reports still count
            return self
        if terminal:
            from tqdm import tqdm
            self._bar = tqdm(total=self.total, unit="B", unit_scale=True, desc=self.label, file=self.stream,
                             leave=False, dynamic_ncols=True)
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._bar is not None:
            self._bar.close()

    def _run(self):
        last_line = time.monotonic()
        while not self._stop.wait(1.0):
            t = self.totals()
            records = t[ON_CPU] + t[ON_GPU] + t[BAD]
            detail = f"{records} records so far ({t[ON_CPU]} CPU, {t[ON_GPU]} GPU, {t[BAD]} bad)"
            if self._bar is not None:
                self._bar.n = min(t["input bytes"], self.total or t["input bytes"])
                self._bar.set_postfix_str(detail, refresh=True)
            elif time.monotonic() - last_line >= LINE_EVERY:
                last_line = time.monotonic()
                share = f"{100 * t['input bytes'] / self.total:.0f}% of the input, " if self.total else ""
                rate = records / max(time.monotonic() - self._t0, 1e-9)
                from ..log import logger
                logger(__name__).debug("%s: %s%s, %.1f records/s", self.label, share, detail, rate)
