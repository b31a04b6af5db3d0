"""Cost of a per-record device choice (choose + lease + release) against the per-record work.

Measured in one run: lock-file leases and the scheduler service over
simulated GPUs (the lease path; no NVIDIA software here), the no-GPU path,
and one core's face detection on a 640x480 sample frame (decode + detect).
For the service, also bare acquire/release lines on a socket read without
ancillary data (the slot's claim descriptor is dropped by the kernel): the
difference to the chooser's row is what the client side costs, the claim
(``recvmsg``, ``flock``, ``close``) included.

Usage: python bench/device_choice.py
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from _common import table

from gpumr.devices.chooser import DeviceChooser


def per_choice(chooser, n):
    for _ in range(50):
        chooser.choose().release()
    t0 = time.perf_counter()
    got = 0
    for _ in range(n):
        c = chooser.choose()
        got += c.on_gpu
        c.release()
    return (time.perf_counter() - t0) / n, got


def per_raw_request(path, n):
    """Acquire + release as bare protocol lines, replies read with recv (any claim descriptor dropped)."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rwb")

    def ask(obj):
        f.write(json.dumps(obj).encode() + b"\n")
        f.flush()
        return json.loads(f.readline())

    def once():
        got = ask(dict(op="acquire"))
        ask(dict(op="release", lease=got["lease"]))
        return got["ok"]

    for _ in range(50):
        once()
    t0 = time.perf_counter()
    got = sum(once() for _ in range(n))
    t = (time.perf_counter() - t0) / n
    f.close()
    s.close()
    return t, got


def face_work(n=20):
    import cv2
    import numpy as np

    from gpumr.faces.cpu import detect, load_cascade
    from gpumr.faces.sample import make_frames
    cv2.setNumThreads(1)
    with tempfile.TemporaryDirectory() as d:
        blobs = [np.fromfile(p, np.uint8) for p in make_frames(os.path.join(d, "frames"), count=8)]
    clf = load_cascade()
    t0 = time.perf_counter()
    for i in range(n):
        detect(clf, cv2.imdecode(blobs[i % len(blobs)], cv2.IMREAD_GRAYSCALE))
    return (time.perf_counter() - t0) / n


def main():
    work = face_work()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        os.environ["GPUMR_SIMULATE_GPUS"] = "2:16GiB"
        c = DeviceChooser("auto", lease_dir=os.path.join(d, "leases"), scheduler=False)
        t, got = per_choice(c, 5000)
        rows.append(["lock files, 2 simulated GPUs", t, got == 5000])
        for slots, label in ((1, "scheduler service (Unix socket)"),
                             (256, "  same, --slots-per-gpu 256 (the cap)")):
            sock, leases = os.path.join(d, f"s{slots}.sock"), os.path.join(d, f"l{slots}")
            # The service takes the slots' lock files in the folder the tasks share (one system).
            proc = subprocess.Popen([sys.executable, "-m", "gpumr", "scheduler", "serve", "--socket", sock,
                                     "--lease-dir", leases, "--slots-per-gpu", str(slots)],
                                    stdout=subprocess.PIPE, text=True, env=dict(os.environ))
            proc.stdout.readline()
            try:
                c = DeviceChooser("auto", lease_dir=leases, scheduler=sock, slots=slots)
                t, got = per_choice(c, 3000)
                rows.append([label, t, got == 3000])
                c.close()
                if slots == 1:
                    t, got = per_raw_request(sock, 3000)
                    rows.append(["  same, bare lines (no client, no claim)", t, got == 3000])
            finally:
                proc.terminate()
                proc.wait()
        del os.environ["GPUMR_SIMULATE_GPUS"]
        c = DeviceChooser("auto", lease_dir=os.path.join(d, "l3"), scheduler=False)
        t, _ = per_choice(c, 20000)
        rows.append([f"no GPU ({c.why_cpu_only[:40]})", t, True])
    table(f"device choice per record vs face detection per frame ({work * 1e3:.1f} ms, one core)",
          ["path", "us per choice", "x lock files", "% of the frame's work", "all choices got a GPU"],
          [[name, f"{t * 1e6:.1f}", f"{t / rows[0][1]:.2f}", f"{100 * t / work:.3f}%", ok] for name, t, ok in rows])


if __name__ == "__main__":
    main()
