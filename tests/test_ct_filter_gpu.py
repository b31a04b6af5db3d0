"""FDK's weighting and ramp filter on the device (``cuda/fdk.cu`` around the launcher's FFT), under the asynchronous
emulator: the host's numbers, only the rows the host has not filtered, and caught by the self-check when wrong."""

import itertools
import logging
import os
import re

import numpy as np
import pytest
from conftest import said_lines

from gpumr.ct import geometry
from gpumr.ct.backproject import backproject, pad
from gpumr.ct.backproject_gpu import SlabBackprojector
from gpumr.ct.bands import FilteredRows, row_band
from gpumr.ct.fdk import filter_projections
from gpumr.ct.fdk_gpu import filter_on_device
from gpumr.devices.nvml import simulated_gpus
from gpumr.gpu import emulate, launch

pytestmark = pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")


_SIZES = itertools.count(3000)


def sim_gpu():
    """A fresh simulated GPU (a device memory size of its own: a launcher of its own, its calls counted from 0)."""
    return simulated_gpus(f"1:{next(_SIZES)}MiB")[0]


@pytest.fixture
def debug_lines():
    """gpumr's debug lines said (as ``-v`` has them) while the test runs."""
    root = logging.getLogger("gpumr")
    level = root.level
    root.setLevel(logging.DEBUG)
    yield
    root.setLevel(level)


def case(nz=24, n_angles=30, short=False, seed=0):
    """An odd-sized geometry (offsets on the detector), a full or a short scan, and random line integrals."""
    d = geometry.simple(40, n_angles).to_dict()
    d.update(nVoxel=[nz, 30, 34], offDetector=[1.1, -0.6])
    if short:
        d["angles"] = list(np.linspace(0, np.pi * 1.4, n_angles))
    g = geometry.from_dict(d)
    return g, np.random.default_rng(seed).random((g.n_angles, *g.nDetector), dtype=np.float32)


@pytest.mark.parametrize("short", [False, True], ids=["full scan", "short scan"])
@pytest.mark.parametrize("name", ["ram-lak", "hann"])
def test_the_device_filters_as_the_host_does_and_only_the_rows_asked(short, name, monkeypatch):
    """On a stream of its own, in angle chunks (three, the last short), with rows left out: the host's numbers where
    asked, the input elsewhere, the zero border kept."""
    import gpumr.ct.fdk_gpu as fdk_gpu
    g, raw = case(short=short)
    nv, nu = g.nDetector
    monkeypatch.setattr(fdk_gpu, "CHUNK_BYTES", 12 * nv * fdk_gpu.transform_length(nu) * 4)  # 12 angles a round
    todo = np.ones(nv, bool)
    todo[[0, 7, 8, 9, nv - 1]] = False
    lx = emulate.EmulatedLauncher(0, 1 << 30)
    q = lx.to_device(pad(raw))
    assert filter_on_device(lx, q, g, name, todo, lx.stream()) == todo.sum()
    got = lx.to_host(q)
    want = filter_projections(raw, g, name)
    assert np.array_equal(got[:, 1:-1, 1:-1][:, todo], want[:, todo])
    assert np.array_equal(got[:, 1:-1, 1:-1][:, ~todo], raw[:, ~todo])
    assert not got[:, [0, -1]].any() and not got[:, :, [0, -1]].any()
    assert lx.calls["filter_rows"] == 3 and not lx.violations


