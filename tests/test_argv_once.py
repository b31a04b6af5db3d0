"""A job's command line is parsed once, mrjob's job is never built to run it, the CT geometry is loaded once per
process (issue 67): counted with cProfile in a process of its own; and the runner gpumr makes without an ``MRJob``
is the one mrjob's ``make_runner`` makes."""

import json
import os
import subprocess
import sys

import pytest

from gpumr.cli import main

#: Runs ``gpumr ARGV`` (argv[1] as JSON) under cProfile; prints the exit status and the calls of the counted
#: functions as JSON.
COUNT = r"""
import cProfile, json, pstats, sys
from gpumr.cli import main
profile = cProfile.Profile()
profile.enable()
status = main(json.loads(sys.argv[1]))
profile.disable()
calls = {"parse_known_args": 0, "MRJob.__init__": 0, "geometry.load": 0}
for (path, _, name), value in pstats.Stats(profile).stats.items():
    path = path.replace("\\", "/")
    if name == "parse_known_args":
        calls["parse_known_args"] += value[1]
    elif name == "__init__" and path.endswith("mrjob/job.py"):
        calls["MRJob.__init__"] += value[1]
    elif name == "load" and path.endswith("gpumr/ct/geometry.py"):
        calls["geometry.load"] += value[1]
print(json.dumps({"status": status, "calls": calls}))
"""


