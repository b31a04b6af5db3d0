"""The backprojection job: slabs leave as binary float32, the assembled volume equals a direct reconstruction;
assemble's errors."""

import io
import json
import os

import numpy as np
import pytest

from gpumr.cli import main
from gpumr.ct import geometry
from gpumr.ct.backproject import backproject
from gpumr.ct.fdk import filter_projections
from gpumr.ct.projections import read_set
from gpumr.ct.slices import assemble
from gpumr.errors import GpumrError
from gpumr.io.joboutput import read_job_output
from gpumr.launch.job import run_job


@pytest.fixture(scope="module")
def phantom_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ct")
    assert main(["ct", "geometry", "-o", str(d / "g.json"), "--voxels", "32", "--angles", "48"]) == 0
    assert main(["ct", "phantom", "--geometry", str(d / "g.json"), "-o", str(d / "proj.seq"),
                 "--truth", str(d / "truth.npy")]) == 0
    return d


def _run_job(d, out, runner, extra=()):
    from gpumr.jobs.backproject import MRBackproject
    return run_job(MRBackproject, [], str(out), runner, ["--projections", str(d / "proj.seq"), "--geometry",
                                                        str(d / "proj.geometry.json"), "--slab", "6", *extra])[0]


@pytest.mark.parametrize("runner", ["inline", pytest.param("local", marks=pytest.mark.slow)])
def test_job_volume_equals_direct_reconstruction(phantom_files, tmp_path, runner):
    d = phantom_files
    counters = _run_job(d, tmp_path / "out", runner)
    assert counters["records on CPU"] == 6  # 32 slices / 6 per slab
    assert main(["ct", "assemble", str(tmp_path / "out"), "-o", str(tmp_path / "vol.npy"),
                 "--tiff", str(tmp_path / "vol.tif")]) == 0
    vol = np.load(tmp_path / "vol.npy")
    g = geometry.load(str(d / "proj.geometry.json"))
    direct = backproject(filter_projections(read_set([str(d / "proj.seq")], g), g), g)
    assert vol.shape == (32, 32, 32)
    assert np.allclose(vol, direct, rtol=1e-6, atol=1e-6)
    assert os.path.getsize(tmp_path / "vol.png") > 1000
    import tifffile
    assert np.array_equal(tifffile.imread(tmp_path / "vol.tif"), vol)
    lines = open(sorted((tmp_path / "out").glob("part-*"))[0]).read().splitlines()
    keys = [json.loads(line.split("\t")[0]) for line in lines]
    assert keys == sorted(keys) and keys[0] == "z00000" and len(keys) == 6
    # Each slab is binary float32 a user opens directly, named by its line; the output holds the volume once.
    first = json.loads(lines[0].split("\t")[1])
    assert first["z"] == [0, 6] and first["slab"] == {"array": "arrays/z00000.slab.npy", "shape": [6, 32, 32],
                                                      "dtype": "<f4"}
    assert np.array_equal(np.load(tmp_path / "out" / "arrays" / "z00000.slab.npy"), vol[:6])
    assert sorted(os.listdir(tmp_path / "out" / "arrays")) == [f"z{z:05d}.slab.npy" for z in range(0, 32, 6)]
    arrays = sum(os.path.getsize(p) for p in (tmp_path / "out" / "arrays").iterdir())
    assert arrays < vol.nbytes * 1.01


def test_the_local_runner_starts_as_many_tasks_as_the_cores_hold(phantom_files, tmp_path, monkeypatch):
    """A backprojection task threads over every core: the local runner makes one map task of the slabs (two tasks of
    two threads on two cores each read and filtered nearly every row); one per core with ``--cpu-threads 1``; one
    per GPU slot where slabs may run on a GPU."""
    from gpumr.engines.mrjob import MRJobEngine
    from gpumr.launch.plan import make_plan
    d = phantom_files

    def tasks(*extra):
        folder = tmp_path / f"job{len(os.listdir(tmp_path))}"
        folder.mkdir()
        plan = make_plan(["backproject", "--projections", str(d / "proj.seq"), "--slab", "6", "-o",
                          str(tmp_path / "out"), "--engine", "local", *extra], str(folder))
        assert len(plan.tasks) == 6  # (the slabs)
        return len(MRJobEngine("local")._task_files(plan, str(folder / "tasks")))
    assert tasks("--device", "cpu") == 1
    assert tasks("--device", "cpu", "--cpu-threads", "1") == min(6, os.cpu_count())
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "2")
    assert tasks("--device", "auto", "--gpu-slots", "2") == 4
    assert tasks("--device", "cpu") == 1


