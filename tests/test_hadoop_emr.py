"""EMR as far as this machine allows: the config resolves in mrjob's EMR runner, the bootstrap is
clean shell and, run against a temporary root, installs gpumr and starts the scheduler with a
socket for the task user's group only; it trusts nothing it finds there (issue 19, class 2)."""

import grp
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from conftest import assert_shellcheck_passes

import gpumr.conf

CONF_DIR = os.path.dirname(gpumr.conf.__file__)
BOOTSTRAP = os.path.join(CONF_DIR, "bootstrap-gpu-node.sh")
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_emr_config_resolves_without_aws(monkeypatch):
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    from mrjob.emr import EMRJobRunner
    monkeypatch.chdir(CHECKOUT)  # the packaged config's placeholders name the bootstrap and the wheel from here
    runner = EMRJobRunner(conf_paths=[os.path.join(CONF_DIR, "mrjob.emr.conf")], cloud_tmp_dir="s3://bucket/tmp/")
    o = runner._opts
    major = int(o["release_label"].split("-")[1].split(".")[0])
    assert major >= 7  # Amazon Linux 2023, Python 3.9: gpumr installs (emr-6.x has Python 3.7)
    types = [g["InstanceType"] for g in o["instance_groups"] if g["InstanceRole"] != "MASTER"]
    assert types and all(t.split(".")[0] in ("g4dn", "g5", "g6", "p3", "p4d") for t in types)
    # The bootstrap line uploads the script and the wheel; tasks use the environment it makes.
    (cmd,) = runner._bootstrap
    files = [part["path"] for part in cmd if isinstance(part, dict)]
    assert files == ["conf/bootstrap-gpu-node.sh", "dist/gpumr-0.1.0-py3-none-any.whl"]
    assert cmd[0].startswith("sudo ")
    assert runner._python_bin() == ["/opt/gpumr/venv/bin/python"] and o["bootstrap_mrjob"] is False
    script = open(BOOTSTRAP).read()
    assert "VENV=${GPUMR_VENV:-$ROOT/opt/gpumr/venv}" in script and "RUN_DIR=${GPUMR_RUN_DIR:-$ROOT/run/gpumr}" in script
    assert o["cmdenv"]["GPUMR_SCHEDULER_SOCKET"] == "/run/gpumr/scheduler.sock"
    assert o["cmdenv"]["GPUMR_LEASE_DIR"] == "/run/gpumr/leases"  # the service's: one system with lock files


def test_bootstrap_passes_shellcheck():
    assert_shellcheck_passes(BOOTSTRAP)


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the bootstrap runs as root (EMR runs it with sudo): "
                                                          "it makes root-owned folders")
NOBODY = 65534


def bootstrap(root, package="unused.whl", venv=None, **env):
    """Run the real bootstrap against the temporary root ``root``; the test's own group stands in for `hadoop`."""
    group = grp.getgrgid(os.getegid()).gr_name
    env = dict(os.environ, GPUMR_ROOT=str(root), GPUMR_GROUP=group, GPUMR_GPU="no", GPUMR_SERVICE="nohup",
               GPUMR_SIMULATE_GPUS="1", PYTHON=sys.executable) | env
    if venv is not None:
        env["GPUMR_VENV"] = str(venv)
    env.pop("GPUMR_SCHEDULER_SOCKET", None)
    return subprocess.run(["bash", BOOTSTRAP, str(package)], env=env, capture_output=True, text=True, timeout=900)


def said(proc):
    """The bootstrap's own lines (pip's warnings about local indexes aside)."""
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("gpumr bootstrap: ")]


def serving_pid(proc):
    """The pid the bootstrap reported serving, or None."""
    last = said(proc)[-1] if said(proc) else ""
    return int(last.rsplit("pid ", 1)[1]) if "scheduler serving on" in last else None


def answers(venv, sock, pid):
    """Whether process ``pid`` serves ``sock`` (peer credentials), asked with the installed gpumr."""
    return subprocess.run([str(venv / "bin/gpumr"), "scheduler", "status", "--socket", str(sock), "--expect-pid",
                           str(pid)], capture_output=True, text=True, timeout=60).returncode == 0