def counted(argv, folder):
    """``(exit status, {function: calls})`` of ``gpumr ARGV`` run in a new process in ``folder``."""
    proc = subprocess.run([sys.executable, "-c", COUNT, json.dumps([str(a) for a in argv])], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    return said["status"], said["calls"]


def lines_of(out):
    return [line for name in sorted(os.listdir(out)) if name.startswith("part-")
            for line in open(os.path.join(out, name), encoding="utf-8")]


@pytest.fixture(scope="module")
def few_frames(sample_frames, tmp_path_factory):
    """Four sample frames in one SequenceFile."""
    from gpumr.io.packing import pack
    d = tmp_path_factory.mktemp("few")
    (d / "frames").mkdir()
    for name in sorted(os.listdir(sample_frames))[:4]:
        os.link(os.path.join(sample_frames, name), d / "frames" / name)
    pack([str(d / "frames")], str(d / "frames.seq"), progress=False)
    return str(d / "frames.seq")


def test_an_inline_job_parses_its_command_line_once_and_builds_no_mrjob(few_frames, tmp_path):
    """``gpumr run faces ... --engine inline``: the ``gpumr`` command's parser and the workload's, one parse each
    (``parse_args`` is one ``parse_known_args``); mrjob's runner made without an ``MRJob``, its tasks run in this
    process without one; every record out once."""
    status, calls = counted(["run", "faces", few_frames, "-o", tmp_path / "out", "--engine", "inline", "--device",
                             "cpu", "-q"], tmp_path)
    assert status == 0
    assert calls["parse_known_args"] <= 2, calls
    assert calls["MRJob.__init__"] <= 1, calls
    lines = lines_of(tmp_path / "out")
    assert len(lines) == 4 and all('"device": "cpu"' in line for line in lines)


def test_an_inline_backproject_job_loads_the_geometry_once(tmp_path):
    """The CT geometry: read once in the launcher's process (its check, its plan and the inline tasks)."""
    assert main(["ct", "geometry", "-o", str(tmp_path / "g.json"), "--voxels", "12", "--angles", "12", "-q"]) == 0
    assert main(["ct", "phantom", "--geometry", str(tmp_path / "g.json"), "-o", str(tmp_path / "proj.seq"),
                 "-q"]) == 0
    status, calls = counted(["run", "backproject", "--projections", tmp_path / "proj.seq", "--slab", "4", "-o",
                             tmp_path / "out", "--engine", "inline", "--device", "cpu", "-q"], tmp_path)
    assert status == 0
    assert calls["geometry.load"] == 1, calls
    assert calls["parse_known_args"] <= 2 and calls["MRJob.__init__"] == 0, calls
    assert len(lines_of(tmp_path / "out")) == 3  # (12 slices in slabs of 4)


CASES = [
    ("inline", [("--gpumr-spec", "SPEC"), ("--reducers", "1"), ("--gpumr-side-dir", "SIDE")], {}, []),
    ("local", [("--gpumr-spec", "SPEC"), ("--reducers", "3"), ("--cat-reducer", True), ("--gpumr-side-dir", "SIDE")],
     {}, ["--jobconf", "a=b", "-D", "c=d", "--num-cores", "2", "--no-conf"]),
    ("hadoop", [("--gpumr-spec", "SPEC"), ("--reducers", "0"), ("--hadoop-splits", True), ("--cat-reducer", True)],
     {"cleanup_on_failure": ["ALL"], "upload_files": ["SIDE/a", "SIDE/b"]},
     ["-c", "CONF", "--files", "SIDE/c", "--local-tmp-dir", "THEIRS", "--hadoop-args=-verbose", "--cmdenv", "X=1"]),
]
#: mrjob's own switches for gpumr's settings of the runner (``ours``).
SWITCHES = {"local_tmp_dir": "--local-tmp-dir", "bootstrap_mrjob": "--no-bootstrap-mrjob",
            "cleanup_on_failure": "--cleanup-on-failure", "upload_files": "--files"}


@pytest.mark.parametrize("alias, task_args, ours, given", CASES, ids=[c[0] for c in CASES])
def test_the_runner_is_made_as_mrjobs_make_runner_makes_it(tmp_path, alias, task_args, ours, given):
    """The keywords gpumr gives a runner's class, without an ``MRJob``, are the ones ``MRJob.make_runner`` gives
    for the same command line (gpumr's settings, then mrjob's options as given)."""
    from gpumr.engines.mrjob.job import MRWorkload
    from gpumr.engines.mrjob.runner import runner_kwargs, runner_settings

    def at(text):
        for word in ("SPEC", "SIDE", "CONF", "THEIRS"):
            text = text.replace(word, str(tmp_path / word.lower()))
        return text
    (tmp_path / "conf").write_text("runners: {}\n")
    task_args = [(switch, at(value) if isinstance(value, str) else value) for switch, value in task_args]
    ours = {"local_tmp_dir": str(tmp_path / "mrjob"), "bootstrap_mrjob": False,
            **{k: [at(v) for v in value] if isinstance(value, list) else value for k, value in ours.items()}}
    given = [at(a) for a in given]
    inputs, out = [str(tmp_path / "tasks-00000.gz"), str(tmp_path / "tasks-00001.gz")], str(tmp_path / "out")
    args = ["-r", alias]
    for switch, value in task_args:
        args += [switch] if value is True else [switch, value]
    for dest, value in ours.items():
        if value is False:
            args.append(SWITCHES[dest])
        else:
            args += [a for v in (value if isinstance(value, list) else [value]) for a in (SWITCHES[dest], v)]
    mrjobs = MRWorkload([*args, *given, "--output-dir", out, *inputs])._runner_kwargs()
    mine = runner_kwargs(task_args, inputs, out, runner_settings(given, ours))
    for name in ("mrjob_cls", "stdin"):  # (the inline runner's job class: none; stdin: read by no gpumr job)
        mrjobs.pop(name, None)
    assert mine == mrjobs


def test_gpumrs_table_of_mrjobs_options_is_mrjobs():
    """The run parser declares mrjob's runner options from gpumr's copy of their table (a job of another engine
    imports no mrjob): it holds what mrjob's own table holds, flags and options with a value alike."""
    from gpumr.engines.mrjob.runner import runner_switches
    from gpumr.engines.mrjob.switches import FLAGS, VALUED
    table = runner_switches()
    assert FLAGS == {s for strings, value in table if not value for s in strings}
    assert VALUED == {s for strings, value in table if value for s in strings}


def test_mrjobs_options_are_declared_kept_as_given_and_refused_elsewhere(few_frames, tmp_path, capsys):
    """mrjob's runner options are options of the one parser: kept as given for mrjob's runners (a value that starts
    with ``-`` as ``--opt=VALUE``), checked by mrjob's parser before anything runs, refused by another engine in
    one line; ``--help`` does not list them."""
    from gpumr.launch.parser import parse_run
    o = parse_run(["faces", few_frames, "-o", "out", "--jobconf", "a=b", "--hadoop-args=-verbose", "--no-conf",
                   "-c", "x.conf"]).options
    assert o.framework_args == ["--jobconf", "a=b", "--hadoop-args=-verbose", "--no-conf", "-c", "x.conf"]
    assert main(["run", "faces", few_frames, "-o", str(tmp_path / "out"), "--engine", "dask", "--jobconf",
                 "a=b"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpumr: error: --jobconf: an option of mrjob's runners (--engine inline, local, hadoop, emr); "
                   "--engine dask does not take it"]
    assert main(["run", "faces", few_frames, "-o", str(tmp_path / "out"), "--num-cores", "many"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--num-cores" in err[0] and "many" in err[0]
    assert not (tmp_path / "out").exists()
    assert main(["run", "faces", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--jobconf" in shown and "--hadoop-streaming-jar" not in shown  # (the epilog names a few)
