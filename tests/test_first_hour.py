"""What a new user meets in the first hour: commands that work from anywhere, clear errors, progress."""

import json
import os
import subprocess
import sys

import pytest

import seqfile
from gpumr.cli import build_parser, main
from gpumr.io.packing import pack
from gpumr.launch.job import run_job

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def packed(sample_frames, tmp_path_factory):
    seq = str(tmp_path_factory.mktemp("first") / "frames.seq")
    pack([sample_frames], seq, progress=False)
    return seq


def _run(args, cwd, **kw):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


def _lines(out_dir):
    return [ln for n in sorted(os.listdir(out_dir)) if n.startswith("part-")
            for ln in open(os.path.join(out_dir, n), encoding="utf-8").read().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["repository root", "another folder", "script in a checkout"])
def test_the_job_runs_from_anywhere_and_ends_with_a_summary(packed, tmp_path, where):
    out = str(tmp_path / "out")
    if where == "script in a checkout":
        args, cwd = [os.path.join(REPO, "jobs", "face_detect.py")], REPO
    else:
        args, cwd = ["-m", "gpumr.jobs.face_detect"], REPO if where == "repository root" else str(tmp_path)
    proc = _run([*args, "-r", "local", packed, "--output-dir", out, "--device", "cpu"], cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_lines(out)) == 12
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith("gpumr: 12 records: 12 on CPU, 0 on GPU, 0 bad in ") and "records/s" in summary


def test_gpumr_module_runs_from_the_repository_root():
    proc = _run(["-m", "gpumr", "--version"], REPO)
    assert proc.returncode == 0 and proc.stdout.startswith("gpumr ")


def test_a_folder_of_jpegs_is_a_one_line_error_before_any_task(sample_frames, tmp_path):
    proc = _run(["-m", "gpumr.jobs.face_detect", "-r", "local", sample_frames, "--output-dir", str(tmp_path / "o")],
                str(tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "no SequenceFile among the inputs" in err[0] and "a JPEG image" in err[0]
    assert "gpumr pack" in err[0] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("given, hint", [(".", "gpumr pack . -o ../frames.seq"),
                                         ("./", "gpumr pack ./ -o ../frames.seq"),
                                         ("..", "gpumr pack .. -o ../../frames.seq")])
def test_the_hint_to_pack_the_current_folder_names_a_file_beside_it(sample_frames, tmp_path, given, hint):
    """Before, ``.`` was hinted ``gpumr pack . -o ..seq`` (a hidden file named by dots)."""
    frames = tmp_path / "top" / "frames"
    os.makedirs(frames / "inner")
    for name in sorted(os.listdir(sample_frames))[:2]:
        os.link(os.path.join(sample_frames, name), frames / name)
    cwd = frames if given != ".." else frames / "inner"
    proc = _run(["-m", "gpumr", "run", "faces", given, "-o", str(tmp_path / "o")], str(cwd))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and f"first: {hint} (see" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--cascade", "no_such_cascade.xml"], "no_such_cascade.xml: no such cascade file"),
    (["--scale-factor", "1.0"], "--scale-factor must be a number over 1 and at most 100, not 1.0"),
    (["--reducers", "-1"], "--reducers must be a whole number from 0 to 10,000, not -1"),
])
def test_bad_job_options_are_one_line_errors(packed, tmp_path, args, message):
    proc = _run(["-m", "gpumr.jobs.face_detect", "-r", "inline", packed, "--output-dir", str(tmp_path / "o"), *args],
                str(tmp_path))
    assert proc.returncode == 1, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpumr: error: ") and message in err[0]


def test_a_bundled_cascade_is_taken_by_name_and_shipped(packed, sample_frames, tmp_path):
    import cv2
    import numpy as np

    from gpumr.faces.cpu import detect, load_cascade
    from gpumr.jobs.face_detect import MRFaceDetect
    run_job(MRFaceDetect, [packed], str(tmp_path / "out"), "inline", ["--cascade", "haarcascade_frontalface_alt2.xml"])
    got = {json.loads(k): json.loads(v)["faces"] for k, v in (ln.split("\t") for ln in _lines(str(tmp_path / "out")))}
    clf = load_cascade("haarcascade_frontalface_alt2.xml")
    want = {n: detect(clf, cv2.imdecode(np.fromfile(os.path.join(sample_frames, n), np.uint8), cv2.IMREAD_GRAYSCALE))
            for n in os.listdir(sample_frames)}
    assert got == want and want != {n: [] for n in want}


