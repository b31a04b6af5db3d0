"""Device choice against a fake NVML: compute modes, foreign processes, memory, no driver."""

import os

import pytest
from fake_nvml import FakeNVML, gpu

from gpumr.devices import nvml
from gpumr.devices.chooser import CPU, DeviceChooser
from gpumr.errors import GpumrError

ENV = {}  # no GPUMR_SIMULATE_GPUS, no CUDA_VISIBLE_DEVICES


def chooser(tmp_path, gpus, mode="auto", memory=0, probe=None, slots=1, **kw):
    return DeviceChooser(mode, memory=memory, slots=slots, lease_dir=str(tmp_path / "leases"), scheduler=False,
                         nvml=FakeNVML(gpus, **kw), probe=probe, env=ENV)


def test_no_driver_means_cpu_and_says_why(tmp_path):
    c = chooser(tmp_path, [], init_error="Driver Not Loaded")
    assert not c.has_gpus and "Driver Not Loaded" in c.why_cpu_only
    assert c.choose() is CPU and c.choose().device == "cpu"


def test_no_driver_in_gpu_mode_fails_clearly(tmp_path):
    with pytest.raises(GpumrError, match="--device gpu: no GPU on this node"):
        chooser(tmp_path, [], mode="gpu", init_error="NVML Shared Library Not Found")


def test_cpu_mode_never_touches_nvml(tmp_path):
    class Exploding(FakeNVML):
        def nvmlInit(self):
            raise AssertionError("NVML touched in cpu mode")
    c = DeviceChooser("cpu", lease_dir=str(tmp_path), scheduler=False, nvml=Exploding([gpu(0)]), env=ENV)
    assert c.choose() is CPU


def test_free_gpu_is_taken_and_leased(tmp_path):
    c = chooser(tmp_path, [gpu(0)])
    first = c.choose()
    assert first.device == "gpu:0"
    assert c.choose() is CPU  # its only slot is leased
    first.release()
    again = c.choose()
    assert again.device == "gpu:0"
    again.release()


def test_slots_allow_that_many_tasks(tmp_path):
    c = chooser(tmp_path, [gpu(0)], slots=2)
    a, b = c.choose(), c.choose()
    assert a.device == b.device == "gpu:0" and a.lease.slot != b.lease.slot
    assert c.choose() is CPU


def test_foreign_process_makes_gpu_busy(tmp_path):
    c = chooser(tmp_path, [gpu(0, procs=[(999999, 1 << 30)]), gpu(1)])
    picks = {c.choose().device for _ in range(4)}
    assert picks == {"gpu:1", "cpu"}
    verdicts = c.verdicts()
    assert not verdicts[0].free and "999999" in verdicts[0].reason


def test_own_and_sibling_processes_are_not_foreign(tmp_path):
    c = chooser(tmp_path, [gpu(0, procs=[(os.getpid(), 1 << 30)])])
    ch = c.choose()
    assert ch.device == "gpu:0"
    ch.release()


def test_memory_threshold(tmp_path):
    gpus = [gpu(0, free=1 << 30), gpu(1, free=8 << 30)]
    c = chooser(tmp_path, gpus, memory=4 << 30)
    ch = c.choose()
    assert ch.device == "gpu:1"
    assert c.choose() is CPU  # gpu:0 lacks memory, gpu:1 leased
    ch.release()
    assert c.verdicts()[0].reason == "busy: 1.1 GB free, a task needs 4.3 GB"
    small = chooser(tmp_path / "small", [gpu(0, total=2 << 30, free=2 << 30)], memory=4 << 30)
    assert small.verdicts()[0].reason == "too small: 2.1 GB in all, a task needs 4.3 GB"


def test_each_choice_asks_for_its_own_memory_unless_one_figure_was_given(tmp_path):
    per_batch = chooser(tmp_path, [gpu(0, free=2 << 30)], memory=None)
    assert per_batch.choose(4 << 30) is CPU  # this batch does not fit
    ch = per_batch.choose(1 << 30)
    assert ch.device == "gpu:0"
    ch.release()
    fixed = chooser(tmp_path / "fixed", [gpu(0, free=2 << 30)], memory=1 << 30)  # --gpu-memory 1GiB
    ch = fixed.choose(4 << 30)
    assert ch.device == "gpu:0"
    ch.release()


