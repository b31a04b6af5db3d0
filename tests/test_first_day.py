"""A new user's first day (issue 66): flags as documented on every command, messages that point the right way,
warnings said once about the user's own file, and a failure that stays one line however long the job ran, beside
other work on the machine."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ct_phantom

from gpumr.cli import main


@pytest.fixture
def busy_loops():
    """Two busy loops beside the test (a CI machine running other work: load of two or more on its cores)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for p in loops:
        p.kill()
        p.wait(30)


def gpumr(args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


# ---- -q and -v as documented (finding 7) ------------------------------------------------------------------
def test_q_before_the_command_is_as_quiet_as_after_it(sample_frames, tmp_path, capsys):
    """``gpumr -q pack`` printed its closing line where ``gpumr pack ... -q`` did not (pack's own -q undid it)."""
    for argv in (["-q", "pack", sample_frames, "-o", str(tmp_path / "a.seq")],
                 ["pack", sample_frames, "-o", str(tmp_path / "b.seq"), "-q"],
                 ["-q", "unpack", str(tmp_path / "a.seq"), "-d", str(tmp_path / "a")],
                 ["unpack", str(tmp_path / "b.seq"), "-d", str(tmp_path / "b"), "-q"]):
        assert main(argv) == 0
        assert capsys.readouterr() == ("", ""), argv
    assert sorted(os.listdir(tmp_path / "a")) == sorted(os.listdir(sample_frames))


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_v_shows_each_tasks_start_and_end_on_mrjobs_runners_here(packed, tmp_path, capfd, engine):
    """``-v`` promises each task's start and end: Dask said them, the inline and local runners' tasks said them
    into mrjob's scratch files, which were gone before the launcher read them."""
    assert main(["-v", "run", "faces", packed, "-o", str(tmp_path / "out"), "--engine", engine, "--device", "cpu",
                 "--no-conf"]) == 0
    err = capfd.readouterr().err
    started = re.findall(r"^gpumr: debug: task (\S+) started$", err, re.M)
    done = re.findall(r"^gpumr: debug: task (\S+) done: ", err, re.M)
    assert started and sorted(started) == sorted(done), err
    assert err.strip().splitlines()[-1].startswith("gpumr: 12 records: 12 on CPU")


# ---- "did you mean" and defaults in the help (findings 7, 8, 9) ----------------------------------------------
@pytest.mark.parametrize("argv, meant", [
    (["pakc", "x"], "(did you mean pack?)"),
    (["run", "face", "in.seq", "-o", "o"], "(did you mean faces?)"),
    (["run", "faces", "in.seq", "-o", "o", "--scale-factr", "2"], "(did you mean --scale-factor?)"),
    (["run", "faces", "in.seq", "-o", "o", "--engine", "sprak"], "(did you mean spark?)"),
    (["run", "faces", "in.seq", "-o", "o", "--engine", "local", "--split-sise=64KiB"], "(did you mean --split-size?)"),
    (["pack", "in/", "-o", "o.seq", "--shrads", "3"], "(did you mean --shards?)"),
    (["ct", "geometry", "-o", "g.json", "--voxle-size", "2"], "(did you mean --voxel-size?)"),
    (["ct", "geometri", "-o", "g.json"], "(did you mean geometry?)"),
])
def test_a_misspelt_name_gets_did_you_mean(tmp_path, monkeypatch, capsys, argv, meant):
    monkeypatch.chdir(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and meant in err, err


OPTIONED = '''
from gpumr import Option, Workload


class Sharp(Workload):
    name = "sharp"
    options = (Option("--ksize", "the aperture", type=int, default=3, least=1, most=31),
               Option("--mode", "how", choices=["a", "b"], default="a"))

    def cpu(self, key, image, o):
        return {}
'''


def test_every_option_help_says_its_default(tmp_path, monkeypatch, capsys):
    """A workload option's help showed no default (``--ksize``: "the aperture"); nor did every command's."""
    import argparse

    from gpumr.cli import build_parser
    from gpumr.launch.parser import run_parser
    from gpumr.workloads import BUILT_IN, find, load
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sharp.py").write_text(OPTIONED)
    assert main(["run", "sharp.py:Sharp", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--ksize KSIZE the aperture (default 3)" in shown and "how (default a)" in shown

    def unsaid(parser, where):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from unsaid(sub, f"{where} {name}")
            elif (a.option_strings and isinstance(a.help, str) and a.help != argparse.SUPPRESS
                  and a.default not in (None, False, [], argparse.SUPPRESS) and "default" not in a.help):
                yield f"{where} {a.option_strings[-1]}"
    parsers = [(build_parser(), "gpumr")] + [(run_parser(load(find(n))), f"gpumr run {n}") for n in BUILT_IN]
    assert [name for p, where in parsers for name in unsaid(p, where)] == []


# ---- messages that point the right way (finding 8) ------------------------------------------------------
def test_a_file_that_is_no_sequencefile_gets_the_right_fix(sample_frames, tmp_path, monkeypatch, capsys):
    """A CT geometry given as the input suggested ``gpumr pack . -o ../NAME.seq`` (the whole folder, into the
    one above); an image in the current folder, the same."""
    work = tmp_path / "scan"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["ct", "geometry", "-o", "scan.geometry.json", "--voxels", "8", "--angles", "8", "-q"]) == 0
    assert main(["run", "faces", "scan.geometry.json", "-o", "out"]) == 1
    err = capsys.readouterr().err
    assert "(a CT geometry (JSON)); a CT geometry is read by gpumr run backproject --projections SEQ --geometry" \
        in err and "gpumr pack" not in err and "see: gpumr help pack-first" not in err
    (work / "photo.jpg").write_bytes((open(os.path.join(sample_frames, sorted(os.listdir(sample_frames))[0]), "rb")
                                      .read()))
    assert main(["run", "faces", "photo.jpg", "-o", "out"]) == 1
    err = capsys.readouterr().err
    assert "(a JPEG image); pack files first: gpumr pack photo.jpg -o photo.seq" in err and "../" not in err
    assert main(["run", "faces", str(sample_frames), "-o", "out"]) == 1
    assert f"pack files first: gpumr pack {sample_frames} -o {sample_frames}.seq" in capsys.readouterr().err


# ---- unpack's proof outside the folder it writes (finding 9) --------------------------------------------
def test_unpack_keeps_its_proof_beside_the_folder_so_packing_it_again_is_quiet(sample_frames, tmp_path, capsys):
    seq, out = str(tmp_path / "in.seq"), tmp_path / "frames"
    assert main(["pack", sample_frames, "-o", seq, "-q"]) == 0
    assert main(["unpack", seq, "-d", str(out), "-q"]) == 0
    assert sorted(os.listdir(out)) == sorted(os.listdir(sample_frames))  # nothing of gpumr's in the folder
    assert (tmp_path / ".frames.gpumr").is_file()
    assert main(["pack", str(out), "-o", str(tmp_path / "again.seq")]) == 0
    assert capsys.readouterr().err == ""  # (it warned: "skipped frames/.gpumr: gpumr's proof ...")
    # The proof beside vouches as the one inside did: --force replaces gpumr's files, never one changed since.
    (out / sorted(os.listdir(out))[0]).write_bytes(b"mine now")
    assert main(["unpack", seq, "-d", str(out), "--force", "-q"]) == 1
    assert "gpumr did not write it (or it changed since" in capsys.readouterr().err
    assert (out / sorted(os.listdir(out))[0]).read_bytes() == b"mine now"


def test_a_proof_an_earlier_unpack_kept_inside_moves_beside(sample_frames, tmp_path, capsys):
    """A folder an earlier gpumr unpacked (its proof at DIR/.gpumr) is still gpumr's: --force replaces its files,
    and the proof moves out of the folder."""
    from gpumr.io.outputs import FOLDER_PROOF
    seq, out = str(tmp_path / "in.seq"), tmp_path / "frames"
    assert main(["pack", sample_frames, "-o", seq, "-q"]) == 0
    assert main(["unpack", seq, "-d", str(out), "-q"]) == 0
    os.rename(tmp_path / ".frames.gpumr", out / FOLDER_PROOF)  # where gpumr 0.1 kept it
    assert main(["unpack", seq, "-d", str(out), "--force"]) == 0
    assert capsys.readouterr().err == ""
    assert not (out / FOLDER_PROOF).exists() and (tmp_path / ".frames.gpumr").is_file()
    assert sorted(os.listdir(out)) == sorted(os.listdir(sample_frames))


# ---- CI's log names the skipped tests (finding 9) ---------------------------------------------------------
def test_the_test_target_ends_with_the_skipped_tests_and_why():
    """``make test`` (CI's command) runs pytest with ``-rs``: its log ends with each skipped test and its reason."""
    makefile = os.path.join(os.path.dirname(__file__), os.pardir, "Makefile")
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", open(makefile).read(), re.M).group(1)
    pytest_line = next(ln for ln in recipe.splitlines() if "pytest" in ln)
    assert re.search(r"\s-rs\b", pytest_line) and pytest_line.index("-rs") < pytest_line.index("$(PYTEST_ARGS)")


# ---- warnings said once, about the user's file (finding 3) --------------------------------------------------
FOV = "part of the volume lies outside the field of view"


def test_the_geometry_command_names_the_file_it_writes_in_its_warning(tmp_path, monkeypatch, capsys):
    """Getting started's geometry (a 32 mm cube, a detector that sees a 15.9 mm cylinder): the warning names the
    user's file, not "geometry"."""
    monkeypatch.chdir(tmp_path)
    assert main(["ct", "geometry", "-o", "scan.geometry.json", "--angles", "48", "--detector", "40", "--pitch",
                 "1.2", "--dso", "128", "--dsd", "192", "--voxels", "32"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpumr: warning: scan.geometry.json: {FOV} at 48 of 48 angles"), line


@pytest.mark.parametrize("engine", ["inline", "local", "dask"])
def test_a_geometry_warning_is_said_once_by_the_launcher_naming_the_users_file(tmp_path, engine):
    """The launcher checks the geometry and says what it finds; the tasks, which load the shipped copy (under an
    internal name), never say it again."""
    if engine == "dask":
        pytest.importorskip("distributed", reason="the Dask engine needs dask.distributed (the dev extra)")
    seq, _ = ct_phantom(tmp_path, 8, 12)
    geometry = tmp_path / "proj.geometry.json"
    import json
    g = json.loads(geometry.read_text())
    g["dDetector"] = [d * 0.6 for d in g["dDetector"]]  # a detector too small for the volume's corners
    geometry.write_text(json.dumps(g))
    proc = gpumr(["run", "backproject", "--projections", seq, "--slab", "4", "-o", tmp_path / "out", "--engine",
                  engine, "--device", "cpu", *(["--workers", "1"] if engine == "dask" else [])], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [ln for ln in proc.stderr.splitlines() if FOV in ln]
    assert len(warned) == 1 and warned[0].startswith(f"gpumr: warning: {geometry}: "), proc.stderr


# ---- a failure is one line, however long the job ran, beside busy loops (finding 4) ------------------------
SLOW_BREAK = """
import time
from gpumr import Workload


class SlowBreak(Workload):
    name = "slowbreak"

    def setup(self, o):
        time.sleep(2.5)
        raise RuntimeError("setup exploded after a while")

    def cpu(self, key, image, o):
        return {}
"""


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_a_job_that_fails_after_its_progress_lines_began_is_one_line(packed, tmp_path, monkeypatch, capfd,
                                                                     busy_loops, engine):
    """Progress lines come every LINE_EVERY seconds where stderr is no terminal (a log, CI): a job failing after
    one came said it before its error line. Made to come at once here, they are -v's only."""
    from gpumr.tasks import progress
    monkeypatch.setattr(progress, "LINE_EVERY", 0.0)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slowbreak.py").write_text(SLOW_BREAK)
    assert main(["run", "slowbreak.py:SlowBreak", packed, "-o", str(tmp_path / "out"), "--engine", engine,
                 "--no-conf"]) == 1
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpumr: error: a task of the {engine} job failed: ") and \
        "setup exploded after a while" in lines[0], lines
    assert sorted(os.listdir(tmp_path)) == ["slowbreak.py"]
