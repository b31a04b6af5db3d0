"""Work bounded before it starts, and clear refusals (issue 19, classes 4 and 5), through the real commands.

What the options or a file's metadata alone decide is refused before any
task with one line naming the option, file or field, no traceback: exit
status 2 for the jobs (inline, local and hadoop runners: the launcher checks
before mrjob or Hadoop is called) and 1 for ``gpumr`` commands, ``gpumr
spark`` included (refused on the driver before a Spark context starts).
Every such command runs here under a 2 GiB address-space limit, so a refusal
that came only after a large allocation would fail the test. What only a
record's data decides is that record's error line; what only the node a task
runs on can decide fails the task with one line that the job's client prints.
"""

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
from crafted import many_scan_jpeg, progressive_jpeg

import seqfile
from gpumr.cli import main
from gpumr.io.packing import pack

#: Address space each refused command may use: far below what the unbounded cases took (3-17 GB).
MEMORY = 2 << 30


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(args, cwd, env=None, limit=True):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limited if limit else None, env=env)


def refused(proc, message, prefix="gpumr: error: ", status=1):
    """``proc`` stopped with exactly one line, ``prefix`` + something holding ``message``, no traceback."""
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == status and len(err) == 1, proc.stderr[-3000:]
    assert err[0].startswith(prefix) and message in err[0], err[0]
    assert "Traceback" not in proc.stderr
    return err[0]


# -- face detection ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def faces(sample_frames, tmp_path_factory):
    """A packed SequenceFile of the sample frames, a non-cascade XML and an oversized cascade file."""
    d = tmp_path_factory.mktemp("faces")
    pack([sample_frames], str(d / "frames.seq"), progress=False)
    (d / "not_a_cascade.xml").write_text('<?xml version="1.0"?>\n<opencv_storage><foo>1</foo></opencv_storage>\n')
    with open(d / "huge.xml", "wb") as f:  # sparse: its size alone is refused, nothing is read
        f.truncate((16 << 20) + 1)
    return d


def face_command(engine, d, args):
    """``(argv, error prefix, exit status)`` of the face job under ``engine`` with ``args``."""
    seq, out = str(d / "frames.seq"), str(d / "never-written")
    if engine == "spark":
        return ["-m", "gpumr", "spark", "faces", seq, "-o", out, "--master", "local[1]", *args], "gpumr: error: ", 1
    return (["-m", "gpumr.jobs.face_detect", "-r", engine, "--no-conf", seq, "--output-dir", out, *args],
            "gpumr: error: ", 1)


SCALE = "--scale-factor must be a number over 1 and at most 100, not "
FACE_REFUSALS = {
    "scale-nan": (["--scale-factor", "nan"], SCALE + "nan"),
    "scale-inf": (["--scale-factor", "inf"], SCALE + "inf"),
    "scale-1e10": (["--scale-factor", "1e10"], SCALE + "10000000000.0"),
    "scale-1.0001": (["--scale-factor", "1.0001"], "--scale-factor 1.0001 makes more than 1000 scales from the "
                                                   "cascade's 24x24 window up to 7071 pixels"),
    "scale-1.001-max-size": (["--scale-factor", "1.001", "--max-size", "200"], "up to 200 pixels (the largest "
                                                                               "face --max-size allows)"),
    "max-below-min": (["--max-size", "20"], "--max-size 20 is below --min-size 24: no face can be found"),
    "max-below-window": (["--min-size", "10", "--max-size", "22"], "--max-size 22 is below the cascade's 24x24 window"),
    "min-above-images": (["--min-size", "2000", "--max-pixels", "1000000"],
                         "--min-size 2000 is larger than any image --max-pixels 1000000 allows (1000x1000)"),
    "cascade-missing-path": (["--cascade", "models/haarcascade_frontalface_alt.xml"],
                             "--cascade models/haarcascade_frontalface_alt.xml: no such cascade file"),
    "cascade-missing-name": (["--cascade", "no_such_cascade.xml"], "no_such_cascade.xml: no such cascade file"),
    "cascade-not-xml-cascade": (["--cascade", "not_a_cascade.xml"],
                                "not_a_cascade.xml: not a cascade classifier OpenCV can load"),
    "cascade-huge": (["--cascade", "huge.xml"], "huge.xml: 16,777,217 bytes, over the limit of 16,777,216"),
    "max-pixels": (["--max-pixels", "1000000000000"], "--max-pixels must be a whole number from 1 to 134,217,728"),
    "threads": (["--opencv-threads", "100000"], "--opencv-threads must be a whole number from 1 to 256"),
    "reducers": (["--reducers", "100000"], "--reducers must be a whole number from 0 to 10,000"),
    "gpu-slots": (["--gpu-slots", "1000"], "--gpu-slots must be a whole number from 1 to 256"),
    "gpu-memory": (["--gpu-memory", "2000TB"], "--gpu-memory must be a whole number from 1 to 1,125,899,906,842,624"),
    "device-gpu": (["--device", "gpu"], "--device gpu: no GPU on this node ("),
}
#: Checked under every engine; the others under the inline runner (the same check_options serves all).
EVERY_ENGINE = ("scale-nan", "scale-1.0001", "max-below-min", "cascade-missing-path", "cascade-not-xml-cascade")


