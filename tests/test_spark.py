"""The Spark engine on a real multi-process cluster (``local-cluster[2,1,1024]``: two executor JVMs).

One cluster serves the whole session (``sc`` in conftest). Its two workers
discover one simulated GPU each through a discovery script (addresses 1 and
3 of four simulated GPUs), and every task asks for one, so the GPU test can
check that gpumr uses only the GPUs Spark gave each task; the other tests
run ``--device cpu``.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import ASSIGNED, ct_phantom, lines_of, run_spark

from gpumr.cli import main
from gpumr.devices.chooser import DeviceChooser
from gpumr.errors import GpumrError
from gpumr.io.outputs import open_output
from gpumr.io.packing import pack
from gpumr.launch.job import run_job

pyspark = pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (the dev extra)")
pytestmark = pytest.mark.slow
if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="Spark needs Java 17 (java on PATH or JAVA_HOME)")]


def keys_of(lines):
    return [json.loads(line.split("\t", 1)[0]) for line in lines]


def no_ms(counts):
    """The record counters (times differ run to run)."""
    return {k: v for k, v in counts.items() if "milliseconds" not in k}


def inline(inputs, out, extra=()):
    from gpumr.jobs.face_detect import MRFaceDetect
    counters, _ = run_job(MRFaceDetect, inputs, str(out), "inline", list(extra))
    return counters, lines_of(str(out))


def test_faces_equal_the_mrjob_job_every_record_once(sc, packed, tmp_path):
    want_counts, want = inline([packed], tmp_path / "inline", ["--device", "cpu"])
    # Splits much smaller than the files: most split boundaries fall inside records.
    counts, _ = run_spark("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "20KiB", "--device", "cpu"],
                          sc=sc)
    got = lines_of(str(tmp_path / "out"))
    assert got == want  # the same lines, in the same (sorted) order
    keys = keys_of(got)
    assert len(keys) == len(set(keys)) == 12 and keys == sorted(keys)
    assert counts["records on CPU"] == want_counts["records on CPU"] == 12
    assert set(counts) == set(want_counts)
    assert sorted(os.listdir(tmp_path / "out")) == ["_SUCCESS", "part-00000"]
    # An earlier gpumr output is replaced; a folder gpumr did not write is refused, untouched.
    counts2, _ = run_spark("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "1MiB", "--device", "cpu",
                               "--reducers", "2"], sc=sc)
    assert sorted(lines_of(str(tmp_path / "out"))) == sorted(want) and counts2["records on CPU"] == 12
    assert keys_of(lines_of(str(tmp_path / "out"))) == sorted(keys)  # sorted across part files too
    # staged beside it, swapped in, no leftovers (only its proof, .out.gpumr)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == [".inline.gpumr", ".out.gpumr"]


def test_output_folder_safety(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(GpumrError, match="gpumr run did not make"):
        open_output(str(mine), "gpumr run", folder=True)
    assert (mine / "notes.txt").read_text() == "keep me"
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(GpumrError, match="is a symbolic link"):
        open_output(str(tmp_path / "link"), "gpumr run", folder=True)
    with pytest.raises(GpumrError, match="-o OUT is required"):
        run_spark("faces", ["in.seq"])
    with pytest.raises(GpumrError, match="--projections is required"):
        run_spark("backproject", ["--slab", "4", "-o", str(tmp_path / "x")])
    with pytest.raises(GpumrError, match="--hadoop-splits: an option of --engine inline, local, hadoop, emr"):
        run_spark("faces", ["in.seq", "-o", str(tmp_path / "x"), "--hadoop-splits"])


def test_two_side_files_of_one_name_both_reach_the_tasks(sc, tmp_path):
    """Side files travel by content (their name is their hash): two files both named ``data`` are two files."""
    assert main(["ct", "phantom", "--voxels", "8", "--angles", "4", "-o", str(tmp_path / "p.seq")]) == 0
    for folder, src in (("p", "p.seq"), ("g", "p.geometry.json")):
        (tmp_path / folder).mkdir()
        shutil.copy(tmp_path / src, tmp_path / folder / "data")
    counts, _ = run_spark("backproject", ["--projections", str(tmp_path / "p" / "data"), "--geometry",
                                    str(tmp_path / "g" / "data"), "--slab", "4", "-o", str(tmp_path / "out"),
                                    "--device", "cpu"], sc=sc)
    assert counts["records on CPU"] == 2 and not counts.get("bad records")


def test_a_spark_that_cannot_start_is_one_gpumr_line(tmp_path):
    """A master URL Spark refuses (a typo) ended in a Python traceback after Java's own lines."""
    import seqfile
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        w.append("k", b"v")
    for master, words in (("local-cluster[2]", "Spark did not start: org.apache.spark.SparkException: Could not "
                                               "parse Master URL: 'local-cluster[2]'"),
                          ("bogus", "Spark did not start (--master bogus): its Java process exited")):
        proc = subprocess.run([sys.executable, "-m", "gpumr", "spark", "faces", "in.seq", "-o", "out", "--master",
                               master], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines()[-1].startswith(f"gpumr: error: {words}"), proc.stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["in.seq"]


def test_corrupt_stretch_and_unreadable_key_give_the_same_error_lines_and_counts(sc, corrupt_stretch, tmp_path):
    import seqfile
    path, frames, offsets = corrupt_stretch
    keys = str(tmp_path / "keys.seq")  # a Text key that is not UTF-8, between two good records
    with seqfile.Writer(keys) as w:
        for key in (b"k/a.jpg", b"k/bad-\xff.jpg", b"k/c.jpg"):
            w.append(key, b"not an image")
    want_counts, want = inline([path, keys], tmp_path / "inline", ["--device", "cpu"])
    counts, _ = run_spark("faces", [path, keys, "-o", str(tmp_path / "out"), "--split-size", "30KiB", "--device",
                                    "cpu"], sc=sc)
    got = lines_of(str(tmp_path / "out"))
    assert got == want
    out = {json.loads(k): json.loads(v) for k, v in (line.split("\t", 1) for line in got)}
    assert out[path]["lost"][0] == offsets[3]
    assert "error" in out["k/bad-\\xff.jpg"] and "error" in out["k/a.jpg"] and "error" in out["k/c.jpg"]
    assert no_ms(counts) == no_ms(want_counts) and counts["bad records"] == 1 + 3
    assert counts["records on CPU"] == len(frames) - 1


def test_ct_equals_reconstruct_and_assembles(sc, tmp_path):
    d = tmp_path
    ct_phantom(d, 32, 48)
    counts, _ = run_spark("backproject", ["--projections", str(d / "proj.seq"), "--slab", "6", "-o", str(d / "out"),
                                    "--device", "cpu"], sc=sc)
    assert counts["records on CPU"] == 6 and not counts.get("bad records")  # 32 slices, 6 per slab
    keys = keys_of(lines_of(str(d / "out")))
    assert keys == sorted(keys) and len(keys) == 6 and keys[0] == "z00000"
    assert main(["ct", "assemble", str(d / "out"), "-o", str(d / "vol.npy")]) == 0
    vol, direct = np.load(d / "vol.npy"), np.load(d / "direct.npy")
    assert vol.shape == (32, 32, 32) and np.allclose(vol, direct, rtol=1e-6, atol=1e-6)


def test_chooser_only_uses_the_given_gpus():
    env = {"GPUMR_SIMULATE_GPUS": "4"}
    assert [g.index for g in DeviceChooser(env=env, only=[1, 3]).gpus()] == [1, 3]
    none = DeviceChooser(env=env, only=[7])
    assert not none.has_gpus and "assigned to this task" in none.why_cpu_only
    with pytest.raises(GpumrError, match="assigned to this task"):
        DeviceChooser("gpu", env=env, only=[7])


def test_gpumr_uses_only_the_gpus_spark_assigned(sc, packed, tmp_path):
    counts, _ = run_spark("faces", [packed, "-o", str(tmp_path / "out"), "--split-size", "40KiB"], sc=sc)
    values = [json.loads(line.split("\t", 1)[1]) for line in lines_of(str(tmp_path / "out"))]
    devices = {v["device"] for v in values}
    assert devices <= {"cpu", *(f"gpu:{a}" for a in ASSIGNED)}  # never gpu:0 or gpu:2
    assert devices & {f"gpu:{a}" for a in ASSIGNED} and counts["records on GPU"] > 0
    assert all(v["simulated"] for v in values if v["device"] != "cpu")
    assert counts.get("records on CPU", 0) + counts["records on GPU"] == len(values) == 12


def _executor_pids(app_id):
    pids = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd and app_id.encode() in cmd:
            pids.append(int(pid))
    return sorted(pids)


def test_killing_an_executor_mid_job_still_gives_every_record_once(sc, sample_frames, tmp_path):
    """SIGKILL one executor JVM after the first tasks finish; Spark re-runs what it lost."""
    from gpumr.faces.sample import make_frames
    frames = tmp_path / "frames"
    make_frames(str(frames), count=30)
    seq = str(tmp_path / "frames.seq")
    pack([str(frames)], seq, shards=1, progress=False)
    want_counts, want = inline([seq], tmp_path / "inline", ["--device", "cpu"])
    killed = {}

    def kill_one_after_some_tasks():
        tracker = sc.statusTracker()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info and info.numTasks > 10 and 3 <= info.numCompletedTasks < info.numTasks - 5:
                    pid = _executor_pids(sc.applicationId)[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, done=info.numCompletedTasks, of=info.numTasks)
                    return
            time.sleep(0.05)

    before = _executor_pids(sc.applicationId)
    assert len(before) == 2
    t = threading.Thread(target=kill_one_after_some_tasks)
    t.start()
    counts, _ = run_spark("faces", [seq, "-o", str(tmp_path / "out"), "--split-size", "30KiB", "--device", "cpu"],
                          sc=sc)
    t.join()
    assert killed, "the executor was not killed while the job ran"
    assert killed["pid"] in before
    got = lines_of(str(tmp_path / "out"))
    assert got == want
    keys = keys_of(got)
    assert len(keys) == len(set(keys)) == 30
    assert counts["records on CPU"] == want_counts["records on CPU"] == 30  # re-run partitions not counted twice


def test_only_its_own_earlier_output_is_replaced_and_what_appeared_meanwhile_is_kept(sc, packed, tmp_path, capsys,
                                                                                      monkeypatch):
    """Issue 19: another mrjob job's part-* folder, a folder of notes after one job line, ``-o .`` inside an
    earlier output are refused before any task; a file dropped into the old output during the job is kept."""
    args = [packed, "--split-size", "1MiB", "--device", "cpu"]
    for name, text in (("other", '"k"\t{"faces": []}\n'), ("notes", '"k"\t{"faces": []}\nmy notes\n')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-00000").write_text(text)
        with pytest.raises(GpumrError, match="holds part-00000, which gpumr run did not make"):
            run_spark("faces", [*args, "-o", str(tmp_path / name)], sc=sc)
        assert os.listdir(tmp_path / name) == ["part-00000"] and (tmp_path / name / "part-00000").read_text() == text
    out = tmp_path / "out"
    run_spark("faces", [*args, "-o", str(out)], sc=sc)
    first = lines_of(str(out))
    monkeypatch.chdir(out)
    with pytest.raises(GpumrError, match="is the current folder"):
        run_spark("faces", [*args, "-o", "."], sc=sc)
    assert lines_of(".") == first
    monkeypatch.chdir(tmp_path)
    failed = []

    def job():
        try:
            run_spark("faces", [*args, "-o", str(out)], sc=sc)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failed.append(exc)
    worker = threading.Thread(target=job)
    worker.start()
    t0 = time.monotonic()
    while not [n for n in os.listdir(tmp_path) if n.startswith(".out.") and n.endswith(".tmp")] and worker.is_alive():
        assert time.monotonic() - t0 < 120
        time.sleep(0.01)
    (out / "notes.txt").write_text("mine")  # while the job writes beside the old output
    worker.join(300)
    assert not failed and lines_of(str(out)) == first
    assert "notes.txt" not in os.listdir(out)
    (kept,) = [n for n in os.listdir(tmp_path) if n.endswith(".old")]
    assert os.listdir(tmp_path / kept) == ["notes.txt"] and (tmp_path / kept / "notes.txt").read_text() == "mine"
    assert f"the old output was set aside as {tmp_path / kept}, not removed" in capsys.readouterr().err


STOPPED_JVM = """
import os, signal, sys
from gpumr.boundary import install
from gpumr.log import set_verbosity
from gpumr.signals import Terminated
from gpumr.engines.spark import _stop, spark_context
set_verbosity()
sc = spark_context("local[1]", "gpumr test")
sc.parallelize([1]).count()  # (a connection to the JVM in py4j's pool)
jvm = sc._gateway.proc
jvm.send_signal(signal.SIGTERM)  # it ends by itself, as on a terminal's SIGTERM to the job's process group
jvm.wait(60)
try:
    raise Terminated()
except KeyboardInterrupt:
    _stop(sc)
print("stopped")
"""


def test_a_job_stopped_by_a_signal_stops_its_gone_jvm_without_a_warning(tmp_path):
    """A signal to the job's process group ends Spark's JVM too. Stopping the context then raised Py4J's refused
    connection where the JVM had gone (the job ended as an error, status 1, not 143), or made pyspark warn "Unable to
    cleanly shutdown Spark JVM process" where it was ending (a ``gpumr: warning:`` line before ``gpumr: terminated``)."""
    proc = subprocess.run([sys.executable, "-c", STOPPED_JVM], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout.strip() == "stopped", proc.stderr[-3000:]
    assert "Unable to cleanly" not in proc.stderr and "warning" not in proc.stderr, proc.stderr[-3000:]

def test_spark_starts_as_many_task_slots_as_the_cores_hold(tmp_path, packed):
    """Without --master: ``local[N]``, N the tasks this machine's cores hold (a backprojection task threads over
    every core: one slot, where ``local[*]`` ran one per core, each reading and filtering nearly every row)."""
    from gpumr.engines.spark import SparkEngine
    from gpumr.launch.plan import make_plan
    projections, _ = ct_phantom(tmp_path, 16, 12)

    def master(*argv):
        folder = tmp_path / f"job{len(os.listdir(tmp_path))}"
        folder.mkdir()
        return SparkEngine().master(make_plan([*argv, "-o", str(tmp_path / "out"), "--engine", "spark",
                                               "--device", "cpu"], str(folder)))
    assert master("backproject", "--projections", projections) == "local[1]"
    assert master("faces", packed) == f"local[{os.cpu_count()}]"
    assert master("faces", packed, "--master", "local-cluster[2,1,1024]") == "local-cluster[2,1,1024]"
