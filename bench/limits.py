"""Peak memory and time of the cases gpumr.limits bounds, against same-run baselines.

Every case runs in a child process of its own; its peak RSS is the child's
``ru_maxrss`` (``os.wait4``), its time the child's wall time, start-up
included. Rows marked "OpenCV alone" call OpenCV directly, without gpumr's
checks: what a record cost before the limits (or would cost without them).

* Face pyramid: one frame (``--frame``, default 640x480, a sample frame
  resized) through ``detectMultiScale`` at several scale factors; baseline
  the default 1.1. gpumr refuses 1.0001 before any task, and 1.004 with
  ``--max-pixels 400000`` as that record's error line.
* JPEG scans: a progressive JPEG of noise (``--jpeg``, default 2000x1500)
  followed by ``--scans`` extra scans of a few bytes each; baseline the same
  image without them. gpumr counts the scans from the bytes and refuses it
  unread.
* Contact sheet: ``gpumr faces render`` of 13 frames (``--sheet``, default
  4000x3000) at ``--sheet-frames 12``; baseline ``--sheet-frames 1``. The
  sheet's frames are kept as 320x240 tiles, so the peak is one frame's.
* CT: ``gpumr ct reconstruct`` with a geometry asking for 1e9 angles or 1e9 slices
  (refused) against a valid one; and the launcher's check of every
  projection (NaN/Inf, sizes) against loading and filtering them as a task
  does (``--voxels``, ``--angles``).

Usage: python bench/limits.py [--frame 640x480] [--jpeg 2000x1500] [--scans 5000] [--sheet 4000x3000]
                              [--voxels 64] [--angles 90] [--unbounded]
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from _common import REPO, table

PY = sys.executable


def child(args, cwd, limit_gib=None):
    """Run ``python args...``: (seconds, peak RSS in MB, exit status, last stderr line)."""
    def limited():
        if limit_gib:
            resource.setrlimit(resource.RLIMIT_AS, (limit_gib << 30, limit_gib << 30))
    t0 = time.perf_counter()
    p = subprocess.Popen([PY, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=limited)
    err = p.stderr.read().decode(errors="replace").strip().splitlines()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, p.returncode, (err[-1] if err else "")


def rows_of(results, base):
    out = []
    for name, (sec, mb, rc, last) in results:
        out.append([name, f"{mb:.0f}", f"{mb / base[1]:.2f}", f"{sec:.2f}", f"{sec / base[0]:.2f}", rc,
                    last[:90]])
    return out


HEADER = ["case", "peak MB", "x base", "seconds", "x base", "exit", "last line"]


def faces(work, size, slowest=False):
    w, h = size
    code = ("import sys, cv2, numpy as np; from gpumr.faces.sample import make_frames; "
            f"f = make_frames('{work}/f', count=1)[0]; "
            f"g = cv2.resize(cv2.imread(f, cv2.IMREAD_GRAYSCALE), ({w}, {h})); cv2.imwrite('{work}/frame.jpg', g)")
    subprocess.run([PY, "-c", code], check=True)
    import seqfile
    with seqfile.Writer(os.path.join(work, "frame.seq")) as wr:
        wr.append("frame.jpg", open(os.path.join(work, "frame.jpg"), "rb").read())
    direct = ("import sys, cv2; g = cv2.imread('frame.jpg', cv2.IMREAD_GRAYSCALE); "
              "c = cv2.CascadeClassifier(cv2.data.haarcascades + 'haarcascade_frontalface_default.xml'); "
              "c.detectMultiScale(g, scaleFactor=float(sys.argv[1]), minNeighbors=3, minSize=(24, 24))")
    job = ["-m", "gpumr.jobs.face_detect", "-r", "inline", "--no-conf", "frame.seq", "--device", "cpu",
           "--output-dir"]
    results = [(f"OpenCV alone, --scale-factor {sf}", child(["-c", direct, sf], work, limit_gib=8))
               for sf in ("1.1", "1.05", "1.01", "1.003", "1.001")]
    if slowest:  # minutes, and gigabytes: the case the issue reported
        results.append(("OpenCV alone, 1.0001 (8 GiB address-space cap)", child(["-c", direct, "1.0001"], work, 8)))
    results.append(("gpumr job, 1.1 (runs)", child([*job, "o1", "--scale-factor", "1.1"], work)))
    results.append(("gpumr job, 1.0001 (refused before any task)", child([*job, "o2", "--scale-factor", "1.0001"],
                                                                         work)))
    results.append(("gpumr job, 1.004 --max-pixels 400000 (error line)",
                    child([*job, "o3", "--scale-factor", "1.004", "--max-pixels", "400000"], work)))
    table(f"Face pyramid: one {w}x{h} frame (baseline: OpenCV alone at 1.1)", HEADER, rows_of(results, results[0][1]))


def jpeg(work, size, scans):
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from crafted import many_scan_jpeg
    w, h = size
    for name, n in (("plain.jpg", 0), ("scans.jpg", scans)):
        with open(os.path.join(work, name), "wb") as f:
            f.write(many_scan_jpeg(w, h, n))
    decode = "import sys, cv2, numpy as np; cv2.imdecode(np.fromfile(sys.argv[1], np.uint8), cv2.IMREAD_GRAYSCALE)"
    ours = ("import sys, numpy as np; from gpumr.core.images import decode_gray; from gpumr.core import BadRecord\n"
            "try:\n    decode_gray(open(sys.argv[1], 'rb').read())\nexcept BadRecord as e:\n    sys.exit(str(e))")
    results = [("OpenCV alone, plain progressive (6 scans)", child(["-c", decode, "plain.jpg"], work)),
               (f"OpenCV alone, + {scans} scans", child(["-c", decode, "scans.jpg"], work)),
               (f"gpumr decode_gray, + {scans} scans (refused)", child(["-c", ours, "scans.jpg"], work)),
               ("gpumr decode_gray, plain (6 scans)", child(["-c", ours, "plain.jpg"], work))]
    table(f"JPEG scans: {w}x{h} grey progressive (baseline: OpenCV alone, plain)", HEADER,
          rows_of(results, results[0][1]))
    import cv2
    import numpy as np

    from gpumr.core.images import jpeg_scans
    plain, many = (open(os.path.join(work, n), "rb").read() for n in ("plain.jpg", "scans.jpg"))

    def timed(fn, data, repeat):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn(data)
        return (time.perf_counter() - t0) / repeat

    def decode(data):
        cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    base = timed(decode, plain, 5)
    rows = [["cv2.imdecode, plain", base], [f"cv2.imdecode, + {scans} scans", timed(decode, many, 2)],
            ["jpeg_scans, plain", timed(jpeg_scans, plain, 20)],
            [f"jpeg_scans, + {scans} scans (stops at 101)", timed(jpeg_scans, many, 20)]]
    table("JPEG scans in process (baseline: decoding the plain image)", ["step", "ms", "x base"],
          [[n, f"{t * 1e3:.3f}", f"{t / base:.3f}"] for n, t in rows])


def sheet(work, size, frames=13):
    import cv2
    import numpy as np

    import seqfile
    w, h = size
    data = cv2.imencode(".jpg", np.full((h, w, 3), 90, np.uint8))[1].tobytes()
    keys = [f"f{i:02d}.jpg" for i in range(frames)]
    with seqfile.Writer(os.path.join(work, "sheet.seq")) as wr:
        for key in keys:
            wr.append(key, data)
    os.mkdir(os.path.join(work, "sheet-out"))
    with open(os.path.join(work, "sheet-out", "part-00000"), "w") as f:
        for key in keys:
            f.write(json.dumps(key) + "\t" + json.dumps({"faces": [[10, 10, 50, 50]], "device": "cpu"}) + "\n")
    render = ["-m", "gpumr", "faces", "render", "sheet-out", "--images", "sheet.seq", "--sheet-frames"]
    results = [(f"faces render, --sheet-frames {n}", child([*render, str(n), "-d", f"pics-{n}"], work))
               for n in (1, 12)]
    table(f"Contact sheet: {frames} frames of {w}x{h} (baseline: --sheet-frames 1)", HEADER,
          rows_of(results, results[0][1]))


def ct(work, voxels, angles):
    from gpumr.ct import geometry
    g = geometry.simple(voxels, angles)
    g.save(os.path.join(work, "g.json"))
    d = json.load(open(os.path.join(work, "g.json")))
    for name, change in (("angles.json", {"nAngles": 10 ** 9}), ("slices.json", {"nVoxel": [10 ** 9, 64, 64]})):
        bad = {k: v for k, v in d.items() if not (k == "angles" and "nAngles" in change)}
        bad.update(change)
        json.dump(bad, open(os.path.join(work, name), "w"))
    plan = ["-m", "gpumr", "ct", "reconstruct", "--threads", "1", "p.seq", "--geometry"]
    subprocess.run([PY, "-m", "gpumr", "ct", "phantom", "--geometry", "g.json", "-o", "p.seq"], cwd=work, check=True,
                   capture_output=True)
    results = [("ct reconstruct, valid geometry", child([*plan, "g.json", "-o", "v1.npy"], work)),
               ("ct reconstruct, nAngles 1e9 (refused)", child([*plan, "angles.json", "-o", "v2.npy"], work)),
               ("ct reconstruct, nVoxel 1e9 slices (refused)", child([*plan, "slices.json", "-o", "v3.npy"], work))]
    table("CT geometry (baseline: a valid reconstruction)", HEADER, rows_of(results, results[0][1]))
    task = ("from gpumr.ct import geometry; from gpumr.ct.projections import read_set; "
            "from gpumr.ct.fdk import filter_projections; g = geometry.load('p.geometry.json'); "
            "filter_projections(read_set(['p.seq'], g), g)")
    check = ("from gpumr.ct import geometry; from gpumr.ct.projections import read_set; "
             "read_set(['p.seq'], geometry.load('p.geometry.json'), keep=False)")
    results = [("a task: load and filter the projections", child(["-c", task], work)),
               ("the launcher's check of every projection", child(["-c", check], work))]
    table(f"CT projections: {angles} of {g.nDetector[0]}x{g.nDetector[1]} (baseline: what a task loads)", HEADER,
          rows_of(results, results[0][1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frame", default="640x480")
    ap.add_argument("--jpeg", default="2000x1500")
    ap.add_argument("--scans", type=int, default=5000)
    ap.add_argument("--sheet", default="4000x3000")
    ap.add_argument("--voxels", type=int, default=64)
    ap.add_argument("--angles", type=int, default=90)
    ap.add_argument("--unbounded", action="store_true",
                    help="also OpenCV alone at --scale-factor 1.0001 (minutes, gigabytes; capped at 8 GiB)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gpumr-bench-")
    try:
        faces(work, tuple(map(int, args.frame.split("x"))), args.unbounded)
        jpeg(work, tuple(map(int, args.jpeg.split("x"))), args.scans)
        sheet(work, tuple(map(int, args.sheet.split("x"))))
        ct(work, args.voxels, args.angles)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
