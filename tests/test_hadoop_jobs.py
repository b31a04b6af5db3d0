"""Both jobs under a real Hadoop (``-r hadoop``, local mode): same output as the inline runner.

Every Hadoop job costs ~15-30 s of JVM start-up here, so each test runs one
job and checks many things about it: exactly-once output equal to the inline
runner's, error lines, gpumr's counters as Hadoop reports them, and files
shipped through the distributed cache (cascade, kernel fatbins, CT
projections and geometry) being found by the tasks. The face job with
``--hadoop-splits`` and the CT job run ``--device gpu`` on a simulated GPU
(the CUDA kernels executed on the host), against ``--device cpu`` inline.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import missing
from hadoop import cluster

import seqfile
from gpumr.cli import main
from gpumr.gpu import kernels
from gpumr.io.packing import pack
from gpumr.launch.job import run_job

# (a real Hadoop job takes 40-90 s here; beside two busy loops and the other pytest worker's jobs one took more
# than 600 s, pytest-timeout's default)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module", autouse=True)
def hadoop_present():
    why = cluster.unavailable()
    if why:
        missing("the Hadoop job tests", why)


def parsed(lines):
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t", 1) for line in lines)}


def inline(job_class, inputs, out, extra):
    """The same job through mrjob's inline runner: (counters, output lines)."""
    counters, _ = run_job(job_class, inputs, str(out), "inline", extra)
    return counters, cluster.JobRun(counters, "", str(out)).output


@pytest.fixture(scope="module")
def frames_seq(sample_frames, tmp_path_factory):
    """Two packed shards of the 12 sample frames, plus a file with two records that are not images."""
    d = tmp_path_factory.mktemp("frames") / "seq"
    pack([sample_frames], str(d), shards=2, progress=False)
    with seqfile.Writer(str(d / "part-00002.seq")) as w:
        w.append("zz_garbage.jpg", bytes(range(256)) * 40)
        w.append("zz_empty.jpg", b"")
    return d


def without_device(lines):
    """Output lines parsed, values less what says where they ran."""
    return {k: {f: x for f, x in v.items() if f not in ("device", "simulated")} for k, v in parsed(lines).items()}


