"""Leases and the scheduler service with real processes."""

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from gpumr.devices import nvml
from gpumr.devices.chooser import DeviceChooser
from gpumr.devices.client import SchedulerClient
from gpumr.devices.service import Scheduler

SIM = {"GPUMR_SIMULATE_GPUS": "2:4GiB"}


def _worker(lease_dir, socket_path, log, rounds):
    """Choose until ``rounds`` choices got a GPU (a minute at most), holding each 2 ms; log them.

    (Counting GPU grants, not tries: how many tries find a GPU free depends on how the processes
    happen to be scheduled, and a fixed number of tries made the count, and the test, a matter of luck.)
    """
    os.environ["GPUMR_SIMULATE_GPUS"] = "2:4GiB"
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=socket_path or False)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    got, deadline = 0, time.monotonic() + 60
    while got < rounds and time.monotonic() < deadline:
        ch = c.choose()
        if ch.on_gpu:
            got += 1
            os.write(fd, f"+ {ch.device}\n".encode())
            time.sleep(0.002)
            os.write(fd, f"- {ch.device}\n".encode())
        ch.release()
        if not ch.on_gpu:
            time.sleep(0.0005)
    os.close(fd)
    c.close()


def _max_concurrency(log):
    live, peak, used = Counter(), Counter(), Counter()
    for line in open(log).read().split("\n"):
        if not line:
            continue
        sign, dev = line.split()
        live[dev] += 1 if sign == "+" else -1
        peak[dev] = max(peak[dev], live[dev])
        used[dev] += sign == "+"
    return peak, used


def _run_workers(tmp_path, socket_path=None, n=6, rounds=60):
    log = str(tmp_path / "events.log")
    open(log, "w").close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "leases"), socket_path, log, rounds)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return _max_concurrency(log)


@pytest.mark.slow
def test_lock_file_leases_never_exceed_slots(tmp_path):
    peak, used = _run_workers(tmp_path)
    assert set(peak) == {"gpu:0", "gpu:1"} and max(peak.values()) == 1
    assert sum(used.values()) > 50


def _hold_lease(lease_dir, ready):
    os.environ["GPUMR_SIMULATE_GPUS"] = "1"
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=False)
    ch = c.choose()
    assert ch.on_gpu
    ready.set()
    time.sleep(600)


def test_sigkilled_holder_frees_its_lease(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_hold_lease, args=(str(tmp_path / "leases"), ready))
    p.start()
    assert ready.wait(30)
    c = DeviceChooser("auto", lease_dir=str(tmp_path / "leases"), scheduler=False)
    assert not c.choose().on_gpu
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    ch = c.choose()
    assert ch.on_gpu
    ch.release()


@pytest.fixture
def service(tmp_path):
    """`gpumr scheduler serve` in its own process, over 2 simulated GPUs."""
    path = str(tmp_path / "sched.sock")
    env = dict(os.environ, **SIM)
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--socket", path,
                             "--policy", "round-robin", "--lease-dir", str(tmp_path / "leases")],
                            env=env, stdout=subprocess.PIPE, text=True)
    banner = proc.stdout.readline()
    assert "2 GPU(s) (simulated)" in banner
    umask = int(next(x for x in open("/proc/self/status") if x.startswith("Umask:")).split()[1], 8)
    assert os.stat(path).st_mode & 0o777 == 0o777 & ~umask
    yield path
    proc.terminate()
    proc.wait(10)


@pytest.mark.slow
def test_service_under_concurrent_clients_hands_out_no_slot_twice(tmp_path, service):
    peak, used = _run_workers(tmp_path, socket_path=service)
    assert max(peak.values()) == 1 and set(peak) == {"gpu:0", "gpu:1"}
    assert sum(used.values()) > 50


def _raw(path, payload):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(payload)
    f = s.makefile("rb")
    return s, f


def test_malformed_requests_get_errors_and_service_keeps_serving(service):
    s, f = _raw(service, b"not json\n[1,2]\n{\"op\": \"fly\"}\n{\"op\": \"acquire\", \"memory\": -1}\n"
                         b"{\"op\": \"release\"}\n" + b"x" * 70000 + b"\n{\"op\": \"status\"}\n")
    replies = [json.loads(f.readline()) for _ in range(7)]
    assert [r["ok"] for r in replies] == [False] * 6 + [True]
    assert [r["code"] for r in replies[:6]] == ["bad-json", "bad-request", "unknown-op", "bad-request",
                                                 "bad-request", "request-too-long"]
    errors = " | ".join(r["error"] for r in replies[:6])
    for text in ("malformed JSON", "JSON object", "unknown op", "memory must be", "lease id", "longer than"):
        assert text in errors
    other = SchedulerClient(service)
    assert other.acquire() is not None
    other.close()
    s.close()