def _volume(d, out, tmp_path):
    """The job output ``out`` assembled, and the direct CPU reconstruction."""
    assert main(["ct", "assemble", str(out), "-o", str(tmp_path / "vol.npy")]) == 0
    g = geometry.load(str(d / "proj.geometry.json"))
    return np.load(tmp_path / "vol.npy"), backproject(filter_projections(read_set([str(d / "proj.seq")], g), g), g)


@pytest.mark.parametrize("runner", ["inline", pytest.param("local", marks=pytest.mark.slow)])
def test_device_gpu_on_simulated_gpus_runs_the_kernel(phantom_files, tmp_path, monkeypatch, runner, emulated_kernels):
    """Every slab through SlabBackprojector, its kernel executed on the host: the CPU's volume within 1e-5."""
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counters = _run_job(phantom_files, tmp_path / "out", runner, ["--device", "gpu"])
    values = [v for _, v in read_job_output([str(tmp_path / "out")])]
    assert len(values) == 6 and all(v["device"] == "gpu:0" and v["simulated"] is True for v in values)
    assert counters["records on GPU"] == 6 and set(counters) == {"records on GPU", "GPU milliseconds"}
    vol, direct = _volume(phantom_files, tmp_path / "out", tmp_path)
    assert np.linalg.norm(vol - direct) / np.linalg.norm(direct) < 1e-5


def test_a_broken_kernel_is_caught_by_the_self_check_and_every_slab_falls_back(phantom_files, tmp_path, monkeypatch,
                                                                                altered_kernel):
    altered_kernel("backproject", "acc[k] += w2 * (top + fr * (bot - top));",
                   "acc[k] += (k ? 1.5f : 1.0f) * w2 * (top + fr * (bot - top));")  # wrong in slices 2..8 only
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counters = _run_job(phantom_files, tmp_path / "out", "inline", ["--device", "gpu"])
    assert counters["GPU fallbacks"] == counters["records on CPU"] == 6 and "records on GPU" not in counters
    vol, direct = _volume(phantom_files, tmp_path / "out", tmp_path)
    assert np.allclose(vol, direct, rtol=1e-6, atol=1e-6)


def test_assemble_names_missing_and_duplicate_slices(phantom_files, tmp_path):
    _run_job(phantom_files, tmp_path / "out", "inline")
    lines = open(tmp_path / "out" / "part-00000").read().splitlines()
    folders = [str(tmp_path / "out")]
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing" / "part-00000").write_text("\n".join(l for l in lines if not l.startswith('"z00012"')))
    with pytest.raises(GpumrError, match="slices 12-18 are missing"):
        assemble(read_job_output([str(tmp_path / "missing")]), folders, str(tmp_path / "v.npy"))
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup" / "part-00000").write_text("\n".join(lines + lines[3:4]))
    with pytest.raises(GpumrError, match="slices 18-24 come twice"):
        assemble(read_job_output([str(tmp_path / "dup")]), folders, str(tmp_path / "v.npy"))
    assert main(["ct", "assemble", str(tmp_path / "dup"), "-o", str(tmp_path / "v.npy")]) == 1
    assert not (tmp_path / "v.npy").exists()
    # A slab file that does not hold what its line says is refused by name, and nothing is written.
    bad = tmp_path / "out" / "arrays" / "z00006.slab.npy"
    np.save(bad, np.zeros((5, 32, 32), np.float32))
    with pytest.raises(GpumrError, match="z00006.slab.npy: 20608 bytes, not the size the output's proof lists"):
        assemble(read_job_output(folders), folders, str(tmp_path / "v.npy"))
    assert not (tmp_path / "v.npy").exists()