def test_face_job_hadoop_splits_ships_cascade_and_kernels(frames_seq, sample_frames, tmp_path, emulated_kernels):
    """Hadoop reads and splits the files; the cascade and a kernel folder travel in the distributed cache.

    The tasks run ``--device gpu`` on a simulated GPU: every frame goes through the
    GPU path, its kernels executed on the host, and gives the faces ``--device cpu`` gives.
    """
    from gpumr.jobs.face_detect import MRFaceDetect
    cascade = tmp_path / "shipped" / "my_cascade.xml"
    cascade.parent.mkdir()
    shutil.copy(os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_alt2.xml"), cascade)
    kdir = tmp_path / "shipped" / "fatbins"
    if kernels.nvcc():
        kernels.build(str(kdir), archs=("75",))  # real fatbins (one architecture: quick)
    else:  # no CUDA toolkit: a stand-in under the right name shows the same shipping and lookup
        kdir.mkdir()
        for name in kernels.KERNELS:
            (kdir / f"{name}-{kernels._digest(name)}.fatbin").write_bytes(b"stand-in: no nvcc here")
    options = ["--cascade", str(cascade), "--min-neighbors", "4"]
    # (blocks of 256 KiB: each 450 KB shard in two splits, the second starting mid-file; Hadoop's local mode runs
    # the map tasks one after another, each a process that loads the kernels and checks them on the host: with
    # blocks of 64 KiB, 15 tasks took 1,069 s beside two busy loops)
    job = cluster.run(MRFaceDetect, [str(frames_seq), "--hadoop-splits", "--jobconf", "fs.local.block.size=262144",
                                     "--dirs", f"{kdir}#kernels", "--cmdenv", "GPUMR_KERNEL_DIR=kernels",
                                     "--cmdenv", "GPUMR_SIMULATE_GPUS=1", "--device", "gpu", *options],
                      str(tmp_path), "splits")
    ref_counters, ref = inline(MRFaceDetect, [str(frames_seq)], tmp_path / "inline", options + ["--device", "cpu"])

    # Hadoop cut the three files into splits (two of each shard), and every record came out exactly once.
    splits = int(re.search(r"number of splits:(\d+)", job.log).group(1))
    assert splits == 5
    keys = [json.loads(line.split("\t", 1)[0]) for line in job.output]
    assert keys == sorted(keys) and len(keys) == len(set(keys)) == 14
    # Identical to the inline runner on the CPU (which reads whole files itself), but for where it ran.
    assert without_device(job.output) == without_device(ref)
    got = parsed(job.output)
    assert sum(len(v.get("faces", [])) for v in got.values()) > 5
    assert all(v["device"] == "gpu:0" and v["simulated"] is True for v in got.values() if "faces" in v)
    assert "error" in got["zz_garbage.jpg"] and "empty" in got["zz_empty.jpg"]["error"]
    # gpumr's counters, as Hadoop totals them over the tasks: every frame on the GPU, no fallback.
    assert job.counters["records on GPU"] == ref_counters["records on CPU"] == 12
    assert job.counters["bad records"] == ref_counters["bad records"] == 2
    assert "records on CPU" not in job.counters and "GPU fallbacks" not in job.counters
    assert job.counters["GPU milliseconds"] > 0
    # The tasks were given the cascade in the distributed cache under its content's name, and its path here
    # reaches them only inside the job's spec (by that name), never as a path to open.
    assert re.search(r"-files \S*[0-9a-f]{24}-my_cascade\.xml", job.log), job.log[-3000:]
    assert str(cascade) not in re.search(r"--mapper .*", job.log).group(0)
    # ... and found the shipped kernels there (they log where each fatbin comes from).
    for name in kernels.KERNELS:
        found = re.findall(rf"{name} from \$GPUMR_KERNEL_DIR \((\S+)\)", job.log)
        assert found, "no task found the shipped %s fatbin; kernel lines:\n%s" % (name, "\n".join(l for l in job.log.splitlines() if "kernels" in l))
        # (the folder as opened, where the distributed cache keeps it: not through the task's link ``kernels``)
        assert all(p.endswith(f"/{name}-{kernels._digest(name)}.fatbin") and "/kernels/" not in p
                   and not p.startswith(str(kdir)) for p in found), found


def test_ct_job_ships_projections_and_geometry(tmp_path, emulated_kernels, capfd):
    """The tasks open the shipped projections; ``--device gpu`` on a simulated GPU: every slab through the kernel.

    Hadoop's own report stays: gpumr's counters among Hadoop's, as mrjob shows them, at the job's end; with -v, the
    job's and each task attempt's id as Hadoop gives them (issue 66, finding 10)."""
    from gpumr.jobs.backproject import MRBackproject
    from gpumr.log import set_verbosity
    d = tmp_path
    assert main(["ct", "geometry", "-o", str(d / "g.json"), "--voxels", "32", "--angles", "48"]) == 0
    assert main(["ct", "phantom", "--geometry", str(d / "g.json"), "-o", str(d / "proj.seq")]) == 0
    assert main(["ct", "reconstruct", str(d / "proj.seq"), "-o", str(d / "direct.npy")]) == 0
    capfd.readouterr()
    set_verbosity(verbose=True)
    try:
        job = cluster.run(MRBackproject, ["--slab", "6", "--projections", str(d / "proj.seq"), "--cpu-threads", "1",
                                          "--cmdenv", "GPUMR_SIMULATE_GPUS=1", "--device", "gpu"], str(tmp_path), "ct")
    finally:
        set_verbosity()
    said = capfd.readouterr().err
    assert job.counters["records on GPU"] == 6 and set(job.counters) == {"records on GPU", "GPU milliseconds"}
    report = re.search(r"^gpumr: Counters: (\d+)\n((?:\t.*\n)+)", said, re.M)
    assert report, said[-3000:]
    shown = report.group(2)
    assert "\tgpumr\n\t\tGPU milliseconds=" in shown and "\t\trecords on GPU=6\n" in shown
    assert "\tMap-Reduce Framework\n" in shown and int(report.group(1)) == shown.count("=")  # Hadoop's own too
    job_ids = re.findall(r"^gpumr: debug: hadoop: .*\b(job_local\w+)$", said, re.M)
    attempts = re.findall(r"^gpumr: debug: hadoop: .*\b(attempt_local\w+_m_\d+_\d+)$", said, re.M)
    assert job_ids and attempts and all(a.startswith(job_ids[0].replace("job_", "attempt_")) for a in attempts), said
    assert all(v["device"] == "gpu:0" and v["simulated"] is True for v in parsed(job.output).values())
    # The tasks opened the shipped copies (by their content's names in the cache), not the files here.
    assert re.search(r"-files \S*[0-9a-f]{24}-proj\.seq", job.log) and \
        re.search(r"-files \S*[0-9a-f]{24}-proj\.geometry\.json", job.log.replace(",", " -files "))
    assert str(d) not in re.search(r"--mapper .*", job.log).group(0)
    assert main(["ct", "assemble", job.output_dir, "-o", str(d / "vol.npy")]) == 0
    vol, direct = np.load(d / "vol.npy"), np.load(d / "direct.npy")
    assert vol.shape == (32, 32, 32)
    assert np.linalg.norm(vol - direct) / np.linalg.norm(direct) < 1e-5


SYSTEM_PYTHON = "/usr/bin/python3"


def _bare_python():
    """The version ("3.11") of a system Python without numpy, OpenCV or gpumr, or None."""
    if not os.path.exists(SYSTEM_PYTHON):
        return None
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); "
                            "import numpy"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    version = probe.stdout.strip()
    if probe.returncode == 0 or "No module named 'numpy'" not in probe.stderr or \
            tuple(map(int, version.split("."))) < (3, 9):
        return None
    for mod in ("cv2", "gpumr"):
        if subprocess.run([SYSTEM_PYTHON, "-c", f"import {mod}"], capture_output=True, env={"PATH": "/usr/bin:/bin"},
                          cwd="/").returncode == 0:
            return None
    return version


