"""The record-processing core: per-record choice, GPU batches, fallbacks, counters, on the public contract."""

from collections import Counter

from gpumr.core import BadRecord, Processor, Workload
from gpumr.core.counters import outcome
from gpumr.devices.chooser import CPU, Choice
from gpumr.devices.nvml import GPU


class Square(Workload):
    """x -> x * x, as a user's workload would say it: a CPU function and a GPU batch function."""

    name = "square"
    decode = "raw"
    gpu_records = 3

    def __init__(self, fail=False):
        self.fail, self.batches = fail, []

    def load(self, key, value, o):
        if value is None:
            raise BadRecord("no value")
        return value

    def cpu(self, key, x, o):
        return {"y": x * x}

    def gpu_batch(self, records, o, device):
        self.batches.append([x for _, x in records])
        if self.fail:
            raise RuntimeError("launch failed")
        return [{"y": x * x} for _, x in records]


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


def run(w, records):
    counts = Counter()
    chooser = Chooser()
    p = Processor(w, None, chooser, device_for=lambda choice: choice.gpu,
                  count=lambda name, n=1: counts.update({name: n}))
    out = dict(p.process(records))
    counts.update(outcome(v) for v in out.values())  # (each record's counter, added where its line is written)
    return out, counts, chooser


def test_every_record_once_with_gpu_batches_and_cpu_records():
    records = [(f"k{i}", i) for i in range(10)] + [("bad", None)]
    backend = Square()
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
    w.gpu_memory = lambda items, o: 100 * sum(items)
    chooser = Chooser()
    out = dict(Processor(w, None, chooser, device_for=lambda c: c.gpu).process([(f"k{i}", i) for i in range(1, 7)]))
    assert len(out) == 6
    # Batches of 3 wait for their choice: 1+2+3 on the GPU; then 4 on the CPU, and the rest (5, 6) chosen for.
    assert chooser.memory == [600, 1500, 1100]


def test_gpu_failure_reruns_on_cpu_and_counts():
    backend = Square(fail=True)
    out, counts, chooser = run(backend, [(f"k{i}", i) for i in range(7)])
    assert all(out[f"k{i}"] == {"y": i * i, "device": "cpu"} for i in range(7))
    assert counts["GPU fallbacks"] == sum(len(b) for b in backend.batches) > 0
    assert counts["records on CPU"] == 7 and "records on GPU" not in counts and "GPU milliseconds" not in counts
    assert chooser.released == len(backend.batches)


def test_an_unexpected_cpu_error_is_a_bad_record_not_a_crash():
    class Fragile(Square):
        cpu_records = 4  # a batch holding the bad record: each record is then run on its own

        def cpu(self, key, x, o):
            if x == 3:
                raise ZeroDivisionError("boom")
            return {"y": x * x}

    counts = Counter()
    w = Fragile()

    class NoGPU:
        has_gpus, simulated, why_cpu_only = False, False, "none"

    out = dict(Processor(w, None, NoGPU(), count=lambda n, k=1: counts.update({n: k}))
               .process([(f"k{i}", i) for i in range(5)]))
    counts.update(outcome(v) for v in out.values())
    assert out["k3"]["error"] == "ZeroDivisionError: boom"
    assert all(out[f"k{i}"]["y"] == i * i for i in (0, 1, 2, 4))
    assert counts["records on CPU"] == 4 and counts["bad records"] == 1
    assert set(counts) == {"records on CPU", "bad records", "CPU milliseconds"}


def test_a_result_that_is_not_a_dict_is_that_records_error():
    """The contract: cpu() returns a dict; anything else is the record's error, the job goes on (a dict that is not
    JSON: tests/test_own_workload.py, where the task writes the line)."""

    class Odd(Square):
        def cpu(self, key, x, o):
            return [x] if x == 1 else {"error": x} if x == 2 else {"y": x}

    out = dict(Processor(Odd(), None, type("C", (), {"has_gpus": False})()).process([(f"k{i}", i) for i in range(4)]))
    assert out["k1"] == {"error": "the workload returned a list, not a dict"}
    assert out["k2"]["error"].startswith("the result has key 'error', which the output format keeps for itself")
    assert out["k3"] == {"y": 3, "device": "cpu"}
    assert Counter(map(outcome, out.values())) == {"records on CPU": 2, "bad records": 2}