@pytest.mark.parametrize("engine, case", [("inline", c) for c in FACE_REFUSALS] + [
    (e, c) for e in ("local", "hadoop", "spark") for c in EVERY_ENGINE + ("device-gpu",)
    if not (e == "hadoop" and c == "device-gpu")])  # Hadoop's tasks run elsewhere: each task refuses it
def test_face_options_are_refused_before_any_task(faces, engine, case):
    args, message = FACE_REFUSALS[case]
    argv, prefix, status = face_command(engine, faces, args)
    refused(run(argv, str(faces)), message, prefix, status)
    assert not (faces / "never-written").exists()


@pytest.fixture(scope="module")
def record_run(sample_frames, tmp_path_factory):
    """One inline run over records that only their own data makes too much work, and ones that are fine."""
    import cv2
    d = tmp_path_factory.mktemp("records")
    frame = open(os.path.join(sample_frames, sorted(os.listdir(sample_frames))[0]), "rb").read()
    small = cv2.imencode(".jpg", cv2.imdecode(np.frombuffer(frame, np.uint8), cv2.IMREAD_GRAYSCALE)[:150, :200])[1]
    records = {"big.jpg": frame,  # 640x480: its pyramid at 1.02 is 26 times the image, over 8 x 400000
               "small.jpg": small.tobytes(),  # 200x150: within the pyramid limit
               "scans.jpg": many_scan_jpeg(64, 48, 150),  # 156 scans
               "scans_at_limit.jpg": many_scan_jpeg(64, 48, 94),  # 6 + 94 = 100 scans: accepted
               "progressive.jpg": progressive_jpeg(64, 48)}
    seq = str(d / "records.seq")
    with seqfile.Writer(seq) as w:
        for key, value in records.items():
            w.append(key, value)
    out = d / "out"
    proc = run(["-m", "gpumr.jobs.face_detect", "-r", "inline", "--no-conf", seq, "--output-dir", str(out),
                "--scale-factor", "1.02", "--max-pixels", "400000", "--device", "cpu"], str(d))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for n in sorted(os.listdir(out)) if n.startswith("part-") for ln in open(out / n).read().splitlines()]
    return {json.loads(k): json.loads(v) for k, v in (ln.split("\t", 1) for ln in lines)}, proc.stderr


def test_a_pyramid_over_its_limit_is_that_records_error_line(record_run):
    import re
    got, stderr = record_run
    m = re.fullmatch(r"image of 640x480 pixels: its pyramid at --scale-factor 1\.02 holds ([\d,]+) pixels, over the "
                     r"limit of 8 x --max-pixels = 3,200,000", got["big.jpg"]["error"])
    # The pyramid: the image resized by 1.02**-k while the 24-pixel window, grown by 1.02**k, fits its height.
    levels = [k for k in range(1000) if round(24 * 1.02 ** k) <= 480]
    assert abs(int(m.group(1).replace(",", "")) / sum(640 * 480 / 1.02 ** (2 * k) for k in levels) - 1) < 0.01
    assert got["small.jpg"]["width"] == 200 and isinstance(got["small.jpg"]["faces"], list)
    assert "gpumr: 5 records: 3 on CPU, 0 on GPU, 2 bad" in stderr


def test_a_jpeg_of_too_many_scans_is_refused_unread(record_run):
    got, _ = record_run
    assert got["scans.jpg"] == {"error": "JPEG of more than 100 scans (each a pass of the decoder over the image): "
                                         "refused unread"}
    assert got["scans_at_limit.jpg"]["width"] == 64 and got["progressive.jpg"]["height"] == 48


