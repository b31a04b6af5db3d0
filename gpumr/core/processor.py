"""Running a workload over records, choosing a device per record: the record flow every engine shares.

(key, bytes) -> decode -> choose a device -> the CPU or GPU batch -> the output value (the result with its
``device``, or an ``error`` naming the record): every record comes out exactly once, as a value; the task writes
and counts its line."""

import time

from ..log import logger, say_once
from ..sizes import human
from .badrecord import BadRecord
from .counters import CPU_MS, FALLBACKS, GPU_MS, LOST, LOST_BYTES
from .workload import RESERVED

log = logger(__name__)

#: The most of an exception's message an error line keeps.
REASON_CHARS = 300


def reason_of(exc):
    """An exception as the short reason of an error line: ``Type: message`` (a BadRecord's message as it is)."""
    if isinstance(exc, BadRecord):
        return str(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:REASON_CHARS]}" if text else type(exc).__name__


def plain_result(key, result, device):
    """The output value of a result: a dict, with ``device`` added; BadRecord if the result is not a dict, or names a
    key of the output format's own (:data:`gpumr.core.workload.RESERVED`).

    Examples
    --------
    >>> plain_result("a.png", {"mean": 3.5}, "cpu")
    {'mean': 3.5, 'device': 'cpu'}
    >>> plain_result("a.png", {"error": 0.25, "device": "camera-3"}, "cpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumr.core.badrecord.BadRecord: the result has keys 'error' and 'device', which the output format keeps ...
    """
    if not isinstance(result, dict):
        raise BadRecord(f"the workload returned a {type(result).__name__}, not a dict")
    taken = [k for k in result if k in RESERVED]
    if taken:
        many = len(taken) > 1
        names = " and ".join([", ".join(map(repr, taken[:-1])), repr(taken[-1])] if many else [repr(taken[0])])
        raise BadRecord(f"the result has {'keys' if many else 'key'} {names}, which the output format keeps for "
                        f"itself ({', '.join(RESERVED)}): rename {'them' if many else 'it'} in the workload")
    return {**result, "device": device}