@pytest.fixture
def broken_inputs(frames_seq, sample_frames, tmp_path):
    """``frames_seq`` plus ``part-00003.seq``: 4 frames, record 2's length broken; (folder, its offsets)."""
    frames = sorted(os.listdir(sample_frames))
    inputs = tmp_path / "inputs"
    shutil.copytree(frames_seq, inputs)
    with seqfile.Writer(str(inputs / "part-00003.seq"), sync_interval=1) as w:  # a sync before every record
        for name in frames[:4]:
            w.append("broken/" + name, open(os.path.join(sample_frames, name), "rb").read())
    offsets = [r.offset for r in seqfile.Reader(str(inputs / "part-00003.seq"))]
    with open(inputs / "part-00003.seq", "r+b") as f:
        f.seek(offsets[2] + 20)
        f.write(struct.pack(">i", -5))  # break record 2's length: that stretch is lost, named by an error line
    return inputs, offsets


def test_whole_files_through_the_manifest_on_a_bare_python_from_the_bundle(broken_inputs, tmp_path):
    """Without --hadoop-splits each task reads its byte ranges through gpumr's split reader; broken framing is an
    error line.

    One Hadoop job checks two things (each job costs half a minute): the
    launcher's task files as the job's input, and `gpumr bundle`: gpumr, its
    libraries and fatbins shipped as one archive, the tasks run by a system
    Python with nothing installed. Where there is no such Python the job runs
    on this one and only the bundle's checks are skipped (said in the test's
    output).
    """
    from gpumr.engines.mrjob.bundle import ARCHIVE, NAME
    from gpumr.jobs.face_detect import MRFaceDetect
    inputs, offsets = broken_inputs
    version = _bare_python()
    extra, python_bin = [], sys.executable
    if version:
        kdir = tmp_path / "fatbins"
        kdir.mkdir()
        for name in kernels.KERNELS:  # stand-ins under the right names: this test is about where tasks find them
            (kdir / f"{name}-{kernels._digest(name)}.fatbin").write_bytes(b"stand-in")
        # Built in this test's own folder (never reused across runs: CI builds it afresh).
        assert main(["bundle", "-o", str(tmp_path / "bundle"), "--python-version", version, "--kernels", str(kdir),
                     "--faces-only"]) == 0
        extra = ["--archives", f"{tmp_path / 'bundle' / ARCHIVE}#{NAME}", "--cmdenv", f"PYTHONPATH={NAME}"]
        python_bin = SYSTEM_PYTHON
    job = cluster.run(MRFaceDetect, [str(inputs)] + extra, str(tmp_path), "manifest", python_bin=python_bin)
    ref_counters, ref = inline(MRFaceDetect, [str(inputs)], tmp_path / "inline", [])

    got, want = parsed(job.output), parsed(ref)
    lost = [k for k in got if k.endswith("part-00003.seq")]
    assert len(lost) == 1 and got[lost[0]]["lost"][0] == offsets[2]
    want_lost = [k for k in want if k.endswith("part-00003.seq")]
    assert got.pop(lost[0]) == want.pop(want_lost[0])  # same stretch; the key is the file's URI there
    assert got == want
    assert len(got) == 12 + 2 + 3  # frames, the two non-images, the broken file's readable records
    assert job.counters["records on CPU"] == ref_counters["records on CPU"] == 15
    assert job.counters["bad records"] == ref_counters["bad records"] == 3
    assert re.search(r"tasks-\d{5}\.gz", job.log)  # the job's input: the launcher's task files
    if not version:
        pytest.skip(f"bundle not checked: needs {SYSTEM_PYTHON} (3.9+) without numpy, cv2 or gpumr, to show the "
                    "bundle alone suffices (the manifest path above was checked)")
    assert re.search(r"--mapper", job.log) and SYSTEM_PYTHON in job.log
    # gpumr itself came from the unpacked bundle (that Python has none of it), and the bundle holds the kernels
    # beside gpumr's sources, where a task on a GPU node looks for them (the tasks here had no GPU to say so).
    import zipfile
    with zipfile.ZipFile(tmp_path / "bundle" / ARCHIVE) as z:
        assert any(n.startswith("gpumr/cuda/haar-") and n.endswith(".fatbin") for n in z.namelist())