def test_disconnect_mid_lease_frees_it(service):
    a = SchedulerClient(service)
    got = [a.acquire(), a.acquire()]
    assert None not in got
    b = SchedulerClient(service)
    assert b.acquire() is None  # both GPUs leased
    a.close()
    deadline = time.time() + 5
    while b.status()["leases"] and time.time() < deadline:
        time.sleep(0.05)
    assert b.acquire() is not None
    b.close()


def test_blocking_acquire_waits_for_a_release(service):
    a, b = SchedulerClient(service), SchedulerClient(service)
    leases = [a.acquire(), a.acquire()]
    threading.Timer(0.3, a.release, args=(leases[0][1],)).start()
    t0 = time.time()
    got = b.acquire(block=True, timeout=5)
    assert got is not None and got[0] == leases[0][0] and time.time() - t0 >= 0.25
    assert b.acquire(block=True, timeout=0.2) is None
    a.close()
    b.close()


def test_status_command(service, capsys):
    from gpumr.cli import main
    c = SchedulerClient(service)
    c.acquire(memory=1 << 30)
    assert main(["scheduler", "status", "--socket", service]) == 0
    out = capsys.readouterr().out
    assert "policy round-robin" in out and "1/1 slot(s) leased" in out and "lease " in out
    c.close()


def _sched(policy, n=3, slots=4, seed=0):
    import random
    gpus = nvml.simulated_gpus(f"{n}:8GiB")
    return Scheduler(lambda: gpus, policy, slots, rng=random.Random(seed))


def test_round_robin_order():
    s = _sched("round-robin")
    order = []
    for _ in range(6):
        g, lease = s.acquire()
        order.append(g)
        s.release(lease)
    assert order == [0, 1, 2, 0, 1, 2]


def test_least_processes_picks_the_emptiest():
    s = _sched("least-processes")
    held = [s.acquire() for _ in range(3)]
    assert sorted(g for g, _ in held) == [0, 1, 2]
    s.release(held[1][1])
    assert s.acquire()[0] == held[1][0]


def test_random_spreads():
    s = _sched("random")
    counts = Counter()
    for _ in range(300):
        g, lease = s.acquire()
        counts[g] += 1
        s.release(lease)
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 60


def test_memory_requirements_and_blocking_timeout():
    s = _sched("least-processes", n=1, slots=4)
    g, big = s.acquire(memory=6 << 30)
    from gpumr.devices.protocol import RequestError
    with pytest.raises(RequestError, match="no GPU is free"):
        s.acquire(memory=4 << 30)
    t0 = time.time()
    with pytest.raises(RequestError, match="waited"):
        s.acquire(memory=4 << 30, block=True, timeout=0.3)
    assert time.time() - t0 >= 0.25
    assert s.acquire(memory=1 << 30)[0] == 0


def test_chooser_uses_service_when_socket_exists(service, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "2:4GiB")
    c = DeviceChooser("auto", lease_dir=str(tmp_path / "other"), scheduler=service)
    a, b = c.choose(), c.choose()
    assert {a.device, b.device} == {"gpu:0", "gpu:1"} and isinstance(a.lease, str)
    st = SchedulerClient(service).status()
    assert len(st["leases"]) == 2
    a.release()
    b.release()
    c.close()
    missing = DeviceChooser("auto", lease_dir=str(tmp_path / "other"), scheduler=str(tmp_path / "none.sock"))
    ch = missing.choose()
    assert ch.on_gpu and not isinstance(ch.lease, str)  # lock files
    ch.release()


def test_probe_command(monkeypatch, capsys):
    from gpumr.cli import main
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "2")
    assert main(["probe"]) == 0
    out = capsys.readouterr().out
    assert "simulated" in out and out.count("-> free") == 2
    monkeypatch.delenv("GPUMR_SIMULATE_GPUS")
    assert main(["probe", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["gpus"] == [] and facts["reason"]


def test_service_on_loopback_tcp(tmp_path):
    import socket as _socket
    s = _socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, **SIM)
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--tcp", str(port),
                             "--policy", "least-processes"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        c = SchedulerClient(tcp_port=port, timeout=5)
        assert c.acquire() is not None and c.status()["policy"] == "least-processes"
        c.close()
    finally:
        proc.terminate()
        proc.wait(10)
