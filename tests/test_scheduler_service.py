"""The scheduler service on a busy or hostile node, with real processes and sockets (issue 11, items 4, 12-16)."""

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import said_lines

from gpumr.devices.chooser import DeviceChooser
from gpumr.devices.client import SchedulerClient, SchedulerUnavailable

GPUMR = [sys.executable, "-m", "gpumr"]


def serve(tmp_path, *extra, gpus="2:4GiB", name="s.sock", **popen):
    """Start `gpumr scheduler serve` on a socket in ``tmp_path``; return (process, socket path, banner)."""
    path = str(tmp_path / name)
    env = dict(os.environ, GPUMR_SIMULATE_GPUS=gpus)
    proc = subprocess.Popen(GPUMR + ["scheduler", "serve", "--socket", path, "--lease-dir", str(tmp_path / "leases"),
                                     *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)
    banner = proc.stdout.readline()
    return proc, path, banner


@pytest.fixture
def started():
    """Ends every service a test started (SIGCONT first, in case the test stopped it)."""
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
        p.wait(10)
        p.stdout.close()
        p.stderr.close()


def raw(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    return s, s.makefile("rb")


def ask(sock, f, obj):
    sock.sendall((obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n")
    return json.loads(f.readline())


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- item 4: never delete what is not a stale socket ---------------------------------------------

def test_serve_refuses_a_regular_file_and_keeps_it(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my thesis notes\n")
    r = subprocess.run(GPUMR + ["scheduler", "serve", "--socket", "notes.txt", "--lease-dir", "leases"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GPUMR_SIMULATE_GPUS="1"))
    assert r.returncode != 0
    assert notes.read_text() == "my thesis notes\n"
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "notes.txt" in err and "not a socket" in err and "Traceback" not in err


def test_serve_replaces_a_stale_socket_but_not_a_live_one(tmp_path, started):
    path = str(tmp_path / "s.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()  # a socket file nobody serves on, as a killed service leaves it
    proc, path, banner = serve(tmp_path)
    started.append(proc)
    assert "serving on" in banner
    c = SchedulerClient(path)
    assert c.status()["ok"]
    second = subprocess.run(GPUMR + ["scheduler", "serve", "--socket", path], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, GPUMR_SIMULATE_GPUS="1"))
    assert second.returncode != 0 and "already serving" in second.stderr
    assert c.status()["ok"]  # the live service and its socket are untouched
    c.close()


# -- item 12: backlog, idle timeout, connection cap, no busy loop --------------------------------

def test_idle_connections_are_closed_but_lease_holders_are_not(tmp_path, started):
    proc, path, _ = serve(tmp_path, "--idle-timeout", "0.5")
    started.append(proc)
    idle, idle_f = raw(path)
    holder, holder_f = raw(path)
    assert ask(holder, holder_f, dict(op="acquire"))["ok"]
    time.sleep(1.6)
    notice = json.loads(idle_f.readline())
    assert notice["ok"] is False and notice["code"] == "idle-timeout"
    assert idle_f.readline() == b""  # then closed
    assert ask(holder, holder_f, dict(op="status"))["ok"]  # a lease holder is never dropped for idling
    # The client library opens a connection the service closed for idling again by itself.
    c = SchedulerClient(path)
    time.sleep(1.6)
    assert c.status()["ok"] and c.acquire() is not None
    c.close()


def test_a_client_that_never_reads_is_bounded_and_dropped(tmp_path, started):
    proc, path, _ = serve(tmp_path, "--idle-timeout", "1")
    started.append(proc)
    stuck, stuck_f = raw(path)
    assert ask(stuck, stuck_f, dict(op="acquire"))["ok"]  # holding a lease does not protect a stuck reader
    stuck.settimeout(0.5)
    sent = 0
    try:
        while sent < 50 << 20:
            sent += stuck.send(b'{"op": "status"}\n' * 4096)
    except (socket.timeout, BlockingIOError):
        pass  # the service stopped reading from it
    assert sent < 8 << 20
    c = SchedulerClient(path, timeout=5)
    assert c.status()["ok"]  # others are served meanwhile
    rss = int(next(x for x in open(f"/proc/{proc.pid}/status") if x.startswith("VmRSS:")).split()[1])
    assert rss < 200_000  # kB: replies to the stuck client are not piling up
    time.sleep(3)
    stuck.settimeout(10)
    try:
        while stuck.recv(1 << 20):
            pass  # what was sent, then the end: the service closed it
    except ConnectionResetError:
        pass  # (closed with our requests unread)
    assert c.acquire() is not None and c.acquire() is not None  # its lease ended with it
    c.close()


def test_connection_cap_replies_then_closes(tmp_path, started):
    proc, path, banner = serve(tmp_path, "--max-connections", "3")
    started.append(proc)
    assert "at most 3 connections" in banner
    held = [raw(path) for _ in range(3)]
    for s, f in held:
        assert ask(s, f, dict(op="status"))["ok"]
    s, f = raw(path)
    reply = json.loads(f.readline())
    assert reply["ok"] is False and reply["code"] == "too-many-connections" and "3" in reply["error"]
    assert f.readline() == b""
    s.close()
    held.pop()[0].close()
    time.sleep(0.2)
    s, f = raw(path)
    assert ask(s, f, dict(op="status"))["ok"]


def test_waiting_and_idle_clients_cost_no_cpu(tmp_path, started):
    proc, path, _ = serve(tmp_path, gpus="1")
    started.append(proc)
    conns = [raw(path) for _ in range(100)]
    holder, hf = conns[0]
    assert ask(holder, hf, dict(op="acquire"))["ok"]
    for s, _ in conns[1:20]:  # 19 blocking acquires queue as waiters
        s.sendall(b'{"op": "acquire", "block": true, "timeout": 30}\n')
    time.sleep(0.3)
    before = cpu_seconds(proc.pid)
    time.sleep(2)
    assert cpu_seconds(proc.pid) - before < 0.4  # polls 4 times a second, never spins
    hf_reply = ask(holder, hf, dict(op="status"))
    assert len(hf_reply["leases"]) == 1
    hf.close()
    holder.close()  # its lease ends: the first waiter gets the GPU
    s, f = conns[1]
    assert json.loads(f.readline())["ok"]


SPIN_SCRIPT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
    from gpumr.devices import nvml
    from gpumr.devices.service import Scheduler, make_server
    gpus = nvml.simulated_gpus("1")
    server = make_server(Scheduler(lambda: gpus), sys.argv[1], max_connections=10000, idle_timeout=60)
    print("ready", flush=True)
    server.serve_forever()
""")


def test_out_of_file_descriptors_refuses_with_a_reply_and_does_not_spin(tmp_path):
    """With a cap above the fd limit, clients past the limit get a reply, not a spinning service."""
    path = str(tmp_path / "s.sock")
    proc = subprocess.Popen([sys.executable, "-c", SPIN_SCRIPT, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        conns, refused = [], 0
        for _ in range(70):
            s, f = raw(path)
            conns.append((s, f))
        time.sleep(0.5)
        for s, f in conns:
            try:
                s.sendall(b'{"op": "status"}\n')
            except BrokenPipeError:
                pass  # refused: its reply is already waiting to be read
        for s, f in conns:
            reply = json.loads(f.readline())
            if not reply["ok"]:
                assert reply["code"] == "too-many-connections" and "file descriptors" in reply["error"]
                refused += 1
        assert 0 < refused < 70
        before = cpu_seconds(proc.pid)
        time.sleep(1.5)
        assert cpu_seconds(proc.pid) - before < 0.4
        for s, f in conns:
            f.close()
            s.close()
        time.sleep(0.3)
        s, f = raw(path)
        assert ask(s, f, dict(op="status"))["ok"]  # served again once descriptors are free
        s.close()
    finally:
        proc.kill()
        proc.wait(10)


# -- item 13: checked requests ---------------------------------------------------------------------

def test_bad_numbers_types_and_lines_get_coded_errors(tmp_path, started):
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    s, f = raw(path)
    bad = [
        (b'{"op": "acquire", "block": true, "timeout": NaN}', "bad-request", "timeout"),
        (b'{"op": "acquire", "block": true, "timeout": Infinity}', "bad-request", "timeout"),
        (b'{"op": "acquire", "block": true, "timeout": 1e400}', "bad-request", "timeout"),
        (b'{"op": "acquire", "block": true, "timeout": ' + b"9" * 400 + b"}", "bad-request", "timeout"),
        (b'{"op": "acquire", "timeout": -1}', "bad-request", "timeout"),
        (b'{"op": "acquire", "timeout": "5"}', "bad-request", "timeout"),
        (b'{"op": "acquire", "memory": 1.5}', "bad-request", "memory"),
        (b'{"op": "acquire", "memory": ' + str(1 << 60).encode() + b"}", "bad-request", "memory"),
        (b'{"op": "acquire", "memory": true}', "bad-request", "memory"),
        (b'{"op": "acquire", "block": "yes"}', "bad-request", "block"),
        (b'{"op": 5}', "unknown-op", "unknown op"),
        (b'{"op": "release", "lease": 123}', "bad-request", "lease"),
        (b'{"op": "release", "lease": "nope"}', "unknown-lease", "unknown lease"),
        (b"[" * 60000, "bad-json", "malformed JSON"),
        (b'{"op": "acquire", "timeout": ' + b"1" * 5000 + b"}", "bad-json", "malformed JSON"),
        (b"\xff\xfe", "bad-json", "malformed JSON"),
        (b"x" * 200000, "request-too-long", "longer than"),
    ]
    for line, code, text in bad:
        reply = ask(s, f, line)
        assert reply["ok"] is False and reply["code"] == code and text in reply["error"], (line[:60], reply)
    before = cpu_seconds(proc.pid)
    time.sleep(1)
    assert cpu_seconds(proc.pid) - before < 0.3  # the NaN request left no spinning waiter
    assert ask(s, f, dict(op="status"))["leases"] == []
    assert ask(s, f, dict(op="acquire", memory=1 << 30, block=True, timeout=0.5))["ok"]


# -- item 14: lock-file leases and service leases are one system ----------------------------------

def _hold_lock_file(lease_dir, ready, release):
    os.environ["GPUMR_SIMULATE_GPUS"] = "1"
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=False)
    ch = c.choose()
    ready.set() if ch.on_gpu else None
    release.wait(60)
    ch.release()


def test_service_honours_a_task_holding_the_lock_file_and_takes_it_itself(tmp_path, started, monkeypatch):
    proc, path, _ = serve(tmp_path, gpus="1")
    started.append(proc)
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    task = ctx.Process(target=_hold_lock_file, args=(str(tmp_path / "leases"), ready, release))
    task.start()
    try:
        assert ready.wait(30)  # a task that fell back to lock files holds gpu:0's only slot
        c = SchedulerClient(path)
        assert c.acquire() is None
        st = c.status()
        assert st["gpus"][0]["lock_file_leases"] == 1 and st["leases"] == []
        t0 = time.monotonic()
        release.set()  # the service learns of it by polling the lock file: the waiter gets it
        got = c.acquire(block=True, timeout=10)
        assert got is not None and time.monotonic() - t0 < 3
    finally:
        release.set()
        task.join(30)
    # Now the service holds the slot's lock file: a lock-file task does not get the slot.
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    fallback = DeviceChooser("auto", lease_dir=str(tmp_path / "leases"), scheduler=False)
    assert not fallback.choose().on_gpu
    c.release(got[1])
    ch = fallback.choose()
    assert ch.on_gpu
    ch.release()
    c.close()


def test_a_task_given_its_gpus_takes_them_by_lock_file_and_the_service_honours_that(tmp_path, started, monkeypatch):
    """Spark gave the task gpu:1. The service, which does not know that, picked gpu:0 (least processes, lowest
    index) every time, the task gave it back, and its records all ran on the CPU while gpu:1 stood free."""
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "2:4GiB")
    task = DeviceChooser("auto", lease_dir=str(tmp_path / "leases"), scheduler=path, only=[1])
    got = [task.choose() for _ in range(2)]
    assert [ch.device for ch in got] == ["gpu:1", "cpu"]  # its one GPU, one slot
    c = SchedulerClient(path)
    st = c.status()
    assert [g["lock_file_leases"] for g in st["gpus"]] == [0, 1] and st["leases"] == []
    assert c.acquire()[0] == 0 and c.acquire() is None  # the service never grants the task's slot
    got[0].release()
    assert c.acquire()[0] == 1
    c.close()
    task.close()


def test_lease_folder_failure_is_a_coded_reply_not_a_crash(tmp_path, started):
    import shutil
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    s, f = raw(path)
    shutil.rmtree(tmp_path / "leases")  # someone removed it under the service
    reply = ask(s, f, dict(op="acquire"))
    assert reply["code"] == "server-error" and "lease folder" in reply["error"]
    assert proc.poll() is None
    (tmp_path / "leases").mkdir(mode=0o700)
    assert ask(s, f, dict(op="acquire"))["ok"]


# -- item 15: a stopped service never hangs a task ------------------------------------------------

def test_stopped_service_sends_the_record_to_the_cpu_and_says_so_once(tmp_path, started, monkeypatch):
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "2:4GiB")
    monkeypatch.setenv("GPUMR_SCHEDULER_TIMEOUT", "1")
    c = DeviceChooser("auto", lease_dir=str(tmp_path / "leases"), scheduler=path)
    with said_lines() as log:
        first = c.choose()
        assert first.on_gpu and isinstance(first.lease, str)
        first.release()
        os.kill(proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        assert not c.choose().on_gpu  # timed out: this record on the CPU
        assert 0.9 < time.monotonic() - t0 < 5
        assert len(log) == 1 and path in log[0] and "no answer within 1 s" in log[0] and "CPU" in log[0]
        t0 = time.monotonic()
        later = [c.choose() for _ in range(5)]  # backoff: lock files, the service is not asked
        assert time.monotonic() - t0 < 0.5 and all(ch.on_gpu and not isinstance(ch.lease, str) for ch in later[:2])
        for ch in later:
            ch.release()
        assert len(log) == 1
    c.close()


def test_client_errors_name_the_socket(tmp_path):
    missing = str(tmp_path / "none.sock")
    with pytest.raises(SchedulerUnavailable, match=f"scheduler at {missing}: cannot connect"):
        SchedulerClient(missing, timeout=1)
    r = subprocess.run(GPUMR + ["scheduler", "status", "--socket", missing], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and missing in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- item 16 ---------------------------------------------------------------------------------------

def test_sigterm_removes_the_socket_file(tmp_path, started):
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    c = SchedulerClient(path)
    assert c.acquire() is not None
    proc.terminate()
    assert proc.wait(10) == 0
    assert not os.path.exists(path)
    c.close()


def test_tcp_zero_prints_the_port_bound(tmp_path):
    env = dict(os.environ, GPUMR_SIMULATE_GPUS="1")
    proc = subprocess.Popen(GPUMR + ["scheduler", "serve", "--tcp", "0", "--lease-dir", str(tmp_path / "l")],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        port = int(banner.split("127.0.0.1:")[1].split()[0])
        assert port > 0
        c = SchedulerClient(tcp_port=port, timeout=5)
        assert c.acquire() is not None and c.status()["ok"]
        c.close()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def test_no_gpu_and_no_gpu_free_are_told_apart_by_code(tmp_path, started):
    proc, path, banner = serve(tmp_path, gpus="0", name="none.sock")
    started.append(proc)
    assert "0 GPU(s)" in banner
    s, f = raw(path)
    reply = ask(s, f, dict(op="acquire", block=True, timeout=5))
    assert reply == dict(ok=False, error="this node has no GPU", code="no-gpu")
    proc2, path2, _ = serve(tmp_path, gpus="1", name="one.sock")
    started.append(proc2)
    s2, f2 = raw(path2)
    assert ask(s2, f2, dict(op="acquire"))["ok"]
    busy = ask(s2, f2, dict(op="acquire"))
    assert busy["code"] == "no-gpu-free" and busy["error"] == "no GPU is free"
    waited = ask(s2, f2, dict(op="acquire", block=True, timeout=0.3))
    assert waited["code"] == "no-gpu-free" and "waited 0.3 s" in waited["error"]
    assert SchedulerClient(path).acquire() is None  # the client decides by code


def test_simulated_gpu_count_is_capped():
    t0 = time.monotonic()
    r = subprocess.run(GPUMR + ["probe"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GPUMR_SIMULATE_GPUS="100000"))
    assert r.returncode != 0 and time.monotonic() - t0 < 30
    assert "GPUMR_SIMULATE_GPUS" in r.stderr and "64" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- issue 19, class 3: leases survive the service; its numbers are bounded ------------------------

def _task_through_a_restart(lease_dir, socket_path, events, go):
    """A task: a lease from the service, held while the test kills and restarts the service, then released."""
    os.environ["GPUMR_SIMULATE_GPUS"] = "1"
    said_lines(lambda line: events.put(("log", line))).__enter__()  # (for this process's life: it ends with the test)
    c = DeviceChooser("auto", lease_dir=lease_dir, scheduler=socket_path)
    ch = c.choose()
    events.put(("first", ch.device, isinstance(ch.lease, str)))
    go.wait(60)
    ch.release()  # the service that granted it is dead: no error, and the slot is let go
    events.put(("released",))
    again = c.choose()  # the chooser reaches the restarted service
    events.put(("again", again.device, isinstance(again.lease, str)))
    again.release()
    c.close()


def test_a_task_keeps_its_slot_through_a_killed_and_restarted_service(tmp_path, started, monkeypatch):
    proc, path, _ = serve(tmp_path, gpus="1")
    started.append(proc)
    leases = str(tmp_path / "leases")
    ctx = mp.get_context("spawn")
    events, go = ctx.Queue(), ctx.Event()
    task = ctx.Process(target=_task_through_a_restart, args=(leases, path, events, go))
    task.start()
    try:
        assert events.get(timeout=30) == ("first", "gpu:0", True)  # a service lease on the only slot
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
        fallback = DeviceChooser("auto", lease_dir=leases, scheduler=False)
        assert not fallback.choose().on_gpu  # the task still holds the slot: lock files see it
        again, path, banner = serve(tmp_path, gpus="1")  # on the stale socket the dead one left
        started.append(again)
        assert "serving on" in banner
        c = SchedulerClient(path)
        st = c.status()
        assert st["gpus"][0]["lock_file_leases"] == 1 and st["leases"] == []  # the new service sees it held
        assert c.acquire() is None
        go.set()
        assert events.get(timeout=30) == ("released",)
        assert events.get(timeout=30) == ("again", "gpu:0", True)
        task.join(30)
        assert task.exitcode == 0
        got = c.acquire()  # the task let go of everything
        assert got is not None
        c.release(got[1])
        ch = fallback.choose()
        assert ch.on_gpu
        ch.release()
        c.close()
    finally:
        go.set()
        task.join(30)


def test_the_holder_claim_outlives_a_clean_service_stop(tmp_path, started):
    """SIGTERM ends the service's leases, not the slot a client still holds: the client's claim keeps it."""
    proc, path, _ = serve(tmp_path, gpus="1")
    started.append(proc)
    holder = SchedulerClient(path)
    gpu, lease = holder.acquire()
    proc.terminate()
    assert proc.wait(10) == 0
    again, path, _ = serve(tmp_path, gpus="1")
    started.append(again)
    other = SchedulerClient(path)
    assert other.acquire() is None and other.status()["gpus"][0]["lock_file_leases"] == 1
    holder.release(lease)  # its connection is gone: nothing to ask, the claim is let go
    assert other.acquire() is not None
    other.close()
    holder.close()


def test_status_creates_no_lock_files(tmp_path, started):
    proc, path, banner = serve(tmp_path, "--slots-per-gpu", "256", gpus="64")
    started.append(proc)
    assert "256 slot(s) each" in banner
    c = SchedulerClient(path)
    st = c.status()
    assert os.listdir(tmp_path / "leases") == []  # 16384 slots looked at, no file made
    assert len(st["gpus"]) == 64 and st["pid"] == proc.pid
    assert c.acquire() is not None
    assert len(os.listdir(tmp_path / "leases")) == 1  # a grant makes its slot's file, one
    c.close()


@pytest.mark.parametrize("cmd, option", [
    (["scheduler", "serve", "--socket", "s.sock", "--slots-per-gpu", "100000000"], "--slots-per-gpu 100000000"),
    (["scheduler", "serve", "--socket", "s.sock", "--slots-per-gpu", "0"], "--slots-per-gpu 0"),
    (["probe", "--gpu-slots", "257"], "--gpu-slots 257"),
    (["-m", "gpumr.jobs.face_detect", "-r", "inline", "--no-conf", "in.seq", "--gpu-slots", "100000000"],
     "--gpu-slots 100000000"),
])
def test_slot_counts_are_capped_with_one_line(tmp_path, cmd, option):
    args = cmd if cmd[0] == "-m" else GPUMR[1:] + cmd
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GPUMR_SIMULATE_GPUS="1"))
    err = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{option.split()[0]} must be a whole number from 1 to 256, not {option.split()[1]}" in err[0]
    assert time.monotonic() - t0 < 30 and os.listdir(tmp_path) == []  # refused before anything was made


def test_expect_pid_checks_who_serves_by_peer_credentials(tmp_path, started):
    proc, path, _ = serve(tmp_path)
    started.append(proc)
    ok = subprocess.run(GPUMR + ["scheduler", "status", "--socket", path, "--expect-pid", str(proc.pid)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and f"pid {proc.pid}" in ok.stdout
    wrong = subprocess.run(GPUMR + ["scheduler", "status", "--socket", path, "--expect-pid", "1"],
                           capture_output=True, text=True, timeout=60)
    err = wrong.stderr.strip().splitlines()
    assert wrong.returncode != 0 and err == [f"gpumr: error: scheduler at {path}: served by pid {proc.pid} "
                                             f"(uid {os.getuid()}), not by pid 1"]


def test_pid_file_replaces_a_planted_link_and_goes_with_the_service(tmp_path, started):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    pid_file = tmp_path / "scheduler.pid"
    pid_file.symlink_to(victim)
    proc, path, _ = serve(tmp_path, "--pid-file", str(pid_file))
    started.append(proc)
    assert victim.read_text() == "precious\n"  # not written through
    assert not pid_file.is_symlink() and pid_file.read_text() == f"{proc.pid}\n"
    proc.terminate()
    assert proc.wait(10) == 0 and not pid_file.exists() and victim.exists()


def test_claims_come_in_reply_order_with_their_slots_lock(tmp_path, started):
    """Pipelined acquires: each grant's descriptor is the lock file of the slot it granted, locked."""
    import array
    import fcntl
    proc, path, _ = serve(tmp_path, "--policy", "round-robin", gpus="3")
    started.append(proc)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b'{"op": "acquire"}\n' * 3 + b'{"op": "status"}\n')
    data, fds = b"", []
    while data.count(b"\n") < 4:
        chunk, ancillary, flags, _ = s.recvmsg(65536, socket.CMSG_SPACE(64 * 4))
        assert chunk and not flags & socket.MSG_CTRUNC
        data += chunk
        for _, _, payload in ancillary:
            fds += array.array("i", payload)
    replies = [json.loads(line) for line in data.splitlines()]
    grants = replies[:3]
    assert [g["gpu"] for g in grants] == [0, 1, 2] and all(g["claim"] for g in grants) and len(fds) == 3
    slot_files = {g["index"]: f"gpu-{g['uuid']}-slot-0.lock" for g in replies[3]["gpus"]}
    for grant, fd in zip(grants, fds):
        st = os.fstat(fd)
        lock_file = os.stat(tmp_path / "leases" / slot_files[grant["gpu"]])
        assert (st.st_dev, st.st_ino) == (lock_file.st_dev, lock_file.st_ino)
        other = os.open(tmp_path / "leases" / slot_files[grant["gpu"]], os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held
        os.close(other)
    s.close()
    for fd in fds:
        os.close(fd)