def test_the_launcher_plans_each_slab_once_as_ints_and_the_tasks_take_them_as_they_are(phantom_files):
    """Slab bounds are planned (and checked, with --slab) once in the launcher: ints covering the volume, keyed by
    their first slice; a task's load takes them as they come, through JSON or not."""
    import argparse

    from gpumr.ct import geometry
    from gpumr.ct.workload import Backproject
    from gpumr.tasks.items import Record, from_json, to_json
    o = argparse.Namespace(projections=str(phantom_files / "proj.seq"),
                           geometry=str(phantom_files / "proj.geometry.json"), slab=6, i0=None)
    work = Backproject()
    work.check(o)
    planned = work.plan(o)
    at = 0
    for key, (z0, z1) in planned:
        assert key == f"z{z0:05d}" and z0 == at and 0 < z1 - z0 <= 6 and type(z0) is type(z1) is int
        at = z1
    nz = geometry.load(o.geometry).nVoxel[0]
    assert at == nz and len(planned) == -(-nz // 6)
    key, value = planned[-1]
    assert work.load(key, from_json(to_json(Record(key, value))).value, o) == work.load(key, value, o) == tuple(value)


def _assemble(out, volume, cwd):
    """``gpumr ct assemble OUT -o VOLUME`` in a process of its own: (status, stderr)."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "gpumr", "ct", "assemble", str(out), "-o", str(volume)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr


def test_assemble_checks_each_slab_against_the_proof(phantom_files, tmp_path):
    """Issue 64, class 8: a slab that is not what the job wrote is refused in one line naming it, and nothing is
    written. Before: a corrupt slab was numpy's ValueError called "a bug" (relaying numpy's advice to use
    ``allow_pickle=True``), and a slab copied in from another job of the same shape was assembled."""
    out, other = tmp_path / "out", tmp_path / "other"
    _run_job(phantom_files, out, "inline")
    _run_job(phantom_files, other, "inline", ["--filter", "hann"])  # the same shapes, other values
    slab = out / "arrays" / "z00006.slab.npy"
    good = slab.read_bytes()
    as_f8 = io.BytesIO()  # the same bytes, its header saying float64 (half as many slices)
    np.lib.format.write_array_header_1_0(as_f8, {"descr": "<f8", "fortran_order": False, "shape": (3, 32, 32)})
    f8 = as_f8.getvalue() + good[len(as_f8.getvalue()):]
    # A header too long to read safely, of the slab's size (numpy's refusal advises allow_pickle=True).
    huge = b"\x93NUMPY\x01\x00" + (len(good) - 10).to_bytes(2, "little") + b"{" + b" " * (len(good) - 12) + b"\n"
    cases = [(b"garbage" + good[7:], "does not begin as a .npy file does"),
             (huge, "not the .npy header of a float32 slab"),
             (f8, "holds a float64 array of shape (3, 32, 32), not the slab 6-12 of 32x32"),
             (good[:-4], "not the size the output's proof lists"),
             ((other / "arrays" / "z00006.slab.npy").read_bytes(), "not the slab its job wrote")]
    for data, message in cases:
        slab.write_bytes(data)
        status, err = _assemble(out, tmp_path / "v.npy", tmp_path)
        lines = err.strip().splitlines()
        assert status == 1 and len(lines) == 1, err
        assert lines[0].startswith(f"gpumr: error: {slab}: ") and message in lines[0], lines[0]
        assert "bug" not in err and "allow_pickle" not in err and "Traceback" not in err
        assert not (tmp_path / "v.npy").exists() and not (tmp_path / "v.png").exists()
    slab.write_bytes(good)
    assert _assemble(out, tmp_path / "v.npy", tmp_path) == (0, "")
    # An output without its proof (copied without it) cannot be checked: refused, naming what is missing.
    os.rename(tmp_path / ".out.gpumr", tmp_path / "away.gpumr")
    status, err = _assemble(out, tmp_path / "w.npy", tmp_path)
    assert status == 1 and err.strip() == (f"gpumr: error: {out}: no proof beside it ({tmp_path / '.out.gpumr'}), so "
                                           "its slabs cannot be checked: assemble the output with the proof the job "
                                           "wrote beside it"), err
    assert not (tmp_path / "w.npy").exists()


def test_a_task_reads_the_projections_once_when_a_slab_first_needs_them(phantom_files, tmp_path):
    """Setting a task up reads no projection (its slabs may all go to a GPU owner); the first slab on its CPU reads
    them; a read that fails is not tried again: each slab is told the same reason."""
    import argparse
    import shutil

    from gpumr.ct.workload import Backproject
    seq = tmp_path / "p.seq"
    shutil.copyfile(phantom_files / "proj.seq", seq)
    o = argparse.Namespace(projections=str(seq), geometry=str(phantom_files / "proj.geometry.json"), slab=6,
                           i0=None, filter="ram-lak", cpu_threads=1)
    work = Backproject()
    work.setup(o)
    os.rename(seq, tmp_path / "moved.seq")  # (unread: setup kept only its name)
    with pytest.raises(OSError, match="p.seq") as first:
        work.cpu("z00000", (0, 6), o)
    with pytest.raises(OSError) as second:
        work.cpu("z00006", (6, 12), o)
    assert second.value is first.value
    os.rename(tmp_path / "moved.seq", seq)
    fresh = Backproject()
    fresh.setup(o)
    assert fresh.cpu("z00000", (0, 6), o)["slab"].shape[0] == 6 and fresh._rows is not None
