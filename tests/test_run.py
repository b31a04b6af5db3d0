"""``gpumr run WORKLOAD --engine E``: what the mrjob engines and the launcher's plan add to the conformance suite.

Every engine's same bytes, one-line refusals and exit statuses, ``-q`` and
signals are tests/test_conformance.py's. Here: an output replaced or kept,
what a local job's tasks import, emr's ``--dry-run`` (the job and the
runner's settings resolved from conf/mrjob.emr.conf, without AWS), every
engine's ``--dry-run``, and the backprojection's slabs on the local engine.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ct_phantom, lines_of

import gpumr.conf
from gpumr.cli import main

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF_DIR = os.path.dirname(gpumr.conf.__file__)


def summary_of(stderr):
    said = [ln for ln in stderr.splitlines() if ln.startswith("gpumr: ") and " records: " in ln]
    assert len(said) == 1, stderr[-3000:]
    return said[0].split(" in ")[0]  # less the time


def gpumr(args, cwd, timeout=600):
    """``python -m gpumr ARGS`` as its own process."""
    return subprocess.run([sys.executable, "-m", "gpumr", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def reference(packed, tmp_path_factory):
    """The inline engine's output lines and summary (``gpumr run faces``'s default engine)."""
    out = tmp_path_factory.mktemp("ref") / "out"
    proc = gpumr(["run", "faces", packed, "-o", str(out), "--device", "cpu", "--no-conf"], out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["_SUCCESS", "part-00000"] and os.path.exists(out.parent / ".out.gpumr")
    return lines_of(str(out)), summary_of(proc.stderr)


def check_same(reference, out, proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, summary = reference
    assert lines_of(str(out)) == want and len(want) == 12
    assert "_SUCCESS" in os.listdir(out) and os.path.exists(out.parent / f".{out.name}.gpumr")  # the proof
    assert summary_of(proc.stderr) == summary == "gpumr: 12 records: 12 on CPU, 0 on GPU, 0 bad"


def test_an_output_of_gpumr_is_replaced_and_one_it_did_not_make_is_kept(packed, reference, tmp_path):
    """An output of gpumr run is replaced (here the local engine's by the inline one's); one gpumr did not make is
    refused and kept."""
    check_same(reference, tmp_path / "local", gpumr(["run", "faces", packed, "-o", str(tmp_path / "local"), "--engine",
                                                      "local", "--device", "cpu", "--no-conf"], tmp_path))
    check_same(reference, tmp_path / "local", gpumr(["run", "faces", packed, "-o", str(tmp_path / "local"),
                                                      "--device", "cpu", "--no-conf"], tmp_path))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    proc = gpumr(["run", "faces", packed, "-o", str(tmp_path / "mine"), "--no-conf"], tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "gpumr run did not make" in proc.stderr
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_a_local_job_leaves_pyspark_unimported_and_importable(packed, reference, tmp_path):
    """mrjob's runners import pyspark, where installed, only to find spark-submit (0.1-0.2 s of a local job's
    start); gpumr hides it from them. The job's output is the reference's, and the same process imports pyspark
    afterwards as usual."""
    pytest.importorskip("pyspark", reason="pyspark (the dev extra) is what mrjob's runners would import")
    code = ("import sys; from gpumr.cli import main; rc = main(sys.argv[1:]); "
            "print('pyspark' in sys.modules, 'mrjob.bin' in sys.modules); import pyspark; print(pyspark.__name__); "
            "sys.exit(rc)")
    out = tmp_path / "local"
    proc = subprocess.run([sys.executable, "-c", code, "run", "faces", packed, "-o", str(out), "--engine", "local",
                           "--device", "cpu", "--no-conf"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    check_same(reference, out, proc)
    assert proc.stdout.split() == ["False", "True", "pyspark"]


TASK_IMPORTS = """
import atexit, json, os, sys
def _said():
    if sys.argv and os.path.basename(sys.argv[0]) == "task.py":
        names = sorted(m for m in sys.modules if m.split(".")[0] in ("mrjob", "distutils", "setuptools"))
        with open(os.path.join(os.environ["GPUMR_TEST_TASK_IMPORTS"], f"{os.getpid()}.json"), "w") as f:
            json.dump(names, f)