def test_jpeg_scans_are_counted_by_walking_the_segments():
    import cv2

    from gpumr.core.images import jpeg_scans
    baseline = cv2.imencode(".jpg", np.zeros((40, 48), np.uint8))[1].tobytes()
    grey, colour = progressive_jpeg(48, 40), _colour_progressive(48, 40)
    assert (jpeg_scans(baseline), jpeg_scans(grey), jpeg_scans(colour)) == (1, 6, 10)  # libjpeg's progressions
    assert jpeg_scans(many_scan_jpeg(48, 40, 500)) == 101  # counting stops past the limit
    # The bytes of a scan header inside another segment (a comment here) are not a scan.
    comment = b"\xff\xda" * 4
    tricky = grey[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + grey[2:]
    assert jpeg_scans(tricky) == 6 and tricky.count(b"\xff\xda") == 10
    assert cv2.imdecode(np.frombuffer(tricky, np.uint8), cv2.IMREAD_GRAYSCALE).shape == (40, 48)


def _colour_progressive(width, height):
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(1).random((height, width, 3)) * 255).astype(np.uint8)).save(
        buf, "JPEG", progressive=True)
    return buf.getvalue()


def test_a_bare_name_is_the_bundled_cascade_only_when_no_such_file_is_here(tmp_path, monkeypatch):
    import cv2

    from gpumr.errors import GpumrError
    from gpumr.faces.cpu import cascade_path
    name = "haarcascade_frontalface_alt.xml"
    monkeypatch.chdir(tmp_path)
    assert cascade_path(name) == os.path.join(cv2.data.haarcascades, name)
    (tmp_path / name).write_bytes(open(os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_alt2.xml"),
                                       "rb").read())
    assert cascade_path(name) == name  # the file here wins
    for missing in (f"models/{name}", f"./{name}x", os.path.join(str(tmp_path), "none", name)):
        with pytest.raises(GpumrError, match="no such cascade file"):
            cascade_path(missing)


def test_a_task_that_finds_no_gpu_fails_with_one_line_the_client_prints(faces, tmp_path):
    """The launcher sees a (simulated) GPU, the tasks' node none: each task refuses ``--device gpu`` itself."""
    env = dict(os.environ, GPUMR_SIMULATE_GPUS="1")
    for runner, status in (("inline", 1), ("local", 1)):
        proc = run(["-m", "gpumr.jobs.face_detect", "-r", runner, "--no-conf", str(faces / "frames.seq"),
                    "--output-dir", str(tmp_path / runner), "--local-tmp-dir", str(tmp_path / f"{runner}-tmp"),
                    "--device", "gpu", "--cmdenv", "GPUMR_SIMULATE_GPUS="], str(tmp_path), env=env, limit=False)
        assert proc.returncode == status and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        lines = [ln for ln in proc.stderr.splitlines() if "--device gpu: no GPU on this node" in ln]
        assert len(lines) == 1, proc.stderr[-3000:]
        assert lines[0].startswith("gpumr: error: ")


def test_the_contact_sheet_is_bounded(faces):
    refused(run(["-m", "gpumr", "faces", "render", str(faces / "frames.seq"), "--images", str(faces / "frames.seq"),
                 "-d", str(faces / "pics"), "--sheet-frames", "1000"], str(faces)),
            "--sheet-frames must be a whole number from 1 to 100, not 1000")
    assert not (faces / "pics").exists()