def test_a_tasks_projections_are_filtered_on_the_device_once_and_not_on_the_host(debug_lines):
    g, raw = case()
    rows = FilteredRows(raw, g)
    gpu = sim_gpu()
    slabs = [(0, 8), (8, 24)]
    with said_lines() as said:
        got = SlabBackprojector(rows, g).run(slabs, gpu)
    want = filter_projections(raw, g)
    for (z0, z1), slab in zip(slabs, got):
        assert np.array_equal(slab, backproject(want, g, z0, z1)) or \
            np.linalg.norm(slab - backproject(want, g, z0, z1)) < 1e-5 * np.linalg.norm(slab)
    assert rows.filtered == 0  # (the self-check's rows were filtered on the host aside, not in place)
    assert launch.launcher(gpu).calls["filter_rows"] == 1
    nv = g.nDetector[0]
    assert [line for line in said if "projections filtered" in line] == \
        [f"projections filtered on gpu:0: detector rows 0-{nv} of {nv} (process {os.getpid()})"]


def test_rows_the_host_filtered_before_the_upload_are_not_filtered_again(debug_lines):
    """A task whose CPU ran a slab first (``--device auto``) has some rows filtered in place: the device filters the
    others; filtering those again would double them and change the slabs."""
    g, raw = case()
    rows = FilteredRows(raw, g)
    rows.need(0, 8)
    done = rows.filtered
    assert 0 < done < g.nDetector[0]
    gpu = sim_gpu()
    with said_lines() as said:
        (got,) = SlabBackprojector(rows, g).run([(0, 24)], gpu)
    want = backproject(filter_projections(raw, g), g)
    assert np.linalg.norm(got - want) < 1e-5 * np.linalg.norm(want)
    runs = [tuple(map(int, m.groups())) for line in said
            for m in [re.fullmatch(r"projections filtered on gpu:0: detector rows (\d+)-(\d+) of \d+ .*", line)] if m]
    r0, r1 = row_band(g, 0, 8)  # (what the host filtered)
    assert r1 - r0 == done and runs == [(a, b) for a, b in [(0, r0), (r1, g.nDetector[0])] if b > a]


def test_a_launcher_without_an_fft_has_the_host_filter_first(monkeypatch):
    """PyCUDA has no FFT: every row is filtered on the host, in place, and none on the device."""
    monkeypatch.setattr(emulate.EmulatedLauncher, "fft", False)
    g, raw = case()
    rows = FilteredRows(raw, g)
    gpu = sim_gpu()
    (got,) = SlabBackprojector(rows, g).run([(0, 24)], gpu)
    want = backproject(filter_projections(raw, g), g)
    assert np.linalg.norm(got - want) < 1e-5 * np.linalg.norm(want)
    assert rows.filtered == g.nDetector[0] and launch.launcher(gpu).calls["filter_rows"] == 0


@pytest.mark.parametrize("old, new", [
    ("weights[(size_t)a * nu + c];", "weights[(size_t)a * nu + c] * 1.001f;"),  # a weight a little off
    ("rows[((size_t)a * nv + r) * n + c];\n}", "rows[((size_t)a * nv + r) * n + (c ? c - 1 : c)];\n}"),  # a shift
], ids=["weights", "columns"])
def test_a_wrong_device_filter_is_caught_by_the_self_check(altered_kernel, old, new):
    altered_kernel("fdk", old, new)
    g, raw = case()
    with pytest.raises(RuntimeError, match=r"GPU backprojection disabled on gpu:0: .* differ from the CPU"):
        SlabBackprojector(FilteredRows(raw, g), g).run([(0, 8)], sim_gpu())


