"""One GPU owner per job and node (``gpumr.tasks.owner``), on simulated GPUs: every CT slab goes to it, it reads,
filters and sets the device up once whatever the number of tasks, and a task whose owner fails or goes away still
puts out every record once, on the CPU."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ct_phantom, lines_of

from gpumr.devices.nvml import SIMULATE_ENV

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    d = tmp_path_factory.mktemp("owner")
    seq, direct = ct_phantom(d, 32, 48)
    return d, seq, direct


def gpumr(args, cwd, **env):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, SIMULATE_ENV: "1", **env})


def volume(d, out):
    """The job's slabs assembled (``gpumr ct assemble``)."""
    proc = gpumr(["ct", "assemble", out, "-o", d / f"{os.path.basename(out)}.npy"], d)
    assert proc.returncode == 0, proc.stderr
    return np.load(d / f"{os.path.basename(out)}.npy")


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_every_slab_runs_in_the_one_owner_which_reads_and_filters_once(phantom, engine):
    """Four slabs over two task processes (``--cpu-threads 1`` on two cores): all four on the owner's simulated GPU;
    the projections read once and each detector row filtered once on the node (by the owner, on its GPU: the tasks
    read none);
    the volume as the CPU reconstructs it."""
    d, seq, direct = phantom
    out = d / f"out-{engine}"
    extra = ["--no-conf"] if engine == "local" else ["--workers", "2"]
    proc = gpumr(["-v", "run", "backproject", "--projections", seq, "-o", out, "--slab", "8", "--engine", engine,
                  "--cpu-threads", "1", *extra], d)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = [json.loads(line.split("\t")[1]) for line in lines_of(out)]
    assert len(values) == 4 and all(v["device"] == "gpu:0" and v["simulated"] for v in values)
    said = proc.stderr.splitlines()
    assert len([s for s in said if "GPU owner: backproject set up on gpu:0" in s]) == 1
    assert len([s for s in said if "projections read:" in s]) == 1  # (each line names its process)
    rows = [(m.group(1), *map(int, m.groups()[1:])) for s in said
            for m in [re.search(r"projections filtered(.*): detector rows (\d+)-(\d+) of (\d+)", s)] if m]
    assert len(rows) == 1 and rows[0][:3] == (" on gpu:0", 0, rows[0][3])  # (every row, once, by the owner's GPU)
    served = re.search(r"GPU owner: \d+ batch\(es\), 4 record\(s\) from (\d+) task\(s\) on gpu:0", proc.stderr)
    assert served and 2 <= int(served.group(1)) <= 4  # (mrjob's local runner: two task files of two slabs)
    v = volume(d, out)
    assert np.abs(v - direct).max() <= 1e-4 * np.abs(direct).max()