def test_exclusive_mode_uses_the_context_probe(tmp_path):
    calls = []

    def probe(g):
        calls.append(g.index)
        return g.index == 1

    c = chooser(tmp_path, [gpu(0, mode=3, procs=[(4242, 1 << 20)]), gpu(1, mode=3)], probe=probe)
    picks = [c.choose().device for _ in range(6)]
    assert set(picks) == {"gpu:1"}  # gpu:0's context is owned by another process
    assert calls.count(0) == 1  # a failed probe is not repeated for every record
    v = {x.gpu.index: x for x in c.verdicts()}
    assert not v[0].free and "exclusive" in v[0].reason and v[1].free


def test_prohibited_mode_is_never_used(tmp_path):
    c = chooser(tmp_path, [gpu(0, mode=2)])
    assert c.choose() is CPU


def test_gpu_mode_waits_then_times_out(tmp_path):
    c = chooser(tmp_path, [gpu(0)], mode="gpu")
    c.wait_timeout = 0.3
    held = c.choose()
    with pytest.raises(GpumrError, match="no GPU became free"):
        c.choose()
    held.release()
    assert c.choose().device == "gpu:0"


def test_simulated_gpus_parse_and_flag():
    gpus = nvml.simulated_gpus("3:2GiB")
    assert len(gpus) == 3 and all(g.simulated and g.memory_total == 2 << 30 for g in gpus)
    with pytest.raises(GpumrError, match="GPUMR_SIMULATE_GPUS"):
        nvml.simulated_gpus("two")
    d = nvml.discover(env={"GPUMR_SIMULATE_GPUS": "2"})
    assert d.simulated and len(d.gpus) == 2


def test_cuda_visible_devices_restricts_and_orders():
    fake = FakeNVML([gpu(0), gpu(1), gpu(2)])
    d = nvml.discover(fake, env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert [g.index for g in d.gpus] == [2, 0] and [g.ordinal for g in d.gpus] == [0, 1]


def test_tests_do_not_use_the_machines_default_node_state():
    """A `gpumr scheduler serve` or leases of a real user on this machine must not meet the tests."""
    from gpumr.devices import paths
    assert paths.default_lease_dir() != paths.user_dir()
    assert os.path.dirname(paths.default_socket()) != paths.user_dir()



def test_auto_waits_for_a_busy_gpu_only_while_it_would_still_beat_the_cpu(tmp_path):
    """Two tasks (two choosers) and one simulated GPU slot. A task that measured a batch on the GPU (0.01 s) and
    a record on the CPU (0.6 s) waits for the slot another task holds, which frees in 0.2 s: the GPU, once free,
    finishes before the CPU would. Held longer than the CPU would take, the record takes the CPU (before: every
    record finding the slot taken took the CPU at once)."""
    import threading
    import time
    env = {"GPUMR_SIMULATE_GPUS": "1:1GiB"}
    mine, other = (DeviceChooser("auto", slots=1, lease_dir=str(tmp_path / "leases"), scheduler=False, env=env)
                   for _ in range(2))
    with mine.choose() as first:  # a batch on the GPU
        assert first.on_gpu
        time.sleep(0.01)
    held = other.choose()
    assert held.on_gpu
    assert mine.choose() is CPU  # nothing to weigh yet (the CPU unmeasured): the CPU at once
    time.sleep(0.6)  # ... its record on the CPU
    threading.Timer(0.2, held.release).start()
    t0 = time.monotonic()
    got = mine.choose()
    assert got.on_gpu and time.monotonic() - t0 >= 0.15
    got.release()
    assert 0.5 < mine.rates.cpu and mine.rates.gpu < 0.5
    held = other.choose()
    assert held.on_gpu
    t0 = time.monotonic()
    assert mine.choose() is CPU and time.monotonic() - t0 >= 0.3  # waited about the CPU's time, in vain
    held.release()