def test_cupys_filter_rows_transforms_each_row_in_place_inside_the_stream():
    """CuPy cannot run here (no GPU): its launcher's ``filter_rows`` is driven through a stand-in ``cupy`` made of
    numpy (the same ``fft`` and ``asarray`` calls; streams that say when they are entered). This checks gpumr's glue
    only: each row transformed along its length, the product, the result written back in place, every call inside
    the stream given (CuPy's null stream for None); cuFFT's own numbers are the GPU test's (``pytest -m gpu``)."""
    import types

    from gpumr.gpu.launch import CuPyLauncher
    inside = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            inside.append(self.name)

        def __exit__(self, *exc):
            inside.pop()

    def watched(fn):
        def call(*args, **kwargs):
            assert inside, f"{fn.__name__} outside a stream"
            calls.append((fn.__name__, inside[-1]))
            return fn(*args, **kwargs)
        return call
    calls = []
    fft = types.SimpleNamespace(rfft=watched(np.fft.rfft), irfft=watched(np.fft.irfft))
    cupy = types.SimpleNamespace(fft=fft, asarray=watched(np.asarray),
                                 cuda=types.SimpleNamespace(Stream=types.SimpleNamespace(null=Stream("null"))))
    lx = object.__new__(CuPyLauncher)
    lx.cp = cupy
    rows = np.random.default_rng(0).random((6, 16), dtype=np.float32)
    response = np.linspace(0, 1, 9).astype(np.float32)
    want = np.fft.irfft(np.fft.rfft(rows, axis=1) * response, n=16, axis=1)
    dev = rows.copy()
    lx.filter_rows(dev, response, Stream("mine"))
    assert np.allclose(dev, want, atol=1e-6) and {s for _, s in calls} == {"mine"} and len(calls) == 3
    calls.clear()
    lx.filter_rows(dev, response, None)
    assert {s for _, s in calls} == {"null"}
    with pytest.raises(ValueError, match="n // 2 \\+ 1 values"):
        lx.filter_rows(dev, response[:-1], None)


def test_an_fft_that_cannot_run_has_the_host_filter_and_the_device_still_backprojects(monkeypatch):
    """CuPy without cuFFT's library fails at its first transform: not a CUDA error, so the device is still trusted;
    the host filters every row, the projections go up again, and the slabs are right; said once."""
    def broken(self, dev, response, stream):
        raise RuntimeError("CuFFT library not found (a stand-in for CuPy without it)")
    monkeypatch.setattr(emulate.EmulatedLauncher, "filter_rows", broken)
    g, raw = case()
    rows = FilteredRows(raw, g)
    with said_lines() as said:
        (got,) = SlabBackprojector(rows, g).run([(0, 24)], sim_gpu())
    want = backproject(filter_projections(raw, g), g)
    assert np.linalg.norm(got - want) < 1e-5 * np.linalg.norm(want)
    assert rows.filtered == g.nDetector[0]
    assert [line for line in said if "FDK filter" in line] == \
        ["FDK filter on gpu:0 failed (RuntimeError: CuFFT library not found (a stand-in for CuPy without it)): the "
         "host filters the projections"]


def test_the_ct_workloads_gpu_path_filters_on_the_device_and_asks_for_cupy_first(tmp_path, debug_lines):
    """Through the workload as a task runs it: the projections read, none filtered on the host, the device's filter
    and slabs equal to the host's; the launcher asked for is CuPy's first (its FFT), PyCUDA's only without it."""
    import argparse
    import types

    from gpumr.ct.projections import write_set
    from gpumr.ct.workload import Backproject
    from gpumr.launch.options import task_options
    from gpumr.tasks.device import Device
    g, raw = case()
    g.save(str(tmp_path / "g.json"))
    write_set(str(tmp_path / "p.seq"), raw)
    o = argparse.Namespace(**{opt.dest: opt.default for opt in task_options(Backproject)})
    o.projections, o.geometry = str(tmp_path / "p.seq"), str(tmp_path / "g.json")
    work = Backproject()
    work.resolve(o)
    work.setup(o)
    gpu = sim_gpu()
    assert work.gpu_ready(o, simulated=True) is None and work._gpu.prefer == "cupy"
    (value,) = work.gpu_batch([("z00000", (0, 24))], o, Device(types.SimpleNamespace(gpu=gpu, device="gpu:0")))
    want = backproject(filter_projections(raw, g), g)
    assert np.linalg.norm(value["slab"] - want) < 1e-5 * np.linalg.norm(want)
    assert work.rows.filtered == 0 and launch.launcher(gpu).calls["filter_rows"] == 1
