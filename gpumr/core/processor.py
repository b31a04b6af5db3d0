"""Running a workload over records, choosing a device per record."""

import sys
import time

from ..sizes import human
from .counters import BAD, CPU_MS, FALLBACKS, GPU_MS, LOST, LOST_BYTES, ON_CPU, ON_GPU
from .workload import BadRecord


class Processor:
    """Runs a workload over records, choosing a device per record.

    Records are decoded as they arrive. Without a usable GPU path each runs
    on the CPU at once. With one, decoded records wait in a batch of up to
    ``workload.gpu_batch``; when it is full (or flushed) the device is
    chosen for the device memory the batch needs (``workload.gpu_memory_for``;
    a batch larger than any GPU of the node is halved until it fits one):
    a free GPU takes the batch, its lease held only while the batch runs; otherwise the first record runs on the CPU and the choice is made
    again for the rest, so each record goes to whatever is free when its
    turn comes. On simulated GPUs the batch runs the same GPU path, its
    kernels executed on the host.

    Parameters
    ----------
    workload : gpumr.core.Workload
    chooser : gpumr.devices.chooser.DeviceChooser
    count : callable, optional
        ``count(name, amount)``, e.g. mrjob's ``increment_counter`` bound to the group.
    log : callable, optional
        Where task-log lines go (stderr by default).
    """

    def __init__(self, workload, chooser, count=None, log=None):
        self.workload = workload
        self.chooser = chooser
        self.count = count or (lambda name, n=1: None)
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.backend = None
        self._pending = []
        self._oversize = False  # a record too large for every GPU here was logged
        if chooser.has_gpus:
            self.backend = workload.gpu_backend(simulated=chooser.simulated)
            if self.backend is not None and chooser.simulated:
                self.log(f"gpumr: {workload.name}: GPUs are simulated; their CUDA kernels run on the host")
        if self.backend is None:
            why = chooser.why_cpu_only or f"no GPU implementation of {workload.name} is usable here"
            self.log(f"gpumr: {workload.name}: every record runs on the CPU ({why})")

    def process(self, records):
        """Yield ``(key, output value)`` for every ``(key, value)`` record, each exactly once."""
        for key, value in records:
            yield from self.feed(key, value)
        yield from self.flush()

    def feed(self, key, value):
        """Take one record; yield the outputs that are ready."""
        try:
            item = self.workload.decode(key, value)
        except BadRecord as exc:
            yield self.bad(key, str(exc))
            return
        if self.backend is None:
            yield from self._cpu(key, item)
            return
        self._pending.append((key, item))
        if len(self._pending) >= self.workload.gpu_batch:
            yield from self.flush()

    def flush(self):
        """Run every decoded record still waiting; yield their outputs.

        Records wait together for a GPU only as many as fit one of the
        node's GPUs (``chooser.fits``): a batch larger than any is halved
        until it fits. A single record that fits none runs on the CPU (said
        once in the log), in ``--device gpu`` too, where it would otherwise
        wait for ever.
        """
        while self._pending:
            n = len(self._pending)
            memory = self._memory(n)
            while n > 1 and not self.chooser.fits(memory):
                n //= 2
                memory = self._memory(n)
            if not self._oversize and not self.chooser.fits(memory):
                self._oversize = True
                self.log(f"gpumr: {self.workload.name}: a record needs more device memory ({human(memory)}) than "
                         "any GPU here has; such records run on the CPU")
            choice = self.chooser.choose(memory)
            if choice.on_gpu:
                batch, self._pending = self._pending[:n], self._pending[n:]
                yield from self._gpu(batch, choice)
            else:
                key, item = self._pending.pop(0)
                yield from self._cpu(key, item)

    def _memory(self, n):
        """The device memory a GPU batch of the first ``n`` waiting records needs."""
        return self.workload.gpu_memory_for([item for _, item in self._pending[:n]])

    def bad(self, key, reason):
        """Count a bad record and return its error output."""
        self.count(BAD, 1)
        return key, {"error": reason}

    def unreadable(self, item):
        """Count a record that could not be read (a :class:`gpumr.io.records.Unreadable`); return its error output.

        The output is keyed by the record's key bytes, undecodable bytes
        escaped, and says where the record is.
        """
        return self.bad(item.label, f"unreadable record at byte {item.offset} of {item.name}: {item.reason}")

    def lost(self, lost):
        """Count an unreadable stretch of input (a :class:`gpumr.io.records.Lost`); return its error output.

        Keyed by the file's name; the value gives the byte range ``[start, end)``
        (``end`` None where unknown). Counted as ``lost stretches`` and ``lost bytes``, and, as every
        ``error`` output line is, as one of the ``bad records`` (so output lines = CPU + GPU + bad).
        """
        self.count(BAD, 1)
        self.count(LOST, 1)
        if lost.end is not None:
            self.count(LOST_BYTES, lost.end - lost.start)
        where = f"bytes {lost.start}-{lost.end}" if lost.end is not None else f"from byte {lost.start}"
        return lost.name, {"error": f"{where} could not be read: {lost.reason}", "lost": [lost.start, lost.end]}

    def _cpu(self, key, item):
        t0 = time.perf_counter()
        try:
            result = self.workload.run_cpu(item)
        except BadRecord as exc:
            return [self.bad(key, str(exc))]
        except Exception as exc:  # one record's failure must not end the task
            self.log(f"gpumr: record {key!r} failed on the CPU: {type(exc).__name__}: {exc}")
            return [self.bad(key, f"processing failed: {type(exc).__name__}: {str(exc)[:200]}")]
        self.count(CPU_MS, int(round((time.perf_counter() - t0) * 1000)))
        self.count(ON_CPU, 1)
        return self.workload.outputs(key, item, result, "cpu")

    def _gpu(self, batch, choice):
        t0 = time.perf_counter()
        try:
            results = self.backend.run([item for _, item in batch], choice.gpu)
            if len(results) != len(batch):
                raise RuntimeError(f"GPU returned {len(results)} results for {len(batch)} records")
        except Exception as exc:  # launch failure, out of memory, lost context ...
            choice.release()
            self.count(FALLBACKS, len(batch))
            self.log(f"gpumr: GPU failure on {choice.device} ({type(exc).__name__}: {exc}); "
                     f"{len(batch)} record(s) re-run on the CPU")
            for key, item in batch:
                yield from self._cpu(key, item)
            return
        choice.release()
        self.count(GPU_MS, int(round((time.perf_counter() - t0) * 1000)))
        self.count(ON_GPU, len(batch))
        simulated = choice.gpu.simulated
        for (key, item), result in zip(batch, results):
            for out_key, out in self.workload.outputs(key, item, result, choice.device):
                yield out_key, (dict(out, simulated=True) if simulated else out)
