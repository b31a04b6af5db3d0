"""Node-local state (lease folder, lock files, scheduler socket) that someone else could plant (issue 11, item 9)."""

import os
import pathlib
import socket
import stat
import subprocess
import sys
import tempfile

import pytest
from conftest import warns

from gpumr.devices import nvml, paths
from gpumr.devices.leases import LockFileLeases
from gpumr.errors import GpumrError

ROOT = os.geteuid() == 0
NOBODY = 65534


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """A system temp dir of our own, and no administrator-chosen paths: the per-user folder is used."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(paths.LEASE_DIR_ENV, raising=False)
    monkeypatch.delenv(paths.SOCKET_ENV, raising=False)
    return tmp_path


def test_user_dir_is_created_0700(own_tmp):
    d = paths.lease_dir()
    assert d == str(own_tmp / f"gpumr-{os.getuid()}")
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert os.path.dirname(paths.socket_path()) == d


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o1777])
def test_user_dir_writable_by_others_is_refused(own_tmp, mode):
    d = own_tmp / f"gpumr-{os.getuid()}"
    d.mkdir()
    os.chmod(d, mode)
    with pytest.raises(GpumrError, match="lets others write in it"):
        LockFileLeases()
    assert list(d.iterdir()) == []  # nothing was created in it


def test_user_dir_as_symlink_is_refused(own_tmp):
    real = own_tmp / "elsewhere"
    real.mkdir(mode=0o700)
    (own_tmp / f"gpumr-{os.getuid()}").symlink_to(real)
    with pytest.raises(GpumrError, match="it is a symlink"):
        paths.lease_dir()


@pytest.mark.skipif(not ROOT, reason="making a folder owned by another user needs root")
def test_user_dir_of_another_owner_is_refused(own_tmp):
    d = own_tmp / f"gpumr-{os.getuid()}"
    d.mkdir(mode=0o700)
    os.chown(d, NOBODY, NOBODY)
    with pytest.raises(GpumrError, match=f"belongs to uid {NOBODY}"):
        paths.socket_path()


def test_administrator_dir_may_be_group_shared_or_sticky_but_not_open(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2770)  # group-writable without the sticky bit: a member could swap another's lock file
    with pytest.raises(GpumrError, match="without the sticky bit"):
        LockFileLeases(str(shared))
    os.chmod(shared, 0o3770)  # the EMR bootstrap's lease folder
    assert LockFileLeases(str(shared)).directory == str(shared)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    assert paths.lease_dir(str(sticky)) == str(sticky)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(GpumrError, match="lets others write in it without the sticky bit"):
        LockFileLeases(str(open_dir))
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(GpumrError, match="not a folder"):
        paths.lease_dir(str(afile))


def test_planted_symlinked_lock_file_is_not_followed(tmp_path):
    leases = LockFileLeases(str(tmp_path / "leases"))
    gpu = nvml.simulated_gpus("1")[0]
    target = tmp_path / "victim"
    os.symlink(target, os.path.join(leases.directory, leases.slot_name(gpu, 0)))
    with warns("refusing a lock file that is a symlink; that slot is treated as taken"):
        assert leases.try_acquire(gpu) is None
    assert not target.exists()  # nothing created through the link


def test_refused_folder_is_a_one_line_error_from_the_command_line(tmp_path):
    d = tmp_path / f"gpumr-{os.getuid()}"
    d.mkdir()
    os.chmod(d, 0o777)
    env = {k: v for k, v in os.environ.items() if k not in (paths.LEASE_DIR_ENV, paths.SOCKET_ENV)}
    env.update(TMPDIR=str(tmp_path), GPUMR_SIMULATE_GPUS="1")
    for cmd in (["probe"], ["scheduler", "serve"]):
        r = subprocess.run([sys.executable, "-m", "gpumr", *cmd], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines() == [f"gpumr: error: {d}: refusing it for gpumr's leases and socket: "
                                                 f"mode 0777 lets others write in it (it must be 0700; remove it "
                                                 f"or chmod 700 it)"]
    assert list(d.iterdir()) == []


def test_no_umask_changes_in_gpumr():
    """The process umask is shared by all threads: gpumr sets modes explicitly instead."""
    import gpumr
    root = pathlib.Path(gpumr.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py") if "umask(" in p.read_text()]
    assert offenders == []


@pytest.mark.skipif(not ROOT, reason="connecting as another user needs root")
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs /usr/bin/python3 for the other user")
def test_group_shared_socket_folder_lets_group_members_connect(tmp_path):
    """The EMR bootstrap's layout: a setgid 2750 folder, `serve` under umask 007; group members connect."""
    group = 4242
    top = pathlib.Path(tempfile.mkdtemp(prefix="gpumr-shared-"))  # /tmp itself: others can traverse it
    try:
        os.chmod(top, 0o755)
        run = top / "run"
        run.mkdir()
        os.chown(run, 0, group)
        os.chmod(run, 0o2750)
        sock = str(run / "scheduler.sock")
        env = dict(os.environ, GPUMR_SIMULATE_GPUS="1")
        proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--socket", sock,
                                 "--lease-dir", str(run / "leases")], env=env, stdout=subprocess.PIPE, text=True,
                                umask=0o007)
        try:
            assert "serving on" in proc.stdout.readline()
            st = os.stat(sock)
            assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o770 and st.st_gid == group
            leases = os.stat(run / "leases")  # made by the service: the group's, like the socket
            # group-writable, so sticky: no member may remove or replace another's lock file
            assert stat.S_IMODE(leases.st_mode) & 0o1777 == 0o1770 and leases.st_gid == group
            probe = ("import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                     "s.sendall(b'{\"op\": \"status\"}\\n'); print(json.loads(s.makefile().readline())['ok'])")
            member = subprocess.run(["/usr/bin/python3", "-c", probe, sock], user=NOBODY, group=NOBODY,
                                    extra_groups=[group], capture_output=True, text=True, timeout=30)
            assert member.stdout.strip() == "True", member.stderr
            outsider = subprocess.run(["/usr/bin/python3", "-c", probe, sock], user=NOBODY, group=NOBODY,
                                      extra_groups=[], capture_output=True, text=True, timeout=30)
            assert outsider.returncode != 0 and "Permission denied" in outsider.stderr
        finally:
            proc.terminate()
            proc.wait(10)
            proc.stdout.close()
    finally:
        import shutil
        shutil.rmtree(top, ignore_errors=True)


def test_task_refuses_a_socket_in_a_folder_anyone_may_write(tmp_path, monkeypatch):
    """A fake scheduler.sock planted in an open folder is never asked for leases."""
    from gpumr.devices.chooser import DeviceChooser
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    fake = socket.socket(socket.AF_UNIX)
    fake.bind(str(open_dir / "scheduler.sock"))
    fake.listen()
    try:
        with pytest.raises(GpumrError, match="lets others write in it"):
            DeviceChooser("auto", lease_dir=str(tmp_path / "leases"), scheduler=str(open_dir / "scheduler.sock"))
    finally:
        fake.close()


def test_held_slots_counts_only_the_slot_files_of_that_gpu_and_creates_none(tmp_path):
    import fcntl
    leases = LockFileLeases(str(tmp_path / "leases"), slots=2)
    gpu, other = nvml.simulated_gpus("2")
    held = leases.try_acquire(gpu)
    assert held is not None and leases.held_slots(gpu) == 1 and leases.held_slots(other) == 0
    planted = []
    for name in (leases.slot_name(gpu, "01"), leases.slot_name(gpu, 5), leases.slot_name(gpu, "\u00b2"),
                 leases.slot_name(other, 0) + ".bak"):
        fd = os.open(os.path.join(leases.directory, name), os.O_RDONLY | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # locked, but not one of gpu's 2 slots
        planted.append(fd)
    files = sorted(os.listdir(leases.directory))
    assert leases.held_slots(gpu) == 1 and leases.held_slots(other) == 0
    assert sorted(os.listdir(leases.directory)) == files
    held.release()
    assert leases.held_slots(gpu) == 0
    for fd in planted:
        os.close(fd)