def test_the_contact_sheet_holds_tiles_not_frames(tmp_path):
    """``faces render`` kept each sheet frame whole until the end: 100 frames of 50 Mpx would be 15 GB."""
    import tracemalloc

    import cv2

    from gpumr.faces.render import CAPTION, TILE, TITLE, render
    w, h = 2400, 1800
    frame = cv2.imencode(".jpg", np.full((h, w, 3), 90, np.uint8))[1].tobytes()
    keys = [f"f{i:02d}.jpg" for i in range(13)]
    with seqfile.Writer(str(tmp_path / "in.seq")) as wr:
        for key in keys:
            wr.append(key, frame)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-00000").write_text("".join(
        f'{json.dumps(k)}\t{json.dumps({"faces": [[10, 10, 50, 50]], "device": "cpu", "width": w, "height": h})}\n'
        for k in keys))
    tracemalloc.start()
    try:
        got = render([str(tmp_path / "out")], [str(tmp_path / "in.seq")], str(tmp_path / "pics"), sheet_frames=12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got["frames"] == 13 and cv2.imread(got["sheet"]).shape == (TITLE + 3 * (TILE[1] + CAPTION), 4 * TILE[0], 3)
    assert peak < 5 * w * h * 3, peak / (w * h * 3)  # a frame decoded, its boxed copy, the tiles: not 12 frames


def test_sample_frames_are_bounded(tmp_path):
    refused(run(["-m", "gpumr", "sample", "-n", "20000", str(tmp_path / "s")], str(tmp_path)),
            "sample frames (-n, --frames) must be a whole number from 1 to 10,000, not 20000")
    refused(run(["-m", "gpumr", "demo", "--frames", "20000", "--output", str(tmp_path / "s")], str(tmp_path)),
            "sample frames (-n, --frames) must be a whole number from 1 to 10,000, not 20000")
    refused(run(["-m", "gpumr", "sample", "--seed", "-1", str(tmp_path / "s")], str(tmp_path)),
            "--seed must be a whole number of at least 0, not -1")
    assert not (tmp_path / "s").exists()


# -- CT ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ct(tmp_path_factory):
    """Projections (16^3 voxels, 12 angles) with their geometry; the same with one NaN pixel."""
    import io

    import tifffile

    from gpumr.ct.projections import encode_tiff
    d = tmp_path_factory.mktemp("ct")
    assert main(["ct", "phantom", "--voxels", "16", "--angles", "12", "-o", str(d / "p.seq")]) == 0
    with seqfile.Writer(str(d / "nan.seq")) as w:
        for i, r in enumerate(seqfile.Reader(str(d / "p.seq"))):
            img = tifffile.imread(io.BytesIO(r.value))
            if i == 5:
                img[3, 4] = np.nan
            w.append(r.key, encode_tiff(img))
    (d / "nan.geometry.json").write_bytes((d / "p.geometry.json").read_bytes())
    return d


def ct_commands(d, geometry=None, projections="p.seq", extra=()):
    """Every CT command that reads a geometry or projections: ``{name: (argv, prefix, status)}``."""
    g = ["--geometry", str(geometry)] if geometry else []
    p = str(d / projections)
    return {"plan": (["-m", "gpumr", "run", "backproject", "--projections", p, *g, "--slab", "8", "-o",
                      str(d / "never"), "--dry-run", *extra], "gpumr: error: ", 1),
            "reconstruct": (["-m", "gpumr", "ct", "reconstruct", p, *g, "-o", str(d / "never.npy"), *extra],
                            "gpumr: error: ", 1),
            "phantom": (["-m", "gpumr", "ct", "phantom", *g, "-o", str(d / "never.seq"), *extra], "gpumr: error: ", 1),
            "job": (["-m", "gpumr.jobs.backproject", "-r", "inline", "--no-conf", "--projections", p,
                     *g, "--output-dir", str(d / "never"), *extra], "gpumr: error: ", 1),
            "spark": (["-m", "gpumr", "spark", "backproject", "--projections", p, *g, "--slab", "8", "-o",
                       str(d / "never"), "--master", "local[1]", *extra], "gpumr: error: ", 1)}


@pytest.mark.parametrize("i0", ["0", "-1", "nan"])
@pytest.mark.parametrize("command", ["reconstruct", "job", "spark"])
def test_i0_must_be_positive(ct, command, i0):
    argv, prefix, status = ct_commands(ct, extra=[f"--i0={i0}"])[command]
    refused(run(argv, str(ct)), f"--i0 must be a number over 0 and at most 1e+15, not {float(i0)}", prefix, status)


GEOMETRIES = {  # (a change to a valid geometry, what the one line says)
    "string": ({"DSO": "400"}, "DSO must be a number over 0 and at most 1e+06, not '400'"),
    "dict": ({"nDetector": {"rows": 18}}, "nDetector must be a list of 2 numbers, not {'rows': 18}"),
    "ragged": ({"angles": [[0.0, 0.1], [0.2]]}, "angles[0] must be a number from -1e+06 to 1e+06, not [0.0, 0.1]"),
    "string-angle": ({"angles": ["0.5"]}, "angles[0] must be a number from -1e+06 to 1e+06, not '0.5'"),
    "infinity": ({"dVoxel": ["Infinity", 1, 1]}, "dVoxel[0] must be a number over 0 and at most 1e+06, not inf"),
    "nan": ({"DSD": "NaN"}, "DSD must be a number over 0 and at most 1e+06, not nan"),
    "huge-number": ({"nVoxel": ["1e400", 16, 16]}, "nVoxel[0] must be a whole number from 1 to 16,384, not inf"),
    "huge-distance": ({"DSO": 1e300}, "DSO must be a number over 0 and at most 1e+06, not 1e+300"),
    "fraction": ({"nVoxel": [16, 16, 16.5]}, "nVoxel[2] must be a whole number from 1 to 16,384, not 16.5"),
    "1e9-angles": ({"angles": None, "nAngles": 10 ** 9}, "nAngles must be a whole number from 1 to 65,536, "
                                                        "not 1000000000"),
    "1e9-slices": ({"nVoxel": [10 ** 9, 16, 16]}, "nVoxel[0] must be a whole number from 1 to 16,384, "
                                                  "not 1000000000"),
    "too-many-voxels": ({"nVoxel": [16384, 16384, 64]}, "17,179,869,184 voxels, over the limit of 8,589,934,592"),
    "too-many-samples": ({"nDetector": [8192, 8192], "nAngles": 64, "angles": None},
                         "64 angles of 8192x8192 pixels: 4,294,967,296 projection samples, over the limit of "
                         "2,147,483,648"),
}


def _geometry_file(ct, name):
    change, _ = GEOMETRIES[name]
    g = json.loads((ct / "p.geometry.json").read_text())
    for k, v in change.items():
        if v is None:
            g.pop(k)
        else:
            g[k] = v
    text = json.dumps(g)
    for word in ("Infinity", "NaN", "1e400"):  # JSON's non-finite spellings, and a number too large for a float
        text = text.replace(f'"{word}"', word)
    path = ct / f"g-{name}.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_bad_geometry_is_one_line(ct, name):
    path = _geometry_file(ct, name)
    argv, prefix, status = ct_commands(ct, path)["plan"]
    assert refused(run(argv, str(ct)), GEOMETRIES[name][1]).startswith(f"gpumr: error: {path}: ")


@pytest.mark.parametrize("name", ["string", "ragged", "1e9-angles"])
@pytest.mark.parametrize("command", ["reconstruct", "phantom", "job", "spark"])
def test_bad_geometry_is_one_line_in_every_ct_command(ct, command, name):
    argv, prefix, status = ct_commands(ct, _geometry_file(ct, name))[command]
    refused(run(argv, str(ct)), GEOMETRIES[name][1], prefix, status)


def test_geometry_files_and_options_are_bounded(ct):
    big = ct / "big.json"
    with open(big, "wb") as f:
        f.truncate((16 << 20) + 1)
    refused(run(ct_commands(ct, big)["plan"][0], str(ct)), "big.json: over 16,777,216 bytes: too large")
    (ct / "deep.json").write_text("[" * 100000)
    refused(run(ct_commands(ct, ct / "deep.json")["plan"][0], str(ct)), "deep.json: not JSON a geometry can be")
    for args, message in ((["--angles", "1000000000"], "--angles must be a whole number from 1 to 65,536"),
                          (["--voxels", "1000000000"], "--voxels must be a whole number from 1 to 16,384"),
                          (["--voxel-size", "nan"], "--voxel-size must be a number over 0 and at most 1e+06, not nan"),
                          (["--arc", "inf"], "--arc must be a finite number, not inf")):
        refused(run(["-m", "gpumr", "ct", "geometry", "-o", str(ct / "never.json"), *args], str(ct)), message)
    for args, message in ((["--noise-i0", "0"], "--noise-i0 must be a number over 0"),
                          (["--noise-i0", "1e30"], "--noise-i0 must be a number over 0 and at most 1e+15"),
                          (["--noise-i0", "100", "--seed", "-3"], "--seed must be a whole number of at least 0")):
        refused(run(ct_commands(ct, ct / "p.geometry.json", extra=args)["phantom"][0], str(ct)), message)
    assert not any(n.startswith("never") for n in os.listdir(ct))


@pytest.mark.parametrize("command", ["reconstruct", "job", "spark"])
def test_a_nan_pixel_refuses_its_projection_naming_it_and_its_angle(ct, command):
    argv, prefix, status = ct_commands(ct, projections="nan.seq")[command]
    refused(run(argv, str(ct)), "proj_0005.tif: projection 5 (angle 150.00 degrees) has 1 NaN or infinite pixel(s)",
            prefix, status)


def test_a_projection_header_is_checked_before_its_pixels(ct):
    """A record whose header claims 100000x100000 pixels (40 GB) in a few bytes is refused unread."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (100000, 100000)})
    records = [(r.key, r.value) for r in seqfile.Reader(str(ct / "p.seq"))]
    with seqfile.Writer(str(ct / "bomb.seq")) as w:
        for i, (key, value) in enumerate(records):
            w.append("proj_0003.npy" if i == 3 else key, buf.getvalue() + bytes(64) if i == 3 else value)
    (ct / "bomb.geometry.json").write_bytes((ct / "p.geometry.json").read_bytes())
    for command in ("reconstruct", "job"):
        argv, prefix, status = ct_commands(ct, projections="bomb.seq")[command]
        refused(run(argv, str(ct)), "proj_0003.npy: projection is 100000x100000, the geometry's detector is 19x19",
                prefix, status)


def test_a_slab_over_its_limit_is_refused(ct):
    """Slabs of a 16 x 8192 x 8192 volume: 16 slices (2**30 voxels) is over the slab limit, 4 is not."""
    g = json.loads((ct / "p.geometry.json").read_text())
    g.update(nVoxel=[16, 8192, 8192], dVoxel=[0.002, 0.002, 0.002])  # within the field of view
    (ct / "wide.geometry.json").write_text(json.dumps(g))
    plan = ["-m", "gpumr", "run", "backproject", "--projections", str(ct / "p.seq"), "--geometry",
            str(ct / "wide.geometry.json"), "--dry-run"]
    refused(run([*plan, "--slab", "16", "-o", str(ct / "never")], str(ct)),
            "--slab: a slab of 16 slices of 8192x8192: 1,073,741,824 voxels, over the limit of 268,435,456")
    assert run([*plan, "--slab", "4", "-o", str(ct / "wide-plan")], str(ct)).returncode == 0
    refused(run(["-m", "gpumr", "spark", "backproject", "--projections", str(ct / "p.seq"), "--geometry",
                 str(ct / "wide.geometry.json"), "--slab", "16", "-o", str(ct / "never"), "--master", "local[1]"],
                str(ct)), "--slab: a slab of 16 slices")


def test_assemble_checks_each_slab_line_before_reading_its_array(tmp_path):
    """A line declaring a volume over the limits, or naming a file outside arrays/, is refused before any byte of a
    slab is read; a slab whose file holds less than its line says is refused by name."""
    from gpumr.io.outputs import Proof, digest, proof_path
    out = tmp_path / "out"
    (out / "arrays").mkdir(parents=True)
    np.save(out / "arrays" / "z00000.slab.npy", np.zeros((2, 8, 8), np.float32)[:1])
    # (its proof, as the job writes one: the slab is what gpumr wrote, its line is not)
    slab = "arrays/z00000.slab.npy"
    Proof(proof_path(str(out)), "gpumr run", [{slab: digest(str(out / slab))}]).save()

    def line(**value):
        slab = {"array": "arrays/z00000.slab.npy", "shape": [2, 8, 8], "dtype": "<f4"}
        slab.update(value.pop("slab", {}))
        return json.dumps("z00000") + "\t" + json.dumps({"z": [0, 2], "nz": 2, "slab": slab, **value}) + "\n"
    for text, message in ((line(nz=10 ** 9), "nz must be a whole number from 1 to 16,384"),
                          (line(slab={"shape": [2, 8, "x"]}), "shape must be a whole number"),
                          (line(slab={"array": "../../etc/passwd"}), "not a file of the output's arrays/"),
                          (line(slab={"dtype": "<f8"}), "not float32"),
                          (line(), "holds a float32 array of shape (1, 8, 8), not the slab 0-2 of 8x8")):
        (out / "part-00000").write_text(text)
        refused(run(["-m", "gpumr", "ct", "assemble", str(out), "-o", str(tmp_path / "v.npy")], str(tmp_path)),
                message)
        assert not (tmp_path / "v.npy").exists()
