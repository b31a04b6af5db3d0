"""The record-processing core that every gpumr job shares.

One record flows: (key, bytes) -> decode -> choose device -> CPU or GPU
implementation of the same function -> result or error -> output value.
A workload supplies the pieces; the core supplies device choice, batching
of GPU records, falling back to the CPU when the GPU fails, and counters.

Counters (mrjob group ``gpumr``): ``records on CPU``, ``records on GPU``,
``GPU fallbacks``, ``bad records``; and the time spent in each device's
implementation, ``CPU milliseconds`` and ``GPU milliseconds``.
"""

import sys
import time

GROUP = "gpumr"
ON_CPU, ON_GPU, FALLBACKS, BAD = "records on CPU", "records on GPU", "GPU fallbacks", "bad records"
CPU_MS, GPU_MS = "CPU milliseconds", "GPU milliseconds"


class BadRecord(Exception):
    """The record cannot be processed: the reason becomes its ``error`` output."""


class Workload:
    """One function with a CPU and (optionally) a GPU implementation.

    Subclasses implement :meth:`decode`, :meth:`run_cpu` and :meth:`output`;
    a GPU-capable one returns an object from :meth:`gpu_backend` whose
    ``run(items, gpu)`` computes the same results for a batch.
    """

    name = "workload"
    #: Device memory one GPU batch needs (bytes), told to device choice.
    gpu_memory = 0
    #: Records per GPU launch.
    gpu_batch = 1

    def decode(self, key, value):
        """Turn a record into the implementation's input; raise BadRecord if it cannot be."""
        raise NotImplementedError

    def run_cpu(self, item):
        """The CPU implementation: one input to one result."""
        raise NotImplementedError

    def output(self, key, item, result, device):
        """The output value for a record's result."""
        raise NotImplementedError

    def outputs(self, key, item, result, device):
        """The output records for a record's result: one ``(key, value)`` unless overridden."""
        return [(key, self.output(key, item, result, device))]

    def error_output(self, key, reason):
        """The output value for a record that could not be processed."""
        return {"error": reason}

    def gpu_backend(self):
        """An object with ``run(items, gpu) -> results``, or None (with a reason logged)."""
        return None


class SimulatedBackend:
    """Stands in for a GPU implementation on simulated GPUs: the CPU function, under the lease."""

    def __init__(self, workload):
        self.workload = workload

    def run(self, items, gpu):
        return [self.workload.run_cpu(item) for item in items]


class Processor:
    """Runs a workload over records, choosing a device per record.

    Parameters
    ----------
    workload : Workload
    chooser : gpumr.devices.DeviceChooser
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
        self._batch, self._choice = [], None
        if chooser.has_gpus:
            if chooser.simulated:
                self.backend = SimulatedBackend(workload)
                self.log(f"gpumr: {workload.name}: GPUs are simulated; 'GPU' records run the CPU code under a lease")
            else:
                self.backend = workload.gpu_backend()
        if self.backend is None:
            why = chooser.why_cpu_only or f"no GPU implementation of {workload.name} is usable here"
            self.log(f"gpumr: {workload.name}: every record runs on the CPU ({why})")

    def process(self, records):
        """Yield ``(key, output value)`` for every ``(key, value)`` record, each exactly once."""
        for key, value in records:
            yield from self.feed(key, value)
        yield from self.flush()

    def feed(self, key, value):
        """Take one record; yield the outputs that are ready.

        A record given a GPU joins the batch for that GPU, whose lease this
        task then holds until the batch (``workload.gpu_batch`` records) runs;
        a record given the CPU runs at once.
        """
        try:
            item = self.workload.decode(key, value)
        except BadRecord as exc:
            yield self.bad(key, str(exc))
            return
        if self._choice is None and self.backend is not None:
            choice = self.chooser.choose()
            self._choice = choice if choice.on_gpu else None
        if self._choice is None:
            yield from self._cpu(key, item)
            return
        self._batch.append((key, item))
        if len(self._batch) >= self.workload.gpu_batch:
            yield from self.flush()

    def flush(self):
        """Run the pending GPU batch, if any; yield its outputs."""
        if self._batch:
            batch, choice = self._batch, self._choice
            self._batch, self._choice = [], None
            yield from self._gpu(batch, choice)

    def bad(self, key, reason):
        """Count a bad record and return its error output."""
        self.count(BAD, 1)
        return key, self.workload.error_output(key, reason)

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
        for (key, item), result in zip(batch, results):
            for out_key, out in self.workload.outputs(key, item, result, choice.device):
                if choice.gpu.simulated:
                    out["simulated"] = True
                yield out_key, out