def stop(pid):
    """SIGTERM ``pid`` and wait until it has stopped."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not _running(pid):
            return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """One real bootstrap, into a temporary root, of the wheel ``--engine emr`` builds of the gpumr that runs it (its
    packaged config's); its environment serves the later runs."""
    if os.geteuid() != 0:
        pytest.skip("the bootstrap runs as root (EMR runs it with sudo): it makes root-owned folders")
    from gpumr.engines.mrjob.bundle import build_wheel
    tmp = tmp_path_factory.mktemp("bootstrap")
    wheel = build_wheel(str(tmp))
    root = tmp / "root"
    proc = bootstrap(root, wheel)
    pids = [serving_pid(proc)] if serving_pid(proc) else []
    yield dict(proc=proc, root=root, package=wheel, venv=root / "opt/gpumr/venv", pids=pids)
    for pid in pids:
        stop(pid)


@pytest.fixture
def rerun(installed, tmp_path):
    """Run the bootstrap again, with the installed environment, against a root of this test's own."""
    def run(root=tmp_path / "root", **env):
        proc = bootstrap(root, installed["package"], installed["venv"], **env)
        if serving_pid(proc):
            installed["pids"].append(serving_pid(proc))
        return proc
    return run


@pytest.mark.slow
def test_bootstrap_installs_gpumr_and_starts_the_scheduler(installed):
    """Against a temporary root: the wheel into a new environment, the service up, its socket group-only."""
    proc, root, venv = installed["proc"], installed["root"], installed["venv"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    pid = serving_pid(proc)
    assert pid and int((root / "run/gpumr/scheduler.pid").read_text()) == pid
    group = grp.getgrgid(os.getegid()).gr_name
    run_dir, sock, leases = root / "run/gpumr", root / "run/gpumr/scheduler.sock", root / "run/gpumr/leases"
    d, s, ld = os.stat(run_dir), os.stat(sock), os.stat(leases)
    # The group enters the socket's folder and connects, but cannot add or replace anything there;
    # it makes its lock files in the lease folder.
    assert stat.S_IMODE(d.st_mode) == 0o2750 and d.st_uid == 0 and grp.getgrgid(d.st_gid).gr_name == group
    # sticky too: a member makes lock files there, and may not remove or replace another's (issue 25)
    assert stat.S_IMODE(ld.st_mode) == 0o3770 and ld.st_uid == 0 and grp.getgrgid(ld.st_gid).gr_name == group
    assert stat.S_ISSOCK(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o660  # group may connect, others not
    assert grp.getgrgid(s.st_gid).gr_name == group
    # The installed gpumr answers on that socket, from the process the bootstrap started.
    status = subprocess.run([str(venv / "bin/gpumr"), "scheduler", "status", "--socket", str(sock),
                             "--expect-pid", str(pid)], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert f"pid {pid}" in status.stdout and "simulated" in status.stdout
    assert str(root) in subprocess.run([str(venv / "bin/python"), "-c", "import gpumr; print(gpumr.__file__)"],
                                       capture_output=True, text=True).stdout


@ROOT_ONLY
@pytest.mark.parametrize("plant, what", [
    ("symlink", "is a symlink"),
    ("foreign", f"belongs to uid {NOBODY}, not to root"),
    ("open", "mode 777 lets others write in it"),
    ("open-sticky", "mode 1777 lets others write in it"),
    ("log-symlink", "is a symlink; refusing to write the log through it"),
    ("venv-symlink", "is a symlink"),
    ("venv-foreign", f"belongs to uid {NOBODY}, not to root"),
])
def test_bootstrap_refuses_what_it_cannot_trust_before_anything(tmp_path, plant, what):
    """A run folder that is a link, someone else's or open to all, a log that is a link, or an environment
    (whose Python root would run) that is a link or someone else's: one line, exit 1, nothing run or made."""
    root = tmp_path / "root"
    run_dir, elsewhere = root / "run/gpumr", tmp_path / "elsewhere"
    (root / "run").mkdir(parents=True)
    elsewhere.mkdir(mode=0o700)
    named = run_dir
    ran = tmp_path / "planted-python-ran"
    if plant.startswith("venv"):
        named = root / "opt/gpumr/venv"
        named.parent.mkdir(parents=True)
        env = tmp_path / "planted-env" if plant == "venv-symlink" else named
        (env / "bin").mkdir(parents=True)
        (env / "bin/python").write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
        os.chmod(env / "bin/python", 0o755)
        if plant == "venv-symlink":
            named.symlink_to(env)
        else:
            for p in (named, named / "bin", named / "bin/python"):
                os.chown(p, NOBODY, NOBODY)
    elif plant == "symlink":
        run_dir.symlink_to(elsewhere)
    elif plant == "foreign":
        run_dir.mkdir()
        os.chown(run_dir, NOBODY, NOBODY)
    elif plant.startswith("open"):
        run_dir.mkdir()
        os.chmod(run_dir, 0o1777 if plant == "open-sticky" else 0o777)
    else:
        (root / "var/log").mkdir(parents=True)
        named = root / "var/log/gpumr-scheduler.log"
        named.symlink_to(elsewhere / "victim")
    before = {p: os.lstat(p) for p in (run_dir, elsewhere, named) if os.path.lexists(p)}
    proc = bootstrap(root)
    assert proc.returncode == 1
    assert said(proc) == [ln for ln in proc.stderr.splitlines() if ln.strip()]  # nothing but its own line
    (line,) = said(proc)
    assert str(named) in line and what in line
    assert os.listdir(elsewhere) == [] and not ran.exists()  # nothing made there, nothing planted run
    if plant.startswith("venv"):
        assert os.listdir(root / "opt/gpumr") == ["venv"] and not run_dir.exists()  # refused before anything
    else:
        assert not (root / "opt").exists()  # nothing installed
    for p, st in before.items():
        now = os.lstat(p)
        assert (now.st_mode, now.st_uid, now.st_gid) == (st.st_mode, st.st_uid, st.st_gid)  # not "fixed" either


@pytest.mark.slow
def test_bootstrap_writes_nothing_through_planted_links(rerun, tmp_path):
    """Links planted where it writes (a unit file; a pid file in an earlier, group-writable run folder): replaced."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    unit = tmp_path / "root/etc/systemd/system/gpumr-scheduler.service"
    unit.parent.mkdir(parents=True)
    unit.symlink_to(victim)
    proc = rerun(GPUMR_SERVICE="systemd")  # no systemd here: it stops at systemctl, after writing the unit
    assert victim.read_text() == "precious\n"
    assert not unit.is_symlink() and "ExecStart=" in unit.read_text() and "scheduler serve" in unit.read_text()
    assert proc.returncode != 0 and "serving on" not in proc.stderr
    run_dir = tmp_path / "root/run/gpumr"
    os.chmod(run_dir, 0o2770)  # the layout before this fix: the group could plant files here
    (run_dir / "scheduler.pid").symlink_to(victim)
    proc = rerun()
    assert proc.returncode == 0, proc.stderr[-2000:]
    pid = serving_pid(proc)
    assert victim.read_text() == "precious\n"
    pid_file = run_dir / "scheduler.pid"
    assert not pid_file.is_symlink() and int(pid_file.read_text()) == pid
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o2750  # the group may no longer plant anything


@pytest.mark.slow
def test_bootstrap_run_again_replaces_its_own_service_and_recovers_from_a_crash(installed, rerun, tmp_path):
    venv, run_dir = installed["venv"], tmp_path / "root/run/gpumr"
    sock, pid_file = run_dir / "scheduler.sock", run_dir / "scheduler.pid"
    first = serving_pid(rerun())
    # Run again: it finds the service it started (its pid file's pid serves the socket) and replaces it.
    again = rerun()
    assert again.returncode == 0, again.stderr[-2000:]
    second = serving_pid(again)
    assert f"stopped the earlier scheduler (pid {first})" in again.stderr
    assert "gpumr 0.1.0 from this package is already installed" in again.stderr  # same wheel: no reinstall
    assert second != first and not _running(first)
    assert int(pid_file.read_text()) == second and answers(venv, sock, second)  # never the dead one
    # A crash leaves the socket file and a pid file naming the dead: a fresh service, not "serving" off those.
    os.kill(second, signal.SIGKILL)
    for _ in range(100):
        if not _running(second):
            break
        time.sleep(0.05)
    assert stat.S_ISSOCK(os.lstat(sock).st_mode) and int(pid_file.read_text()) == second
    after = rerun()
    assert after.returncode == 0, after.stderr[-2000:]
    third = serving_pid(after)
    assert third not in (first, second) and answers(venv, sock, third)
    assert int(pid_file.read_text()) == third


SQUATTER = """
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.setgid(65534)
os.setuid(65534)  # before listen(): the credentials clients see are nobody's
s.listen()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_bootstrap_fails_on_a_live_socket_it_did_not_start(installed, rerun, tmp_path):
    run_dir = tmp_path / "root/run/gpumr"
    run_dir.mkdir(parents=True)
    os.chmod(run_dir, 0o2750)
    sock = run_dir / "scheduler.sock"
    squatter = subprocess.Popen([sys.executable, "-c", SQUATTER, str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "ready"
        proc = rerun()
        assert proc.returncode == 1 and "serving on" not in proc.stderr
        line = said(proc)[-1]
        assert "did not start" in line and str(sock) in line and f"pid {squatter.pid}, uid {NOBODY}" in line
        assert squatter.poll() is None and stat.S_ISSOCK(os.lstat(sock).st_mode)  # left alone
        assert not (run_dir / "scheduler.pid").exists()
    finally:
        squatter.kill()
        squatter.wait(10)
        squatter.stdout.close()


def _running(pid):
    """Whether ``pid`` runs (a zombie left for init to reap has stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---- --engine emr without a config: gpumr's packaged one, its whole plan shown (issue 66, finding 1) ----------
def _emr_dry_run(s3, packed, name, *extra):
    """``gpumr run faces --engine emr --dry-run`` over ``packed`` uploaded to the S3 server: (exit status, lines)."""
    from s3server import BUCKET

    from gpumr.cli import main
    for f in sorted(os.listdir(packed)):
        s3.put(f"{name}/frames/{f}", open(os.path.join(packed, f), "rb").read())
    rc = main(["run", "faces", f"s3://{BUCKET}/{name}/frames/", "-o", f"s3://{BUCKET}/{name}/out/", "--engine", "emr",
               "--dry-run", "--cloud-tmp-dir", f"s3://{BUCKET}/{name}/tmp/", *extra])
    return rc


def _settings(out):
    import json
    prefix = "gpumr run: mrjob's settings (secrets hidden): "
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith(prefix))[len(prefix):])["options"]


@pytest.fixture
def no_mrjob_conf(tmp_path, monkeypatch):
    """A HOME without ~/.mrjob.conf and no $MRJOB_CONF: mrjob finds no config of the user's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MRJOB_CONF", raising=False)
    return home


def test_emr_without_a_config_plans_the_packaged_cluster_field_by_field(s3, packed, no_mrjob_conf, capsys):
    """Without -c the job plans gpumr's packaged EMR config: each of its fields is in the plan the dry run shows,
    the bootstrap installs a wheel of this gpumr, and ``image_version`` no longer contradicts the release."""
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    import re

    import yaml
    from s3server import BUCKET

    import gpumr
    want = yaml.safe_load(open(os.path.join(CONF_DIR, "mrjob.emr.conf")))["runners"]["emr"]
    assert _emr_dry_run(s3, packed, "emrplan") == 0
    out = capsys.readouterr().out
    o = _settings(out)
    for field in ("region", "release_label", "instance_groups", "bootstrap_mrjob", "iam_instance_profile",
                  "iam_service_role"):
        assert o[field] == want[field], field
    assert o["python_bin"] == [want["python_bin"]] and set(o["cmdenv"]) == set(want["cmdenv"])
    assert int(o["release_label"].split("-")[1].split(".")[0]) >= 7 and "image_version" not in o
    (line,) = o["bootstrap"]
    wheel = f"gpumr-{gpumr.__version__}-py3-none-any.whl"
    assert re.fullmatch(rf"sudo bash {re.escape(CONF_DIR)}/bootstrap-gpu-node\.sh# /\S+/gpumr-job-\w+/{wheel}#", line)
    # The same, said for a person: what would start, from where, at what cost in instances.
    said = [ln[len("gpumr run: "):] for ln in out.splitlines() if ln.startswith("gpumr run: EMR ")]
    nodes = ", ".join(f"{g['InstanceRole']} {g['InstanceCount']} x {g['InstanceType']}"
                      + (" (spot)" if g.get("Market") == "SPOT" else "") for g in want["instance_groups"])
    tmp = f"s3://{BUCKET}/emrplan/tmp/"
    frames = sorted(os.listdir(packed))
    assert said == [
        f"EMR cluster: release {want['release_label']} in region {want['region']}, started for this job and ended "
        "after it",
        f"EMR nodes: {nodes}",
        f"EMR bootstrap, as root on every node: sudo bash bootstrap-gpu-node.sh {wheel}",
        f"EMR uploads to {tmp}: bootstrap-gpu-node.sh (from {CONF_DIR}), {wheel} (a wheel of this gpumr "
        f"{gpumr.__version__}, built for the job), the job's spec, task files and side files",
        f"EMR tasks read s3://{BUCKET}/emrplan/frames/{frames[0]} and {len(frames) - 1} more "
        f"({sum(os.path.getsize(os.path.join(packed, f)) for f in frames)} bytes) from S3; output "
        f"s3://{BUCKET}/emrplan/out",
        f"EMR tasks run {want['python_bin']}; the cluster's logs (a failed task's stderr among them) go to {tmp}logs/",
        f"EMR access: key pair none (no SSH to the nodes); subnet none named (the default VPC); roles "
        f"{want['iam_instance_profile']} (the nodes') and {want['iam_service_role']} (EMR's)",
        "EMR config: gpumr's packaged mrjob.emr.conf"]
    assert not s3.keys("emrplan/tmp/")  # planned, nothing uploaded
    # --device cpu: the same cluster with CPU core and task nodes.
    assert _emr_dry_run(s3, packed, "emrcpu", "--device", "cpu") == 0
    groups = _settings(capsys.readouterr().out)["instance_groups"]
    assert [g["InstanceType"] for g in groups] == ["m5.xlarge", "m5.2xlarge", "m5.2xlarge"]
    assert [g["InstanceCount"] for g in groups] == [g["InstanceCount"] for g in want["instance_groups"]]


def test_emr_takes_the_users_own_mrjob_conf_over_the_packaged_one_and_never_none(s3, packed, no_mrjob_conf,
                                                                                  capsys):
    """A user's ~/.mrjob.conf (mrjob's own default) is read after gpumr's packaged config: its settings win, its
    secrets stay hidden. ``--no-conf`` (mrjob's defaults: no bootstrap, Python 3.7) is refused in one line."""
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    own = no_mrjob_conf / ".mrjob.conf"
    own.write_text("runners:\n  emr:\n    ec2_key_pair: my-key\n    subnet: subnet-0abc\n"
                   "    aws_secret_access_key: SECRETKEY123\n")
    assert _emr_dry_run(s3, packed, "emrown") == 0
    out = capsys.readouterr().out
    assert "SECRETKEY123" not in out
    assert "gpumr run: EMR access: key pair my-key; subnet subnet-0abc; roles EMR_EC2_DefaultRole" in out
    assert f"gpumr run: EMR config: gpumr's packaged mrjob.emr.conf, then {own}\n" in out
    assert _settings(out)["release_label"].startswith("emr-7")
    assert _emr_dry_run(s3, packed, "emrnone", "--no-conf") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpumr: error: --no-conf: EMR's nodes need a config") and \
        "gpumr conf mrjob.emr.conf -o emr.conf" in err


def test_the_wheel_emr_installs_is_this_gpumr(tmp_path):
    """The wheel ``--engine emr`` builds for the nodes installs (pip, no index) this gpumr's files, unchanged, and
    its ``gpumr`` command."""
    from gpumr.engines.mrjob.bundle import build_wheel, declared_files
    wheel = build_wheel(str(tmp_path))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    wheel], check=True, capture_output=True, timeout=300)
    for name, path in declared_files():
        assert (target / name).read_bytes() == open(path, "rb").read(), name
    assert (target / "bin" / "gpumr").is_file()
    proc = subprocess.run([sys.executable, "-c", "import gpumr; print(gpumr.__file__, gpumr.__version__)"],
                          env=dict(os.environ, PYTHONPATH=str(target)), capture_output=True, text=True, timeout=120)
    import gpumr
    assert proc.stdout.split() == [str(target / "gpumr" / "__init__.py"), gpumr.__version__]
    (tmp_path / "again").mkdir()
    assert open(build_wheel(str(tmp_path / "again")), "rb").read() == open(wheel, "rb").read()  # same gpumr, bytes


def test_an_aws_refusal_is_its_own_line_not_a_failed_task(s3, packed, tmp_path, no_mrjob_conf, capfd):
    """Against the S3 test server (moto, which answers IAM too, and refuses EMR's managed policies), a config that
    names no roles makes mrjob create its own, which fails: that is AWS's refusal, named with the fix, not "a task
    of the emr job failed"."""
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    from s3server import BUCKET

    from gpumr.cli import main
    for f in sorted(os.listdir(packed)):
        s3.put(f"emriam/frames/{f}", open(os.path.join(packed, f), "rb").read())
    (tmp_path / "gpumr-0.1.0-py3-none-any.whl").write_bytes(b"stand-in")
    conf = tmp_path / "emr.conf"
    assert main(["conf", "mrjob.emr.conf", "-o", str(conf), "--package", str(tmp_path / "gpumr-0.1.0-py3-none-any.whl"),
                 "-q"]) == 0
    conf.write_text("".join(ln for ln in conf.read_text().splitlines(True) if "iam_" not in ln))
    assert main(["run", "faces", f"s3://{BUCKET}/emriam/frames/", "-o", f"s3://{BUCKET}/emriam/out/", "--engine",
                 "emr", "-c", str(conf), "--cloud-tmp-dir", f"s3://{BUCKET}/emriam/tmp/"]) == 1
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpumr: error: --engine emr: AWS refused "), err
    assert "a task of" not in err and "aws emr create-default-roles" in err
    assert not s3.keys("emriam/out")
