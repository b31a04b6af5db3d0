"""The face-detection job: equal to direct OpenCV, both input paths, bad records, counters."""

import json
import os
import struct
import zlib

import cv2
import numpy as np
import pytest

import seqfile
from gpumr.faces.cpu import detect, load_cascade
from gpumr.io.packing import pack
from gpumr.launch.job import run_job


def direct_opencv(frames_dir, cascade=None, **params):
    clf = load_cascade(cascade)
    out = {}
    for name in sorted(os.listdir(frames_dir)):
        gray = cv2.imdecode(np.fromfile(os.path.join(frames_dir, name), np.uint8), cv2.IMREAD_GRAYSCALE)
        out[name] = detect(clf, gray, **params)
    return out


def read_output(out_dir):
    lines = []
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("part-"):
            lines += open(os.path.join(out_dir, name), encoding="utf-8").read().splitlines()
    return lines


def parsed(lines):
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t", 1) for line in lines)}


def run_face_job(inputs, output_dir, runner="inline", extra=()):
    from gpumr.jobs.face_detect import MRFaceDetect
    return run_job(MRFaceDetect, inputs, output_dir, runner, extra)


@pytest.fixture(scope="module")
def packed(sample_frames, tmp_path_factory):
    d = tmp_path_factory.mktemp("packed")
    seq = str(d / "frames")
    pack([sample_frames], seq, shards=2, progress=False)
    return seq


@pytest.mark.parametrize("runner", ["inline", pytest.param("local", marks=pytest.mark.slow)])
def test_output_equals_direct_opencv(packed, sample_frames, tmp_path, runner):
    counters, _ = run_face_job([packed], str(tmp_path / "out"), runner, ["--device", "cpu"])
    lines = read_output(str(tmp_path / "out"))
    keys = [json.loads(line.split("\t")[0]) for line in lines]
    assert keys == sorted(keys)  # identity reducer: sorted by key
    got = parsed(lines)
    expected = direct_opencv(sample_frames)
    assert set(got) == set(expected)
    for k, faces in expected.items():
        assert got[k] == {"faces": faces, "device": "cpu", "width": 640, "height": 480}
    assert sum(len(f) for f in expected.values()) > 5  # the sample frames do have faces
    c = counters
    assert c["records on CPU"] == len(expected) and c["CPU milliseconds"] > 10 * len(expected)
    assert set(c) == {"records on CPU", "CPU milliseconds"}


def test_cascade_and_parameters_are_honoured(packed, sample_frames, tmp_path):
    alt = os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_alt2.xml")
    shipped = tmp_path / "my_cascade.xml"
    shipped.write_bytes(open(alt, "rb").read())
    run_face_job([packed], str(tmp_path / "out"), "inline",
                 ["--cascade", str(shipped), "--min-neighbors", "5", "--scale-factor", "1.2", "--min-size", "40"])
    got = parsed(read_output(str(tmp_path / "out")))
    expected = direct_opencv(sample_frames, str(shipped), scale_factor=1.2, min_neighbors=5, min_size=40)
    assert {k: v["faces"] for k, v in got.items()} == expected


