"""The record-processing core: per-record choice, GPU batches, fallbacks, counters."""

from collections import Counter

from gpumr.core import BadRecord, Processor, Workload
from gpumr.devices.chooser import CPU, Choice
from gpumr.devices.nvml import GPU


class Square(Workload):
    name = "square"
    gpu_batch = 3

    def decode(self, key, value):
        if value is None:
            raise BadRecord("no value")
        return value

    def run_cpu(self, x):
        return x * x

    def outputs(self, key, item, result, device):
        return [(key, {"y": result, "device": device})]


class Backend:
    def __init__(self, fail=False):
        self.fail, self.batches = fail, []

    def run(self, items, gpu):
        self.batches.append(list(items))
        if self.fail:
            raise RuntimeError("launch failed")
        return [x * x for x in items]


class Chooser:
    """Gives the GPU to every other request; counts releases."""

    has_gpus, simulated, why_cpu_only = True, False, ""

    def __init__(self):
        self.n, self.released, self.memory = 0, 0, []

    def fits(self, memory=0):
        return True  # a GPU large enough for any batch

    def choose(self, memory=0):
        self.n += 1
        self.memory.append(memory)
        if self.n % 2:
            return Choice(GPU(0, "g", "u"), "lease", self._release)
        return CPU

    def _release(self):
        self.released += 1


def run(backend, records):
    counts = Counter()
    w = Square()
    w.gpu_backend = lambda simulated=False: backend
    chooser = Chooser()
    p = Processor(w, chooser, count=lambda name, n=1: counts.update({name: n}), log=lambda m: None)
    out = dict(p.process(records))
    return out, counts, chooser


def test_every_record_once_with_gpu_batches_and_cpu_records():
    records = [(f"k{i}", i) for i in range(10)] + [("bad", None)]
    backend = Backend()
    out, counts, chooser = run(backend, records)
    assert set(out) == {k for k, _ in records}
    assert all(out[f"k{i}"]["y"] == i * i for i in range(10))
    assert out["bad"] == {"error": "no value"}
    assert counts["records on GPU"] + counts["records on CPU"] + counts["bad records"] == 11
    assert counts["records on GPU"] == sum(len(b) for b in backend.batches) > 0
    assert all(len(b) <= 3 for b in backend.batches)
    assert chooser.released == len(backend.batches)  # every lease given back


def test_device_choice_is_told_each_batchs_memory():
    w = Square()
    w.gpu_memory_for = lambda items: 100 * sum(items)
    w.gpu_backend = lambda simulated=False: Backend()
    chooser = Chooser()
    out = dict(Processor(w, chooser, log=lambda m: None).process([(f"k{i}", i) for i in range(1, 7)]))
    assert len(out) == 6
    # Batches of 3 wait for their choice: 1+2+3 on the GPU; then 4 on the CPU, and the rest (5, 6) chosen for.
    assert chooser.memory == [600, 1500, 1100]


def test_gpu_failure_reruns_on_cpu_and_counts():
    backend = Backend(fail=True)
    out, counts, chooser = run(backend, [(f"k{i}", i) for i in range(7)])
    assert all(out[f"k{i}"] == {"y": i * i, "device": "cpu"} for i in range(7))
    assert counts["GPU fallbacks"] == sum(len(b) for b in backend.batches) > 0
    assert counts["records on CPU"] == 7 and "records on GPU" not in counts and "GPU milliseconds" not in counts
    assert chooser.released == len(backend.batches)


def test_an_unexpected_cpu_error_is_a_bad_record_not_a_crash():
    class Fragile(Square):
        def run_cpu(self, x):
            if x == 3:
                raise ZeroDivisionError("boom")
            return x * x

    counts = Counter()
    w = Fragile()

    class NoGPU:
        has_gpus, simulated, why_cpu_only = False, False, "none"

    out = dict(Processor(w, NoGPU(), count=lambda n, k=1: counts.update({n: k}), log=lambda m: None)
               .process([(f"k{i}", i) for i in range(5)]))
    assert out["k3"]["error"].startswith("processing failed: ZeroDivisionError")
    assert all(out[f"k{i}"]["y"] == i * i for i in (0, 1, 2, 4))
    assert counts["records on CPU"] == 4 and counts["bad records"] == 1
    assert set(counts) == {"records on CPU", "bad records", "CPU milliseconds"}