def test_two_gpus_get_an_owner_each_set_up_once(phantom):
    """Two simulated GPUs and two task processes: an owner on each GPU, each set up once; every slab on one of
    them."""
    d, seq, direct = phantom
    out = d / "out-two"
    proc = gpumr(["-v", "run", "backproject", "--projections", seq, "-o", out, "--slab", "8", "--engine", "local",
                  "--cpu-threads", "1", "--no-conf"], d, **{SIMULATE_ENV: "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = [json.loads(line.split("\t")[1]) for line in lines_of(out)]
    assert len(values) == 4 and {v["device"] for v in values} <= {"gpu:0", "gpu:1"}
    setups = sorted(re.findall(r"GPU owner: backproject set up on (gpu:\d)", proc.stderr))
    assert setups == ["gpu:0", "gpu:1"]
    assert np.abs(volume(d, out) - direct).max() <= 1e-4 * np.abs(direct).max()


def test_a_device_the_owner_loses_sends_its_batch_and_the_rest_to_the_cpu(phantom):
    """The owner's device loses its context (an injected sticky error) in the first of two batches: that batch is
    re-run on the CPU by its task (counted as fallbacks) and the next one goes to the CPU at once (no more
    fallbacks); every slab once, the volume right."""
    d, seq, direct = phantom
    out = d / "out-sticky"
    proc = gpumr(["run", "backproject", "--projections", seq, "-o", out, "--slab", "4", "--engine", "local",
                  "--no-conf"], d, GPUMR_EMULATE_FAULTS="sticky@launch#2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = {json.loads(k): json.loads(v) for k, v in (line.split("\t") for line in lines_of(out))}
    assert sorted(values) == [f"z{z:05d}" for z in range(0, 32, 4)]
    assert all(v["device"] == "cpu" for v in values.values())
    assert proc.stderr.splitlines()[-1].startswith("gpumr: 8 records: 8 on CPU, 0 on GPU, 4 GPU fallbacks, 0 bad")
    v = volume(d, out)
    assert np.abs(v - direct).max() <= 1e-4 * np.abs(direct).max()


def test_a_task_whose_owner_is_gone_runs_the_rest_on_the_cpu(phantom, tmp_path):
    """The owner process killed under a task: its batch fails (the task re-runs it on the CPU), and device choice
    gives the CPU from then on."""
    import argparse
    import contextlib
    import signal

    from gpumr.devices.chooser import DeviceChooser
    from gpumr.launch import owners
    from gpumr.launch.plan import make_plan
    from gpumr.tasks import output, owned
    d, seq, _ = phantom
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    with contextlib.ExitStack() as stack:
        stack.enter_context(pytest.MonkeyPatch.context()).setenv(SIMULATE_ENV, "1")
        plan = make_plan(["backproject", "--projections", seq, "--slab", "8", "-o", str(tmp_path / "out")], str(folder))
        paths = stack.enter_context(owners.started(plan.spec, plan.start))  # (one owner)
        client = owned.connect(paths, "task-1")
        assert client is not None and client.gpu.simulated
        chooser = owned.OwnedChooser(client, DeviceChooser("auto"))
        work = owned.Owned(None, chooser, output.Arrays(None, "task-1"))
        ns = argparse.Namespace()
        assert len(work.gpu_batch([("z00000", (0, 8))], ns, None)) == 1 and chooser.choose().on_gpu
        pid = [p for p in os.listdir("/proc") if p.isdigit() and
               str(folder) in open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")]
        assert len(pid) == 1
        os.kill(int(pid[0]), signal.SIGKILL)
        with pytest.raises(owned.OwnerGone, match="the GPU owner is gone"):
            work.gpu_batch([("z00008", (8, 16))], ns, None)
        assert not chooser.choose().on_gpu
        chooser.close()


ORPHAN = """
import sys, time
from gpumr.launch.plan import make_plan
from gpumr.launch import owners
plan = make_plan(["backproject", "--projections", sys.argv[1], "-o", sys.argv[3]], sys.argv[2])
with owners.started(plan.spec, plan.start) as paths:
    print(*paths, flush=True)
    time.sleep(120)
"""


def test_an_owner_whose_launcher_is_killed_ends_too(phantom, tmp_path):
    """The launcher killed (SIGKILL: it cannot stop its owner): the owner ends by itself within seconds, so no
    process is left holding a GPU's lease."""
    import time
    d, seq, _ = phantom
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    launcher = subprocess.Popen([sys.executable, "-c", ORPHAN, seq, folder, tmp_path / "out"], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, SIMULATE_ENV: "1"})
    try:
        assert launcher.stdout.readline().strip() == str(folder / "gpu-owner-0.sock")
        owners = [int(p) for p in os.listdir("/proc") if p.isdigit() and
                  f"{folder}/gpu-owner.spec".encode() in open(f"/proc/{p}/cmdline", "rb").read()]
        assert len(owners) == 1
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{owners[0]}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{owners[0]}")


def test_a_long_tmpdir_puts_the_sockets_in_a_short_private_folder_removed_after(phantom, tmp_path, monkeypatch):
    """A job folder too deep for a Unix socket's path (107 bytes): the owners listen in a private folder of their own
    (0700, short), removed when they stop."""
    from gpumr.launch import owners
    from gpumr.launch.plan import make_plan
    from gpumr.tasks import owned
    d, seq, _ = phantom
    folder = tmp_path / ("t" * 100)
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(SIMULATE_ENV, "1")
    plan = make_plan(["backproject", "--projections", seq, "-o", str(tmp_path / "out")], str(folder))
    with owners.started(plan.spec, plan.start) as paths:
        assert len(paths) == 1 and len(os.fsencode(paths[0])) <= owners.SUN_PATH
        short = os.path.dirname(paths[0])
        assert short != str(folder) and os.stat(short).st_mode & 0o777 == 0o700
        client = owned.connect(paths, "task-1")
        assert client is not None and client.gpu.simulated
        client.close()
    assert not os.path.exists(short)