@pytest.mark.hadoop
def test_hadoop_splits_input_path_gives_identical_output(hadoop, packed, tmp_path):
    """Feed the mapper the exact lines Hadoop's SequenceFileAsTextInputFormat makes, from several splits."""
    part = os.path.join(packed, sorted(os.listdir(packed))[0])
    with seqfile.Writer(str(tmp_path / "resynced.seq"), sync_interval=20_000) as w:
        for k, v, _ in seqfile.Reader(part):
            w.append(k, v)
    path = str(tmp_path / "resynced.seq")
    size = os.path.getsize(path)
    cuts = [0, size // 3, size // 2, 2 * size // 3, size]
    splits = list(zip(cuts[:-1], cuts[1:]))
    lines = hadoop.astext(path, splits)
    assert len(lines) == sum(1 for _ in seqfile.Reader(path))
    assert lines[0].split("\t")[1][:8] == "ff d8 ff"  # BytesWritable.toString(): spaced hex
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    for i, chunk in enumerate((lines[:3], lines[3:])):
        (text_dir / f"split-{i}.txt").write_text("\n".join(chunk) + "\n")
    # The task script's mapper over those lines (what Hadoop runs with --hadoop-splits), under mrjob's inline runner.
    from gpumr.engines.mrjob.job import MRWorkload
    from gpumr.launch.job import job_folder
    from gpumr.launch.plan import make_plan
    with job_folder() as folder:
        spec = tmp_path / "spec.json"
        plan = make_plan(["faces", path, "-o", str(tmp_path / "unused"), "--device", "cpu"], folder)
        spec.write_text(plan.spec.to_json())
        shipped = [a for side in plan.side for a in ("--files", side.path)]  # (the cascade, by its content's name)
        job = MRWorkload(args=["-r", "inline", "--no-conf", "--hadoop-splits", "--gpumr-spec", str(spec), *shipped,
                               str(text_dir), "--output-dir", str(tmp_path / "via_text")])
        with job.make_runner() as runner:
            runner.run()
    run_face_job([path], str(tmp_path / "via_seq"), "inline")
    assert read_output(str(tmp_path / "via_text")) == read_output(str(tmp_path / "via_seq"))


def _png(width, height, bit_depth=8, color=0):
    """A PNG whose IHDR claims width x height (pixels need not follow)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")


def test_bad_and_unusual_records(sample_frames, tmp_path):
    frames = sorted(os.listdir(sample_frames))
    good = open(os.path.join(sample_frames, frames[0]), "rb").read()
    color = cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_COLOR)
    ok16, png16 = cv2.imencode(".png", (color.astype(np.uint16) * 257))
    okp, png8 = cv2.imencode(".png", color)
    records = {
        "a_good.jpg": good,
        "b_truncated.jpg": good[:len(good) // 3] + b"\x00" * 10,
        "c_garbage.jpg": os.urandom(5000),
        "d_empty.jpg": b"",
        "e_photo.png": png8.tobytes(),
        "f_sixteen_bit.png": png16.tobytes(),
        "g_bomb.png": _png(100_000, 100_000),
        "h_good_again.jpg": open(os.path.join(sample_frames, frames[1]), "rb").read(),
    }
    path = str(tmp_path / "mixed.seq")
    with seqfile.Writer(path) as w:
        for k, v in records.items():
            w.append(k, v)
    counters, _ = run_face_job([path], str(tmp_path / "out"), "inline")
    got = parsed(read_output(str(tmp_path / "out")))
    assert set(got) == set(records)  # nothing lost
    clf = load_cascade()
    ref = detect(clf, cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_GRAYSCALE))
    assert got["a_good.jpg"]["faces"] == ref
    assert got["e_photo.png"]["faces"] == detect(clf, cv2.imdecode(png8, cv2.IMREAD_GRAYSCALE))
    assert got["f_sixteen_bit.png"].get("faces") is not None and got["f_sixteen_bit.png"]["width"] == 640
    assert "empty" in got["d_empty.jpg"]["error"]
    assert "exceeds" in got["g_bomb.png"]["error"] and "100000x100000" in got["g_bomb.png"]["error"]
    assert "error" in got["c_garbage.jpg"]
    assert "faces" in got["h_good_again.jpg"]
    c = counters
    assert c.get("records on CPU", 0) + c.get("bad records", 0) == len(records)
    assert c["bad records"] == sum(1 for v in got.values() if "error" in v) >= 3


def test_corrupt_sequencefile_stretch_is_an_error_line(corrupt_stretch, tmp_path):
    path, frames, offsets = corrupt_stretch
    counters, _ = run_face_job([path], str(tmp_path / "out"), "inline")
    got = parsed(read_output(str(tmp_path / "out")))
    lost = {k: v for k, v in got.items() if k not in frames}
    assert set(got) - set(lost) == set(frames) - {frames[3]}
    assert list(lost) == [path] and lost[path]["lost"][0] == offsets[3]
    assert counters["bad records"] == 1


def test_a_file_that_is_not_a_sequencefile_is_counted_not_fatal(packed, tmp_path):
    import shutil
    mixed = tmp_path / "mixed"
    shutil.copytree(packed, mixed)
    (mixed / "part-99999.seq").write_bytes(b"\xff\xd8\xff\xe0 not a SequenceFile")
    counters, _ = run_face_job([str(mixed)], str(tmp_path / "out"), "inline")
    got = parsed(read_output(str(tmp_path / "out")))
    assert len(got) == 13  # 12 records and one error line for the file
    bad = [k for k in got if k.endswith("part-99999.seq")]
    assert len(bad) == 1 and "error" in got[bad[0]]
    assert counters["bad records"] == 1


def test_map_only_run(packed, tmp_path):
    counters, _ = run_face_job([packed], str(tmp_path / "out"), "inline", ["--reducers", "0"])
    assert len(read_output(str(tmp_path / "out"))) == 12


def without_device(value):
    """A face output value less what says where it ran."""
    return {k: v for k, v in value.items() if k not in ("device", "simulated")}


@pytest.mark.parametrize("runner", ["inline", pytest.param("local", marks=pytest.mark.slow)])
def test_device_gpu_on_simulated_gpus_runs_the_kernels(packed, sample_frames, tmp_path, monkeypatch, runner,
                                                        emulated_kernels):
    """Every frame through FaceGPU, its kernels executed on the host: the same faces as --device cpu."""
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counters, _ = run_face_job([packed], str(tmp_path / "out"), runner, ["--device", "gpu"])
    got = parsed(read_output(str(tmp_path / "out")))
    expected = direct_opencv(sample_frames)  # what --device cpu gives (test_output_equals_direct_opencv)
    assert {k: without_device(v) for k, v in got.items()} == {
        k: {"faces": faces, "width": 640, "height": 480} for k, faces in expected.items()}
    assert all(v["device"] == "gpu:0" and v["simulated"] is True for v in got.values())
    assert counters["records on GPU"] == 12 and counters["GPU milliseconds"] > 0
    assert set(counters) == {"records on GPU", "GPU milliseconds"}  # no fallback, nothing on the CPU


def test_a_broken_kernel_is_caught_by_the_self_check_and_every_frame_falls_back(packed, sample_frames, tmp_path,
                                                                                 monkeypatch, altered_kernel):
    altered_kernel("haar", "(stages_at<K>(C, v, 0, 1) < 0) ? 1 : 0", "(stages_at<K>(C, v, 0, 1) < 0) ? 0 : 1")
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counters, _ = run_face_job([packed], str(tmp_path / "out"), "inline", ["--device", "gpu"])
    got = parsed(read_output(str(tmp_path / "out")))
    assert {k: v["faces"] for k, v in got.items()} == direct_opencv(sample_frames)
    assert all(v["device"] == "cpu" for v in got.values())
    assert counters["GPU fallbacks"] == counters["records on CPU"] == 12 and "records on GPU" not in counters


def test_render_draws_white_boxes_and_a_contact_sheet(packed, tmp_path, capsys):
    from gpumr.cli import main
    run_face_job([packed], str(tmp_path / "out"), "inline")
    assert main(["faces", "render", str(tmp_path / "out"), "--images", packed, "-d", str(tmp_path / "pics")]) == 0
    assert "contact sheet" in capsys.readouterr().out
    sheet = cv2.imread(str(tmp_path / "pics" / "contact_sheet.png"))
    assert sheet is not None and sheet.shape[1] == 4 * 320
    got = parsed(read_output(str(tmp_path / "out")))
    key, res = next((k, v) for k, v in sorted(got.items()) if v.get("faces"))
    img = cv2.imread(str(tmp_path / "pics" / key))
    x, y, w, h = res["faces"][0]
    assert (img[y + h // 2, x] >= 230).all()  # the box's left edge is white


def test_demo_end_to_end(tmp_path, capsys):
    from gpumr.cli.demo import demo
    s = demo(str(tmp_path / "demo"), frames=8, shards=2, runner="inline")
    lines = capsys.readouterr().out.splitlines()
    assert s["counters"]["records on CPU"] == 8 and os.path.exists(s["sheet"])
    assert lines[-1].startswith("demo: 8 frames,") and "frames/s" in lines[-1]