class Processor:
    """Runs a workload over records, choosing a device per record.

    Parameters
    ----------
    workload : gpumr.core.Workload
        Set up (:meth:`Workload.setup` has run).
    options : namespace
        The options.
    chooser : gpumr.devices.chooser.DeviceChooser
    device_for : callable, optional
        ``device_for(choice)``: the device object :meth:`Workload.gpu_batch` gets; None: no GPU path here (every
        record on the CPU).
    count : callable, optional
        ``count(name, amount)``: the counters of the work (device time, fallbacks, lost input); each record's own
        counter (:func:`gpumr.core.counters.outcome`) is added where its line is written."""

    def __init__(self, workload, options, chooser, device_for=None, count=None):
        self.workload, self.options, self.chooser = workload, options, chooser
        self.device_for = device_for
        self.count = count or (lambda name, n=1: None)
        self._pending = []
        self._oversize = False  # a record too large for every GPU here was logged

    def process(self, records):
        """Yield ``(key, output value)`` for every ``(key, value)`` record, each exactly once: a dict, the result with
        its ``device`` (:func:`plain_result`) or ``{"error": reason}``."""
        for key, value in records:
            yield from self.feed(key, value)
        yield from self.flush()

    def feed(self, key, value):
        """Take one record; yield the outputs that are ready."""
        try:
            item = self.workload.load(key, value, self.options)
        except Exception as exc:  # noqa: BLE001 (a record that does not decode is its error line)
            yield self.bad(key, reason_of(exc))
            return
        self._pending.append((key, item))
        limit = self.workload.gpu_records if self.device_for is not None else self.workload.cpu_records
        if len(self._pending) >= limit:
            yield from self.flush()

    def flush(self):
        """Run every decoded record still waiting; yield their outputs."""
        while self._pending:
            if self.device_for is None:
                yield from self._cpu(self._take(self.workload.cpu_records))
                continue
            n = len(self._pending)
            memory = self._memory(n)
            while n > 1 and not self.chooser.fits(memory):
                n //= 2
                memory = self._memory(n)
            if not self._oversize and not self.chooser.fits(memory):
                self._oversize = True
                say_once(log, f"{self.workload.name}: a record needs more device memory ({human(memory)}) than any GPU "
                         "here has; such records run on the CPU")
            choice = self.chooser.choose(memory)
            if choice.on_gpu:
                yield from self._gpu(self._take(n), choice)
            else:
                yield from self._cpu(self._take(1))

    def _take(self, n):
        batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    def _memory(self, n):
        """The device memory a GPU batch of the first ``n`` waiting records needs."""
        return self.workload.gpu_memory([item for _, item in self._pending[:n]], self.options)

    @staticmethod
    def bad(key, reason):
        """The error output of a record."""
        return key, {"error": reason}

    def unreadable(self, item):
        """The error output of a record that could not be read (a :class:`gpumr.io.records.Unreadable`)."""
        return self.bad(item.label, f"unreadable record at byte {item.offset} of {item.name}: {item.reason}")

    def lost(self, lost):
        """Count an unreadable stretch of input (a :class:`gpumr.io.records.Lost`); return its error output."""
        self.count(LOST, 1)
        if lost.end is not None:
            self.count(LOST_BYTES, lost.end - lost.start)
        where = f"bytes {lost.start}-{lost.end}" if lost.end is not None else f"from byte {lost.start}"
        return lost.name, {"error": f"{where} could not be read: {lost.reason}", "lost": [lost.start, lost.end]}

    def _outputs(self, batch, results, device):
        """The output of each record of ``batch`` from its result (:meth:`Workload.finish` first, after any GPU
        lease); a result that does not become an output value is an error."""
        for (key, _), result in zip(batch, results):
            try:
                value = plain_result(key, self.workload.finish(key, result, self.options), device)
            except Exception as exc:  # noqa: BLE001 (one record's failure must not end the task)
                yield self.bad(key, reason_of(exc))
                continue
            yield key, value

    def _cpu(self, batch):
        t0 = time.perf_counter()
        try:
            results = self._results(self.workload.cpu_batch(batch, self.options), batch, "cpu_batch")
        except Exception as exc:  # noqa: BLE001 (the user's code failing, any way: that record's error line)
            if len(batch) > 1:  # which record was it: each on its own
                for one in batch:
                    yield from self._cpu([one])
                return
            key = batch[0][0]
            if not isinstance(exc, BadRecord):
                say_once(log, f"record {key!r} failed on the CPU: {reason_of(exc)}")
            yield self.bad(key, reason_of(exc))
            return
        self.count(CPU_MS, int(round((time.perf_counter() - t0) * 1000)))
        yield from self._outputs(batch, results, "cpu")

    def _gpu(self, batch, choice):
        t0 = time.perf_counter()
        try:
            device = self.device_for(choice)
            results = self._results(self.workload.gpu_batch(batch, self.options, device), batch, "gpu_batch")
        except Exception as exc:  # noqa: BLE001 (launch failure, out of memory, lost context ...)
            choice.release()
            self.count(FALLBACKS, len(batch))
            say_once(log, f"GPU failure on {choice.device} ({reason_of(exc)}); {len(batch)} record(s) re-run on the "
                          "CPU")
            for one in batch:
                yield from self._cpu([one])
            return
        choice.release()  # what is left of the work needs no GPU: after the lease
        self.count(GPU_MS, int(round((time.perf_counter() - t0) * 1000)))
        yield from self._outputs(batch, results, choice.device)

    @staticmethod
    def _results(results, batch, what):
        results = list(results)
        if len(results) != len(batch):
            raise RuntimeError(f"{what} returned {len(results)} results for {len(batch)} records")
        return results
