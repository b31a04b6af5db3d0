"""bench/gpu_model.py: the GPU speed model's pieces on crafted input, and its quick run's table."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import assert_shellcheck_passes

from gpumr.gpu import emulate, kernels

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import gpu_model  # noqa: E402 (after the sys.path line that finds it)

PTXAS = """ptxas info    : 0 bytes gmem, 16384 bytes cmem[3]
ptxas info    : Compiling entry function 'backproject_slab' for 'sm_90'
ptxas info    : Function properties for backproject_slab
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem
"""

# An angle loop whose division has a slow path behind a CALL, and a guarded block.
SASS = [
    (0x00, "S2R R0, SR_TID.X"),
    (0x10, "@P0 EXIT"),
    (0x20, "FMUL R1, R2, R3"),          # loop start
    (0x30, "@P0 BRA 0x60"),             # skips the slow path: taken
    (0x40, "CALL.REL.NOINC 0x100"),
    (0x50, "BRA 0x70"),
    (0x60, "MUFU.RCP R4, R1"),
    (0x70, "@!P1 BRA 0x90"),            # guards a load: falls through (the load runs)
    (0x80, "LDG.E.CONSTANT R5, desc[UR4][R6.64]"),
    (0x90, "FADD R7, R7, R5"),
    (0xa0, "@!P2 BRA 0x20"),            # back branch
    (0xb0, "EXIT"),
    (0x100, "RET.REL.NODEC R20 0x0"),
]


def test_resources_parsed():
    got = gpu_model.parse_resources(PTXAS)["backproject_slab"]
    assert got == dict(regs=40, spill_stores=8, spill_loads=12, stack=0, smem=1024)


def test_occupancy_of_40_registers_is_75_percent():
    h100 = gpu_model.DEVICES["H100 SXM"]
    assert gpu_model.occupancy(40, 256, 0, h100) == (6, 48, 0.75)
    assert gpu_model.occupancy(32, 256, 0, h100)[2] == 1.0
    assert gpu_model.occupancy(64, 256, 0, h100)[2] == 0.5


def test_fast_path_skips_the_slow_path_and_runs_the_guarded_block():
    f = gpu_model.Flow(SASS)
    assert f.loops == [(2, 10)]
    # 0x20 FMUL, 0x30 BRA (taken), 0x60 MUFU, 0x70 BRA, 0x80 LDG, 0x90 FADD, 0xa0 BRA
    assert f.walk(2, 10) == 7
    assert f.walk(2, 10, skip={7}) == 6  # the guarded load skipped
    assert f.guarded(2, 10, r"LDG") == [(7, 1)]
    assert gpu_model.backproject_counts(SASS, zb=7)["per_update"] == 1.0


def _missing():
    if kernels.nvcc() is None:
        return "no nvcc (the model reads registers and SASS from it)"
    if gpu_model.tool("cuobjdump") is None or gpu_model.tool("nvdisasm") is None:
        return "no cuobjdump/nvdisasm (pip install 'gpumr[model]')"
    if not emulate.available()[0]:
        return "no C++ compiler for the instrumented emulator"
    return None


@pytest.mark.slow
def test_quick_run_prints_labelled_predictions(tmp_path):
    why = _missing()
    if why:
        pytest.skip(why)
    env = dict(os.environ, GPUMR_KERNEL_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu_model.py"), "--quick"],
                          capture_output=True, text=True, env=env, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    tables = [block.strip() for block in out.split("\n\n") if block.strip().startswith("PREDICTIONS")]
    assert len(tables) == 3, out
    for block in tables[:2]:
        title, header = block.splitlines()[:2]
        assert "PREDICTIONS" in title and "no GPU ran" in title
        assert header.count("PREDICTION") >= 3
        assert "A100 SXM" in block
    # end to end: the three jobs, each against its goal, with the phase that bounds it
    title, header, *rows = tables[2].splitlines()
    assert "no GPU ran" in title and "16 cores" in title and header.count("PREDICTION") == 2
    assert [r.split()[0] for r in rows] == ["faces", "CT", "CT"] and all(">=" in r or "<=" in r for r in rows)
    assert all("then assembly" in r for r in rows[1:]) and all(r.split()[-1] in ("met", "missed", "in range")
                                                                for r in rows)
    # its inputs: the driver's calls per part as counted (one wait), every host cost measured
    calls = out[out.index("Driver calls per part"):].split("\n\n")[0]
    assert re.search(r"host synchronisations\s+1\b", calls) and re.search(r"launch\s+9\b", calls)
    costs = out[out.index("Host costs on the job's path"):].split("\n\n")[0]
    for what in ("read", "decode", "fill", "group", "encode", "write", "start-up", "publish", "check", "load",
                 "filter", "receive", "assemble"):
        assert f": {what}" in costs, what
    assert "Assumptions of every prediction above" in out
    # the SASS count the model reads is a number per voxel update
    line = next(ln for ln in out.splitlines() if ln.startswith("backprojection: instructions per voxel update"))
    assert float(line.split()[-1]) > 10


def test_gpu_check_passes_shellcheck():
    assert_shellcheck_passes(os.path.join(REPO, "bench", "gpu_check.sh"))


def test_gpu_check_without_a_gpu_says_so_and_fails(tmp_path):
    """No nvidia-smi on PATH: one line on stderr, exit 1, nothing installed or written."""
    bash = shutil.which("bash")
    env = dict(os.environ, PATH=str(tmp_path), OUT=str(tmp_path / "out"), GPUMR_SITE=str(tmp_path / "site"))
    proc = subprocess.run([bash, os.path.join(REPO, "bench", "gpu_check.sh")], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("gpu_check: no NVIDIA GPU here") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "site").exists()


def test_gpu_check_dry_run_says_so_and_measures_nothing(tmp_path):
    """``--dry``: no GPU needed; every step named with its timeout (all within 8 minutes), the table's rows
    unmeasured, exit 0, nothing installed or written."""
    import re
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPUMR_SITE=str(tmp_path / "site"))
    proc = subprocess.run([shutil.which("bash"), os.path.join(REPO, "bench", "gpu_check.sh"), "--dry"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "no GPU is used and nothing is measured" in out and "DRY RUN, no GPU used" in out
    limits = [int(s) for s in re.findall(r"step \S+, at most (\d+)s", out)]
    assert len(limits) >= 5 and sum(limits) <= 480
    assert "-m gpu" in out  # only the tests that touch the device
    for row in ("equality on the device", "faces fps, job end to end", "CT GUPS at 512^3", "CT 1024^3 x 360 end to end",
                "CPU and GPU together"):
        assert re.search(re.escape(row) + r".*not run \(dry\)", out)
    assert not (tmp_path / "out").exists() and not (tmp_path / "site").exists()


def test_gpu_check_counts_a_skipped_gpu_test_as_a_failure():
    with open(os.path.join(REPO, "bench", "gpu_check.sh"), encoding="utf-8") as f:
        script = f.read()
    assert "a skip is a failure" in script and 'suite.get("skipped"' in script
    assert "GPUMR_SIMULATE_GPUS" not in script
