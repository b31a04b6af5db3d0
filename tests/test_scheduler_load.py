"""The scheduler service under load: many clients at once, many idle ones, lock files beside it (issue 11)."""

import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from gpumr.devices.chooser import DeviceChooser
from gpumr.devices.client import SchedulerClient

pytestmark = pytest.mark.slow


@pytest.fixture
def service(tmp_path):
    """`gpumr scheduler serve` over 2 simulated GPUs, 1 slot each; yields (socket path, process)."""
    path = str(tmp_path / "s.sock")
    env = dict(os.environ, GPUMR_SIMULATE_GPUS="2:4GiB")
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--socket", path,
                             "--lease-dir", str(tmp_path / "leases")], env=env, stdout=subprocess.PIPE, text=True)
    assert "serving on" in proc.stdout.readline()
    yield path, proc
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def test_300_simultaneous_clients_are_all_served(service):
    path, _ = service
    n = 300
    start = threading.Barrier(n)
    results = [None] * n

    def client(i):
        start.wait()
        try:
            c = SchedulerClient(path, timeout=10)  # the timeout tasks use
            got = c.acquire()
            c.status()
            if got is not None:
                c.release(got[1])
            c.close()
            results[i] = "gpu" if got else "cpu"
        except Exception as exc:  # noqa: BLE001 - each failure is reported below
            results[i] = f"{type(exc).__name__}: {exc}"

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    failures = [r for r in results if r not in ("gpu", "cpu")]
    assert failures == [], f"{len(failures)} of {n} clients failed, e.g. {failures[:3]}"
    assert Counter(results)["gpu"] >= 2 and time.monotonic() - t0 < 30


def _more_files(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"needs {n} open files; the hard limit here is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def test_1000_idle_connections_do_not_stop_a_new_client(service):
    path, proc = service
    _more_files(1200)
    idle = []
    try:
        for _ in range(1000):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(path)
            idle.append(s)
        time.sleep(0.5)
        t0 = time.monotonic()
        c = SchedulerClient(path, timeout=10)
        got = c.acquire()
        st = c.status()
        assert got is not None and st["ok"] and time.monotonic() - t0 < 2
        c.close()
        cpu = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        before = (int(cpu[11]) + int(cpu[12])) / os.sysconf("SC_CLK_TCK")
        time.sleep(1)
        cpu = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        assert (int(cpu[11]) + int(cpu[12])) / os.sysconf("SC_CLK_TCK") - before < 0.3  # 1000 idle: no spinning
    finally:
        for s in idle:
            s.close()


def _worker(lease_dir, socket_path, log, rounds):
    """Choose a device ``rounds`` times, writing + / - around each GPU use (the tracker's input)."""
    os.environ["GPUMR_SIMULATE_GPUS"] = "2:4GiB"
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=socket_path or False)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    kind = "service" if socket_path else "lockfile"
    for _ in range(rounds):
        ch = c.choose()
        if ch.on_gpu:
            assert isinstance(ch.lease, str) == (kind == "service")
            os.write(fd, f"+ {ch.device} {kind}\n".encode())
            time.sleep(0.002)
            os.write(fd, f"- {ch.device} {kind}\n".encode())
        ch.release()
        time.sleep(0.003)  # a record's CPU-side work: slots are free now and then for either kind
    os.close(fd)
    c.close()


def tracked(log):
    """From the + / - lines of every task: the most holders each GPU had at once, and GPU uses of each kind."""
    live, peak, used = Counter(), Counter(), Counter()
    for line in open(log).read().splitlines():
        sign, dev, kind = line.split()
        live[dev] += 1 if sign == "+" else -1
        peak[dev] = max(peak[dev], live[dev])
        used[kind] += sign == "+"
    return peak, used


def test_no_slot_is_ever_held_twice_by_lock_files_and_service_together(tmp_path, service):
    path, _ = service
    log = str(tmp_path / "events.log")
    open(log, "w").close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "leases"), path if i % 2 else None, log, 150))
             for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    peak, used = tracked(log)
    assert set(peak) == {"gpu:0", "gpu:1"} and max(peak.values()) == 1  # never two holders of one slot
    assert used["service"] > 10 and used["lockfile"] > 10, used  # both kinds really competed


def _task(wid, lease_dir, socket_path, log, out, stop, hold):
    """A map task: records until told to stop, each on the device chosen for it; + / - around GPU use."""
    os.environ["GPUMR_SIMULATE_GPUS"] = "2:4GiB"
    os.environ["GPUMR_SCHEDULER_TIMEOUT"] = "2"
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=socket_path or False)
    fd, results = os.open(log, os.O_WRONLY | os.O_APPEND), os.open(out, os.O_WRONLY | os.O_APPEND)
    i = 0
    while not stop.is_set() or i < 20:
        ch = c.choose()
        if ch.on_gpu:
            kind = "service" if isinstance(ch.lease, str) else "lockfile"
            os.write(fd, f"+ {ch.device} {kind}\n".encode())
            time.sleep(hold)
            os.write(fd, f"- {ch.device} {kind}\n".encode())
        ch.release()
        os.write(results, f"{wid} {i} {i * i}\n".encode())  # the record's output
        i += 1
        time.sleep(0.01)  # a record's CPU-side work: slots are free now and then for either kind
    os.close(fd)
    os.close(results)
    c.close()


def _start(path, lease_dir):
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--socket", path,
                             "--lease-dir", lease_dir], env=dict(os.environ, GPUMR_SIMULATE_GPUS="2:4GiB"),
                            stdout=subprocess.PIPE, text=True)
    assert "serving on" in proc.stdout.readline()
    return proc


def test_no_slot_is_held_twice_while_the_service_is_killed_and_restarted(tmp_path):
    """Tasks on the service and on lock files while the service is SIGKILLed under a lease and restarted, twice."""
    path, leases = str(tmp_path / "s.sock"), str(tmp_path / "leases")
    log, out = str(tmp_path / "events.log"), str(tmp_path / "records.txt")
    open(log, "w").close()
    open(out, "w").close()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    proc = _start(path, leases)
    tasks = [ctx.Process(target=_task, args=(w, leases, path if w % 2 else None, log, out, stop, 0.01))
             for w in range(6)]
    for t in tasks:
        t.start()
    kills = 0
    try:
        for _ in range(2):
            before = open(log).read().count(" service\n") // 2  # service leases used so far
            probe = SchedulerClient(path, timeout=10)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until tasks use this service, and one holds a lease now
                events = open(log).read()
                if events.count(" service\n") // 2 >= before + 10 and probe.status()["leases"]:
                    break
                time.sleep(0.005)
            probe.close()
            proc.kill()
            proc.wait(10)
            proc.stdout.close()
            kills += 1
            time.sleep(0.5)  # the lock-file tasks compete for the slots the dead service held
            proc = _start(path, leases)
    finally:
        stop.set()
        for t in tasks:
            t.join(120)
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
    assert kills == 2 and [t.exitcode for t in tasks] == [0] * 6  # no task crashed on a release
    peak, used = tracked(log)
    assert set(peak) == {"gpu:0", "gpu:1"} and max(peak.values()) == 1, peak  # never two holders of one slot
    assert used["service"] > 20 and used["lockfile"] > 20, used
    records = Counter()
    for line in open(out).read().splitlines():
        wid, i, value = map(int, line.split())
        assert value == i * i
        records[wid, i] += 1
    per_task = Counter(wid for wid, _ in records)
    assert sorted(per_task) == list(range(6)) and set(records.values()) == {1}
    assert all(records[w, n - 1] for w, n in per_task.items())  # every task's records 0..n-1, each exactly once
