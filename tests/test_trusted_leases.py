"""Trusted paths, lease folder (issue 25, class 2): a FIFO named like a lock file blocks nothing.

Real processes with timeouts: before the fix, the service blocked in ``open()``
on the FIFO (status and acquire stopped answering) and a lock-file client
blocked for good.
"""

import json
import os
import socket
import stat
import subprocess
import sys

import pytest

from gpumr.devices import nvml
from gpumr.devices.leases import LockFileLeases
from gpumr.trusted import Untrusted, check_folder, open_regular

GPUMR = [sys.executable, "-m", "gpumr"]


def _fifo_at_slot(lease_dir, gpu_index=0, slot=0, n=2):
    os.makedirs(lease_dir, mode=0o700, exist_ok=True)
    gpu = nvml.simulated_gpus(str(n))[gpu_index]
    path = os.path.join(lease_dir, LockFileLeases.slot_name(gpu, slot))
    os.mkfifo(path)
    return path


class _Conn:
    """One connection to the service (a lease lives as long as its connection)."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(15)  # the old service never answered: the test fails here instead of hanging
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    def ask(self, obj):
        self.s.sendall(json.dumps(obj).encode() + b"\n")
        return json.loads(self.f.readline())

    def close(self):
        self.f.close()
        self.s.close()


def test_fifo_named_like_a_lock_file_does_not_block_the_service(tmp_path):
    leases = str(tmp_path / "leases")
    fifo = _fifo_at_slot(leases)
    sock = str(tmp_path / "s.sock")
    proc = subprocess.Popen(GPUMR + ["scheduler", "serve", "--socket", sock, "--lease-dir", leases],
                            env=dict(os.environ, GPUMR_SIMULATE_GPUS="2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "serving on" in proc.stdout.readline()
        c = _Conn(sock)
        try:
            assert c.ask({"op": "status"})["ok"] is True
            got = c.ask({"op": "acquire", "memory": 0, "block": False})
            assert got["ok"] is True and got["gpu"] == 1  # GPU 0's only slot is the FIFO: never granted
            again = c.ask({"op": "acquire", "memory": 0, "block": False})
            assert again["ok"] is False and again["code"] == "no-gpu-free"
            assert c.ask({"op": "status"})["ok"] is True
        finally:
            c.close()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        proc.stdout.close()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left where it was
    assert err.count("refusing a lock file that is a FIFO") == 1, err  # one warning, naming it
    assert fifo in err


def test_fifo_named_like_a_lock_file_does_not_block_a_lock_file_client(tmp_path):
    leases = str(tmp_path / "leases")
    _fifo_at_slot(leases, n=1)
    code = ("import sys; from gpumr.devices.chooser import DeviceChooser\n"
            "c = DeviceChooser('auto', lease_dir=sys.argv[1], scheduler=False)\n"
            "ch = c.choose(); print('gpu' if ch.on_gpu else 'cpu')\n")
    r = subprocess.run([sys.executable, "-c", code, leases], env=dict(os.environ, GPUMR_SIMULATE_GPUS="1"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu"  # the slot is not usable; the record goes to the CPU, at once
    assert "refusing a lock file that is a FIFO" in r.stderr


def test_fifo_named_like_a_context_file_does_not_block_counting_siblings(tmp_path):
    leases = str(tmp_path / "leases")
    os.makedirs(leases, mode=0o700)
    gpu = nvml.simulated_gpus("1")[0]
    os.mkfifo(os.path.join(leases, f"ctx-{gpu.uuid}-12345"))
    code = ("import sys; from gpumr.devices import nvml; from gpumr.devices.leases import LockFileLeases\n"
            "print(sorted(LockFileLeases(sys.argv[1]).sibling_pids(nvml.simulated_gpus('1')[0])))\n")
    r = subprocess.run([sys.executable, "-c", code, leases], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


@pytest.mark.parametrize("make", ["fifo", "symlink", "folder"])
def test_open_regular_refuses_what_is_not_a_regular_file_at_once(tmp_path, make):
    path = str(tmp_path / "x.lock")
    if make == "fifo":
        os.mkfifo(path)
    elif make == "symlink":
        os.symlink(tmp_path / "elsewhere", path)
    else:
        os.mkdir(path)
    for flags in (os.O_RDONLY, os.O_RDONLY | os.O_CREAT, os.O_WRONLY):
        with pytest.raises((Untrusted, IsADirectoryError)):
            os.close(open_regular(path, flags))
    assert not (tmp_path / "elsewhere").exists()


def test_shared_folder_needs_the_sticky_bit(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o2770)
    with pytest.raises(Untrusted, match="without the sticky bit"):
        check_folder(str(d), "leases", shared=True)
    with pytest.raises(Untrusted, match="it must be 0700"):
        check_folder(str(d), "leases")
    os.chmod(d, 0o3770)
    check_folder(str(d), "leases", shared=True)
    with pytest.raises(Untrusted, match="it must be 0700"):
        check_folder(str(d), "leases")