def test_the_default_runner_honours_reducers_too(packed, tmp_path):
    """Without ``-r`` (mrjob's default: the inline runner) ``--reducers 1`` gave one part per piece mrjob cut."""
    from gpumr.jobs.face_detect import MRFaceDetect
    out = str(tmp_path / "out")
    run_job(MRFaceDetect, [packed], out, "inline", ["--device", "cpu"])
    assert sorted(os.listdir(out)) == ["_SUCCESS", "part-00000"]
    keys = [json.loads(ln.split("\t")[0]) for ln in _lines(out)]
    assert keys == sorted(keys) and len(keys) == 12


@pytest.mark.slow
@pytest.mark.parametrize("reducers, most", [(1, 1), (3, 3)])
def test_reducers_are_honoured_by_the_local_runner(packed, tmp_path, reducers, most):
    from gpumr.jobs.face_detect import MRFaceDetect
    out = str(tmp_path / "out")
    run_job(MRFaceDetect, [packed], out, "local", ["--reducers", str(reducers), "--device", "cpu"])
    parts = [n for n in os.listdir(out) if n.startswith("part-")]
    assert 1 <= len(parts) <= most and (reducers != 1 or parts == ["part-00000"])
    keys = [json.loads(ln.split("\t")[0]) for ln in _lines(out)]
    assert keys == sorted(keys) and len(keys) == 12


@pytest.mark.slow
def test_local_run_shows_progress_while_it_runs(packed, tmp_path, monkeypatch, capfd):
    """The job's own progress folder goes at the end; what other runs on this machine keep is not looked at."""
    import tempfile

    from gpumr.tasks import progress
    monkeypatch.setattr(progress, "LINE_EVERY", 0.0)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    other = temp / "gpumr-job-of-another-run"  # another gpumr run on this machine, still going
    (other / "progress").mkdir(mode=0o700, parents=True)
    (other / "progress" / "task-1-0").write_text("x")
    assert main(["-v", "run", "faces", packed, "-o", str(tmp_path / "out"), "--engine", "local", "--no-conf",
                 "--device", "cpu"]) == 0  # (-v: where stderr is no terminal, progress lines are debug lines)
    err = capfd.readouterr().err
    shown = [ln for ln in err.splitlines() if ln.startswith("gpumr: debug: faces: ") and "records so far" in ln]
    assert shown and all("records so far" in ln and "records/s" in ln for ln in shown)
    assert err.strip().splitlines()[-1].startswith("gpumr: 12 records: 12 on CPU")
    assert os.listdir(temp) == ["gpumr-job-of-another-run"]  # its own job folder is gone
    assert (other / "progress" / "task-1-0").read_text() == "x"  # the other run's is left alone


def test_task_progress_files_add_up(tmp_path):
    from gpumr.tasks.progress import TaskProgress, read_totals
    a, b = TaskProgress(str(tmp_path), every=0), TaskProgress(str(tmp_path), every=0)
    for _ in range(5):
        a.count("records on CPU")
    b.count("records on GPU", 3)
    b.count("bad records")
    b.count("CPU milliseconds", 99)  # not a progress field
    b.set_bytes(1234)
    a.close()
    b.close()
    t = read_totals(str(tmp_path))
    assert (t["records on CPU"], t["records on GPU"], t["bad records"], t["input bytes"]) == (5, 3, 1, 1234)
    assert TaskProgress(None).count("records on CPU") is None  # no folder: nothing written anywhere


def test_backprojection_job_needs_its_projections(tmp_path):
    proc = _run(["-m", "gpumr.jobs.backproject", "-r", "inline", "--output-dir", str(tmp_path / "o")], str(tmp_path))
    assert proc.returncode == 1 and "--projections is required" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "p.seq").write_bytes(b"\xff\xd8\xff\xe0 not a SequenceFile")
    proc = _run(["-m", "gpumr.jobs.backproject", "-r", "inline", "--projections", str(tmp_path / "p.seq"),
                 "--output-dir", str(tmp_path / "o")], str(tmp_path))
    assert proc.returncode == 1 and "p.seq: a JPEG image" in proc.stderr


def test_ct_flow_carries_one_geometry_file(tmp_path, capsys):
    import numpy as np
    d = tmp_path
    assert main(["ct", "phantom", "--voxels", "16", "--angles", "24", "-o", str(d / "proj.seq")]) == 0
    assert sorted(n for n in os.listdir(d) if not n.startswith(".")) == ["proj.geometry.json", "proj.seq"]
    assert main(["ct", "reconstruct", str(d / "proj.seq"), "--threads", "1", "-o", str(d / "direct.npy")]) == 0
    from gpumr.jobs.backproject import MRBackproject
    counts, _ = run_job(MRBackproject, [], str(d / "out"), "inline", ["--projections", str(d / "proj.seq"),
                                                                       "--slab", "5"])
    assert counts["records on CPU"] == 4
    assert main(["ct", "assemble", str(d / "out"), "-o", str(d / "vol.npy")]) == 0
    assert np.allclose(np.load(d / "vol.npy"), np.load(d / "direct.npy"), rtol=1e-6, atol=1e-6)


