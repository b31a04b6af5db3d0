"""Side files to a running Dask cluster: gpumr's chunked shipping against Dask's ``Client.upload_file``, same run.

A ``dask scheduler`` and ``dask worker`` processes of this machine (a
running cluster, as ``--scheduler`` reaches one). Each round ships the same
file both ways, in turn, under a name of that round (so that gpumr's side
ships it anew, as for a job's first use of it): the seconds, MB/s, and the
scheduler's resident memory after the round (``upload_file`` registers two
plugins that keep the file's bytes there). Then gpumr's ``find`` for a
second job of the same file, which ships nothing, and a worker that joins
afterwards fetching it from one that holds it.

Usage: python bench/side_files.py [--megabytes 125] [--workers 1] [--rounds 4]
"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _common import table

from gpumr.engines.dask import sidefiles as dask_ship
from gpumr.launch.ship import SideFile


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def dask(*args, cwd):
    """A ``dask`` command of this Python (``dask scheduler``, ``dask worker``), its own output silenced."""
    exe = os.path.join(os.path.dirname(sys.executable), "dask")
    return subprocess.Popen([exe, *args], cwd=cwd, env=dict(os.environ, DASK_DISTRIBUTED__LOGGING__DISTRIBUTED="error"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start(work, workers):
    """``(scheduler process, worker processes, its scheduler file)``."""
    file = os.path.join(work, "scheduler.json")
    sched = dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0", "--scheduler-file",
                 file, cwd=work)
    while not os.path.exists(file):
        time.sleep(0.1)
    return sched, [worker(work, file, f"w{i}") for i in range(workers)], file


def worker(work, file, name):
    return dask("worker", "--scheduler-file", file, "--nthreads", "1", "--no-dashboard", "--local-directory",
                os.path.join(work, name), cwd=work)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megabytes", type=float, default=125, help="the side file's size (a 256^3 CT job's "
                    "projections: 125 MB)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    from distributed import Client
    work = tempfile.mkdtemp(prefix="gpumr-side-")
    path = os.path.join(work, "proj.seq")
    with open(path, "wb") as f:
        f.write(os.urandom(int(args.megabytes * 1e6)))
    size, digest = os.path.getsize(path), hashlib.sha256(open(path, "rb").read()).hexdigest()[:24]
    sched, procs, file = start(work, args.workers)
    try:
        with Client(scheduler_file=file, timeout=60) as client:
            client.wait_for_workers(args.workers, timeout=120)
            times = {"upload_file": [], "gpumr": []}
            memory = {"upload_file": [], "gpumr": []}
            for r in range(args.rounds):
                copy = os.path.join(work, f"round{r}-proj.seq")  # (upload_file names the worker's copy by its name)
                shutil.copyfile(path, copy)
                before, t0 = rss_mb(sched.pid), time.perf_counter()
                client.upload_file(copy, load=False)
                times["upload_file"].append(time.perf_counter() - t0)
                memory["upload_file"].append(rss_mb(sched.pid) - before)
                side = SideFile("--projections", path, f"{digest}-round{r}.seq", size)
                before, t0 = rss_mb(sched.pid), time.perf_counter()
                find = dask_ship.ship(client, [side], 60)
                times["gpumr"].append(time.perf_counter() - t0)
                memory["gpumr"].append(rss_mb(sched.pid) - before)
                print(f"round {r + 1}: upload_file {times['upload_file'][-1]:.2f} s, gpumr {times['gpumr'][-1]:.2f} s",
                      file=sys.stderr)
            t0 = time.perf_counter()
            dask_ship.ship(client, [side], 60)
            again = time.perf_counter() - t0
            procs.append(worker(work, file, "late"))
            client.wait_for_workers(args.workers + 1, timeout=120)
            late = [w for w in client.scheduler_info()["workers"] if w not in find.args[0][side.name][1]]
            t0 = time.perf_counter()
            client.submit(find, side.name, workers=late, pure=False).result()
            fetched = time.perf_counter() - t0
        mb = size / 1e6
        rows = []
        for how in ("upload_file", "gpumr"):
            t = statistics.median(times[how])
            rows.append([f"{how} ({'Dask' if how == 'upload_file' else 'chunks of %d MiB' % (dask_ship.CHUNK >> 20)})",
                         f"{t:.2f}", f"{mb / t:.0f}", f"{statistics.median(times['upload_file']) / t:.2f}",
                         f"{sum(memory[how]):+d} MB"])
        rows.append(["gpumr, a second job of the same file (nothing sent)", f"{again:.3f}", "-", "-", "-"])
        rows.append(["gpumr, a worker that joins later fetches it from a peer", f"{fetched:.2f}", f"{mb / fetched:.0f}",
                     "-", "-"])
        table(f"a {mb:.0f} MB side file to a running cluster of {args.workers} worker(s), medians of {args.rounds} "
              "rounds (ratio: upload_file's seconds over these; memory: the scheduler's growth over the rounds' calls)",
              ["how", "s", "MB/s", "ratio", "scheduler memory"], rows)
    finally:
        for p in [*procs, sched]:
            p.terminate()
        for p in [*procs, sched]:
            p.wait(60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
