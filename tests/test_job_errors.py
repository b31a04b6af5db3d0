"""Unreadable input in a job: an error line per bad record, a line per lost stretch, none silently skipped.

One real job run (inline runner, the face-detection job) over two files:

* ``keys.seq``: 401 records, one of them with a Text key that is not UTF-8.
  Its framing is intact, so it is one ``error`` line keyed by the key's bytes
  (escaped) and all 400 others come out.
* ``framing.seq``: 200 records, one with a broken record length. Only that
  breaks the framing: the reader skips to the next sync marker, and one
  ``error`` line names the file and the exact byte range lost; the console
  summary counts the stretch and its bytes.
"""

import json
import os
import struct
import subprocess
import sys

import cv2
import numpy as np
import pytest

import seqfile

BAD_KEY = b"frames/bad-\xff\xfe-key.jpg"


def tiny_jpeg(i):
    img = np.full((32, 32), (i * 37) % 256, np.uint8)
    return cv2.imencode(".jpg", img)[1].tobytes()


@pytest.fixture(scope="module")
def job_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("joberrors")
    keys = str(d / "keys.seq")
    with seqfile.Writer(keys, sync_interval=4000) as w:
        for i in range(401):
            w.append(BAD_KEY if i == 123 else f"frames/{i:04d}.jpg", tiny_jpeg(i))
    framing = str(d / "framing.seq")
    names = [f"other/{i:04d}.jpg" for i in range(200)]
    with seqfile.Writer(framing, sync_interval=4000) as w:
        for i, name in enumerate(names):
            w.append(name, tiny_jpeg(i))
    records = list(seqfile.Reader(framing))
    data = bytearray(open(framing, "rb").read())
    victim = 50
    at = records[victim].offset
    if data[at:at + 4] == b"\xff\xff\xff\xff":
        at += 20
    data[at:at + 4] = struct.pack(">i", -9)  # break record 50's length
    open(framing, "wb").write(bytes(data))
    # the reader resumes at the next sync entry: the first later record that starts with one
    resume = next(r.offset for r in records[victim + 1:] if data[r.offset:r.offset + 4] == b"\xff\xff\xff\xff")
    lost_names = {n for n, r in zip(names, records) if records[victim].offset <= r.offset < resume}
    out = str(d / "out")
    p = subprocess.run([sys.executable, "-m", "gpumr.jobs.face_detect", "-r", "inline", "--no-conf",
                        "--device", "cpu", keys, framing, "--output-dir", out],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = []
    for name in sorted(os.listdir(out)):
        if name.startswith("part-"):
            lines += open(os.path.join(out, name), encoding="utf-8").read().splitlines()
    got = {}
    for line in lines:
        k, v = line.split("\t", 1)
        assert json.loads(k) not in got
        got[json.loads(k)] = json.loads(v)
    return dict(got=got, stderr=p.stderr, keys=keys, framing=framing, names=names, lost_names=lost_names,
                start=records[victim].offset, end=resume, lines=len(lines))


def test_bad_key_is_one_error_line_and_every_other_record_comes_out(job_run):
    got = job_run["got"]
    label = BAD_KEY.decode("utf-8", "backslashreplace")
    assert label == "frames/bad-\\xff\\xfe-key.jpg"
    good = {f"frames/{i:04d}.jpg" for i in range(401) if i != 123}
    assert good <= set(got) and all("faces" in got[k] for k in good)
    err = got[label]["error"]
    assert "keys.seq" in err and "key (Text)" in err and "utf-8" in err.lower(), err


def test_broken_framing_is_one_lost_line_with_the_byte_range(job_run):
    got, framing = job_run["got"], job_run["framing"]
    assert 0 < len(job_run["lost_names"]) < 30
    kept = set(job_run["names"]) - job_run["lost_names"]
    assert kept <= set(got) and not job_run["lost_names"] & set(got)
    line = got[framing]
    assert line["lost"] == [job_run["start"], job_run["end"]]
    assert f"bytes {job_run['start']}-{job_run['end']} could not be read" in line["error"]
    # every line is a record's result, the bad key's line or the lost stretch's line
    assert job_run["lines"] == 400 + 1 + len(kept) + 1


def test_summary_counts_bad_records_and_lost_bytes(job_run):
    summary = [line for line in job_run["stderr"].splitlines() if line.startswith("gpumr: ") and " records: " in line]
    assert summary, job_run["stderr"][-2000:]
    nbytes = job_run["end"] - job_run["start"]
    assert "2 bad (" in summary[-1] and f"), 1 lost stretch of input ({nbytes} bytes unreadable)" in summary[-1], \
        summary[-1]
    assert "framing.seq: bytes" in summary[-1] and "unreadable record at byte" in summary[-1]  # both named
    kept = 400 + 200 - len(job_run["lost_names"])
    assert summary[-1].startswith(f"gpumr: {kept + 2} records: {kept} on CPU"), summary[-1]


def test_max_record_size_reaches_the_tasks(tmp_path):
    from gpumr.jobs.face_detect import MRFaceDetect
    from gpumr.launch.job import run_job
    path = str(tmp_path / "sizes.seq")
    big = cv2.imencode(".png", np.random.default_rng(0).integers(0, 255, (64, 64), np.uint8))[1].tobytes()
    with seqfile.Writer(path, compression="RECORD", codec="default") as w:
        w.append("small.jpg", tiny_jpeg(1))
        w.append("big.png", big)
    assert len(tiny_jpeg(1)) < 1000 < len(big)
    out = str(tmp_path / "out")
    counters, _ = run_job(MRFaceDetect, [path], out, "inline", ["--device", "cpu", "--max-record-size", "1000"])
    got = {}
    for name in os.listdir(out):
        if name.startswith("part-"):
            for line in open(os.path.join(out, name), encoding="utf-8"):
                k, v = line.split("\t", 1)
                got[json.loads(k)] = json.loads(v)
    assert "faces" in got["small.jpg"]
    assert "over the size cap of 1000 bytes" in got["big.png"]["error"] and "sizes.seq" in got["big.png"]["error"]
    assert counters["bad records"] == 1 and counters["records on CPU"] == 1


# ---- warnings inside tasks (issue 25, class 8) ---------------------------------------------------------

@pytest.mark.parametrize("runner", ["inline", "local"])
def test_a_warning_in_a_task_goes_out_through_the_one_path(tmp_path, runner):
    """The README's "normal cone-beam case": a geometry that gets the field-of-view warning. With the inline
    runner (mrjob's default), whose tasks have a binary stderr, the warning was a TypeError ("a bytes-like
    object is required, not 'str'") and a traceback; ``-r local`` ran it. Made as the issue says."""
    def gpumr(*argv):
        return subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    made = gpumr("-m", "gpumr", "ct", "phantom", "--voxels", "48", "--angles", "72", "--detector", "40", "64",
                 "--off-detector", "1.5", "-2", "--off-origin", "2", "-1.5", "1", "-o", "proj.seq")
    assert made.returncode == 0, made.stderr
    fov = "part of the volume lies outside the field of view"
    assert made.stderr.count(fov) == 1 and made.stderr.startswith("gpumr: warning: "), made.stderr
    job = gpumr("-m", "gpumr.jobs.backproject", "-r", runner, "--no-conf", "--projections", "proj.seq",
                "--output-dir", "out", "--device", "cpu")
    assert job.returncode == 0 and "Traceback" not in job.stderr, job.stderr[-3000:]
    warned = [ln for ln in job.stderr.splitlines() if fov in ln]
    assert warned and all(ln.startswith("gpumr: warning: ") for ln in warned), job.stderr[-3000:]
    assert job.stderr.strip().splitlines()[-1].startswith("gpumr: 3 records: 3 on CPU")
    assert sorted(n for n in os.listdir(tmp_path / "out") if n.startswith("part-"))