def test_refusals_under_hadoop_come_before_it_or_as_one_task_line(frames_seq, tmp_path):
    """What the options decide is refused before Hadoop is called; what only the tasks' node can decide
    (``--device gpu`` where no GPU is) fails each task with one line that the job's client prints, and
    no Python traceback."""
    base = [sys.executable, "-m", "gpumr.jobs.face_detect", "-r", "hadoop", "-c", cluster.CONF,
            "--hadoop-streaming-jar", cluster.streaming_jar(), "--hadoop-tmp-dir", "file://" + str(tmp_path / "tmp"),
            "--python-bin", sys.executable, str(frames_seq), "--output-dir", "file://" + str(tmp_path / "out")]
    (tmp_path / "cwd").mkdir()
    before = subprocess.run([*base, "--scale-factor", "nan"], cwd=tmp_path / "cwd", capture_output=True, text=True)
    assert before.returncode == 1 and before.stderr.strip().splitlines() == [
        "gpumr: error: --scale-factor must be a number over 1 and at most 100, not nan"]
    assert not (tmp_path / "tmp").exists()  # Hadoop was never asked for anything
    env = {k: v for k, v in os.environ.items() if k != "GPUMR_SIMULATE_GPUS"}
    task = subprocess.run([*base, "--device", "gpu"], cwd=tmp_path / "cwd", capture_output=True, text=True, env=env)
    assert task.returncode == 1 and "Traceback" not in task.stderr, task.stderr[-3000:]
    lines = task.stderr.strip().splitlines()  # one line: the job failed, and the task's own reason
    assert len(lines) == 1 and lines[0].startswith("gpumr: error: a task of the hadoop job failed: --device gpu: no "
                                                   "GPU on this node ("), task.stderr[-3000:]
    assert not list((tmp_path / "out").glob("part-*"))
    # The scratch folder mrjob made for the job (the packaged config's is file:///tmp/gpumr-mrjob) is not left
    # behind, empty (issue 66, finding 9).
    assert not (tmp_path / "tmp").exists()
    # No scratch folder named, on a Hadoop without HDFS: the fix, not "is Hadoop's client installed?" (finding 8).
    bare = [a for a in base if a not in ("-c", cluster.CONF, "--hadoop-tmp-dir", "file://" + str(tmp_path / "tmp"))]
    proc = subprocess.run(bare, cwd=tmp_path / "cwd", capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith(
        "gpumr: error: --engine hadoop: Could not mkdir hdfs:"), proc.stderr[-3000:]
    assert "is Hadoop's client installed" not in lines[0] and '-c "$(gpumr conf mrjob.local.conf)"' in lines[0]