atexit.register(_said)
"""


def test_a_local_jobs_tasks_import_no_mrjob_and_write_what_mrjobs_job_wrote(packed, reference, tmp_path):
    """The task script speaks Hadoop Streaming's protocol itself: a task of mrjob's local runner imports neither
    mrjob nor the distutils it needs (0.15 s of each task's start), and its output and counters are the inline
    runner's, whose tasks are mrjob's job in the launcher's process (the reference)."""
    hook, said = tmp_path / "hook", tmp_path / "said"
    hook.mkdir()
    said.mkdir()
    (hook / "sitecustomize.py").write_text(TASK_IMPORTS)
    out = tmp_path / "local"
    proc = subprocess.run([sys.executable, "-m", "gpumr", "run", "faces", packed, "-o", str(out), "--engine", "local",
                           "--device", "cpu", "--no-conf"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(hook), GPUMR_TEST_TASK_IMPORTS=str(said)))
    check_same(reference, out, proc)
    tasks = [json.loads(p.read_text()) for p in said.iterdir()]
    assert len(tasks) == 2 and all(names == [] for names in tasks), tasks  # (two map tasks: local's default)


def test_emr_dry_run_resolves_the_config_without_running_anything(s3, packed, capsys, monkeypatch, tmp_path):
    """The plan (inputs listed at the S3 server, the output checked) and mrjob's EMR runner's settings, no secret."""
    pytest.importorskip("boto3", reason="mrjob's EMR runner needs boto3 (pip install '.[dev]')")
    from s3server import BUCKET
    for name in sorted(os.listdir(packed)):
        s3.put(f"emrdry/frames/{name}", open(os.path.join(packed, name), "rb").read())
    monkeypatch.chdir(CHECKOUT)  # the config names the bootstrap and the sdist from the checkout's root
    conf = tmp_path / "secret.conf"  # the EMR config with secrets a user may keep in it
    conf.write_text(open(os.path.join(CONF_DIR, "mrjob.emr.conf")).read().replace(
        "    region: us-east-1\n", "    region: us-east-1\n    aws_secret_access_key: SECRETKEY123\n"
                                    "    aws_session_token: TOKEN456\n").replace(
        "      OMP_NUM_THREADS: '1'\n", "      OMP_NUM_THREADS: '1'\n      API_PASSWORD: hunter2\n", 1))
    assert main(["run", "faces", f"s3://{BUCKET}/emrdry/frames/", "-o", f"s3://{BUCKET}/emrdry/out/", "--engine", "emr",
                 "--dry-run", "-c", str(conf), "--cloud-tmp-dir", f"s3://{BUCKET}/tmp/", "--device", "gpu",
                 "--scale-factor", "1.2"]) == 0
    said = capsys.readouterr().out
    for secret in ("SECRETKEY123", "TOKEN456", "hunter2"):
        assert secret not in said
    lines = said.splitlines()
    assert lines[0] == "gpumr run: workload faces (built in): 2 task(s) over 2 input file(s), " \
                       f"{sum(os.path.getsize(os.path.join(packed, n)) for n in os.listdir(packed))} bytes"
    assert lines[1].startswith(f"gpumr run: engine emr; output s3://{BUCKET}/emrdry/out; --device gpu")
    prefix = "gpumr run: mrjob's settings (secrets hidden): "
    settings = json.loads(next(ln for ln in lines if ln.startswith(prefix))[len(prefix):])
    o = settings["options"]
    assert settings["runner"] == "emr" and settings["python_bin"] == ["/opt/gpumr/venv/bin/python"]
    assert o["release_label"].startswith("emr-7") and o["cloud_tmp_dir"] == f"s3://{BUCKET}/tmp/"
    assert o["aws_secret_access_key"] == o["aws_session_token"] == "***"
    assert o["cmdenv"]["GPUMR_SCHEDULER_SOCKET"] == "***" and o["cmdenv"]["API_PASSWORD"] == "***"
    types = [g["InstanceType"] for g in o["instance_groups"] if g["InstanceRole"] != "MASTER"]
    assert types and all(t.split(".")[0] in ("g4dn", "g5") for t in types)
    # The checks run before: a wrong option is the same one line as on every engine.
    assert main(["run", "faces", f"s3://{BUCKET}/emrdry/frames/", "-o", f"s3://{BUCKET}/emrdry/out/", "--engine",
                 "emr", "--dry-run", "-c", str(conf), "--scale-factor", "nan"]) == 1
    assert capsys.readouterr().err == "gpumr: error: --scale-factor must be a number over 1 and at most 100, not nan\n"


def test_dry_run_on_every_engine_runs_nothing(packed, tmp_path, capsys):
    """``--dry-run`` was an AttributeError called a bug on the inline engine: on each, the plan, and nothing made."""
    for engine in ("inline", "local", "dask", "spark"):
        assert main(["run", "faces", packed, "-o", str(tmp_path / "out"), "--engine", engine, "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("gpumr run: workload faces (built in): 2 task(s) over 2 input file(s)"), out
        assert f"engine {engine}; output {tmp_path / 'out'}" in out
    assert os.listdir(tmp_path) == []


def test_backproject_plans_its_slabs_on_local(tmp_path):
    """The workload makes its own records (the slabs); the mrjob job reads them from the launcher's task files."""
    seq, direct = ct_phantom(tmp_path, 12, 16)
    proc = gpumr(["run", "backproject", "--projections", seq, "--slab", "5", "-o", str(tmp_path / "out"),
                  "--engine", "local", "--device", "cpu", "--no-conf"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary_of(proc.stderr) == "gpumr: 3 records: 3 on CPU, 0 on GPU, 0 bad"
    assert main(["ct", "assemble", str(tmp_path / "out"), "-o", str(tmp_path / "vol.npy")]) == 0
    import numpy as np
    assert np.allclose(np.load(tmp_path / "vol.npy"), direct, rtol=1e-6, atol=1e-6)