def test_phantom_noise_is_the_same_streamed_or_at_once(tmp_path):
    import numpy as np

    from gpumr.ct import geometry, phantom
    from gpumr.ct.projections import read_set
    g = geometry.simple(12, 6)
    assert main(["ct", "phantom", "--geometry", _saved(g, tmp_path), "-o", str(tmp_path / "p.seq"),
                 "--noise-i0", "1000", "--seed", "7"]) == 0
    streamed = read_set([str(tmp_path / "p.seq")], g)
    at_once = phantom.projections(g, noise_i0=1000, seed=7)
    assert np.array_equal(streamed, at_once) and not np.array_equal(at_once, phantom.projections(g))


def _saved(g, folder):
    path = str(folder / "g.json")
    g.save(path)
    return path


def test_probe_says_too_small_in_one_unit(monkeypatch, capsys):
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1:16GiB")
    assert main(["probe", "--memory", "20GiB"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "memory=17.2 GB free of 17.2 GB" in line and "too small: 17.2 GB in all, a task needs 21.5 GB" in line
    assert "busy" not in line and "bytes" not in line


def test_pack_codec_alone_compresses(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_bytes(b"a" * 5000)
    assert main(["pack", str(tmp_path / "src"), "-o", str(tmp_path / "g.seq"), "--codec", "gzip", "-q"]) == 0
    h = seqfile.Reader(str(tmp_path / "g.seq")).header
    assert h.compression == "BLOCK" and h.codec.endswith("GzipCodec")
    assert main(["pack", str(tmp_path / "src"), "-o", str(tmp_path / "n.seq"), "--codec", "gzip",
                 "--compression", "NONE", "-q"]) == 1
    assert "needs --compression RECORD or BLOCK" in capsys.readouterr().err


def test_cat_takes_a_folder_like_ls_and_info(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    for i in range(6):
        (tmp_path / "src" / f"f{i}.bin").write_bytes(bytes([i]) * (i + 1))
    assert main(["pack", str(tmp_path / "src"), "-o", str(tmp_path / "shards"), "--shards", "3", "-q"]) == 0
    capsys.readouterr()
    for key in ("f0.bin", "f5.bin"):
        proc = _run(["-m", "gpumr", "cat", str(tmp_path / "shards"), key], str(tmp_path))
        assert proc.returncode == 0 and proc.stdout == bytes([int(key[1])]).decode() * (int(key[1]) + 1)


def _actions(parser, path=()):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, path + (name,))
        else:
            yield path, parser, action


def test_every_option_has_plain_help():
    for path, parser, action in _actions(build_parser()):
        if action.dest in ("help", "version", "func"):
            continue
        assert action.help, f"gpumr {' '.join(path)} {action.option_strings or action.dest}: no help text"
        assert "``" not in action.help and "``" not in (parser.description or ""), (path, action.dest)


def test_every_job_option_has_help():
    from gpumr.jobs.backproject import MRBackproject
    from gpumr.jobs.face_detect import MRFaceDetect
    for cls in (MRFaceDetect, MRBackproject):
        job = cls(args=[])
        for dest in job._passthru_arg_dests | job._file_arg_dests:
            action = next(a for a in job.arg_parser._actions if a.dest == dest)
            assert action.help and "``" not in action.help, (cls.__name__, dest)


def test_a_bug_is_not_dressed_up_as_a_user_error(monkeypatch, capsys):
    """A bug is one line too (a traceback may print a secret), but it says it is one and how to see where."""
    from gpumr.cli import seqfiles

    def broken(args):
        raise ValueError("high <= 0")
    monkeypatch.setattr(seqfiles, "cmd_sample", broken)
    assert main(["sample", "/nonexistent"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("gpumr: error: ValueError: high <= 0 (an unexpected error, a bug")
    assert "--debug" in err[0]
    assert main(["--debug", "sample", "/nonexistent"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_backprojection_kernel_constants_come_from_the_kernel_source():
    import numpy as np

    from gpumr.ct import geometry
    from gpumr.ct.backproject import pad
    from gpumr.ct.backproject_gpu import SlabBackprojector
    from gpumr.devices.nvml import simulated_gpus
    from gpumr.gpu import kernels
    consts = kernels.defines("backproject")
    g = geometry.simple(8, 6)
    st = SlabBackprojector(pad(np.ones((6, *g.nDetector), np.float32)), g).state(simulated_gpus("1")[0])
    assert (st["zb"], st["max_angles"]) == (consts["ZB"], consts["MAX_ANGLES"]) == (8, 2048)
