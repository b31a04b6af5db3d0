"""SequenceFiles at URIs through the one filesystem layer (gpumr.io.remote), against real servers.

S3: moto's S3-protocol server on loopback (the ``s3`` fixture): gpumr's
commands and engines talk to it through pyarrow exactly as to AWS, with fake
credentials and ``AWS_ENDPOINT_URL``. HDFS: no NameNode runs here, so the
same code runs on ``file://`` URIs (pyarrow's LocalFileSystem: listing,
ranged reads, the rename publish that HDFS gets too).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_spark, run_workload
from s3server import BUCKET, GatedProxy

from gpumr.cli import main
from gpumr.errors import GpumrError
from gpumr.io import remote
from gpumr.io.inputs import splits
from gpumr.io.packing import pack
from gpumr.io.records import Lost, read_split
from gpumr.launch.job import run_job
from gpumr.limits import MAX_SPLITS


def lines_of(out_dir):
    return [line for name in sorted(os.listdir(out_dir)) if name.startswith("part-")
            for line in open(os.path.join(out_dir, name), encoding="utf-8").read().splitlines()]


def by_key(lines):
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t", 1) for line in lines)}


def no_ms(counts):
    return {k: v for k, v in counts.items() if "milliseconds" not in k}


def frames_under(sample_frames, tmp_path, name):
    """Four sample frames packed into a folder of 2 shards ``tmp_path/name``, keyed ``more/<frame>``

    (not the bare names the ``corrupt_stretch`` file uses, so that one output holds both without clashes).
    """
    os.makedirs(tmp_path / "more-src" / "more")
    for frame in sorted(os.listdir(sample_frames))[:4]:
        shutil.copy(os.path.join(sample_frames, frame), tmp_path / "more-src" / "more")
    pack([str(tmp_path / "more-src")], str(tmp_path / name), shards=2, progress=False)
    return tmp_path / name


def upload(s3, path, key):
    with open(path, "rb") as f:
        s3.put(key, f.read())
    return f"s3://{BUCKET}/{key}"


def visible(keys):
    """The objects a Hadoop input format would take: no path component starting with "." or "_".

    (pyarrow keeps S3 "folder" markers, empty objects whose keys end in "/", as S3A does: not files.)
    """
    return [k for k in keys if not k.endswith("/") and not any(p.startswith((".", "_")) for p in k.split("/"))]


def objects(s3, prefix, skip="spark/frames/"):
    """The objects under ``prefix`` but not under ``skip`` (the inputs), hidden ones too, but no "folder" markers."""
    return [k for k in s3.keys(prefix) if not k.endswith("/") and not k.startswith(skip)]


def test_splits_read_through_the_layer_give_every_record_once(s3, corrupt_stretch, tmp_path):
    """Any cut of a file at a URI (s3://, s3a://, file://) into splits gives the local file's records once each."""
    path, frames, offsets = corrupt_stretch
    size = os.path.getsize(path)
    want = list(read_split(path, name="x"))
    uris = [upload(s3, path, "cuts/c.seq"), f"s3a://{BUCKET}/cuts/c.seq", "file://" + path]
    for uri in uris:
        for step in (4096, 30_000, size):
            got = [item for start in range(0, size, step)
                   for item in read_split(uri, start, min(start + step, size), name="x")]
            assert [(type(i).__name__, getattr(i, "key", None), getattr(i, "start", None)) for i in got] == \
                   [(type(i).__name__, getattr(i, "key", None), getattr(i, "start", None)) for i in want], (uri, step)
    lost = [i for i in want if isinstance(i, Lost)]
    assert len(lost) == 1 and lost[0].start == offsets[3]  # the corrupt stretch, named, once
    assert sum(1 for i in want if not isinstance(i, Lost)) == len(frames) - 1
    # A missing object is one Lost line naming it (from the split at 0 only), not an exception.
    missing = f"s3://{BUCKET}/cuts/missing.seq"
    assert [i.name for i in read_split(missing)] == [missing] and list(read_split(missing, 10, 20)) == []


def test_pack_to_the_bucket_then_ls_info_cat_unpack(s3, sample_frames, tmp_path, capsys, monkeypatch):
    uri = f"s3://{BUCKET}/cli/frames"
    assert main(["pack", sample_frames, "-o", uri, "--shards", "2"]) == 0
    assert f"uploaded to {uri}" in capsys.readouterr().out
    # Only the two shards are visible; no temporary is left.
    assert visible(s3.keys("cli/")) == ["cli/frames/part-00000.seq", "cli/frames/part-00001.seq"]
    assert not [k for k in s3.keys("cli/") if ".tmp" in k]

    assert main(["ls", "-l", f"s3a://{BUCKET}/cli/frames"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 12 and {line.split("\t")[0] for line in listed} == \
        {f"s3a://{BUCKET}/cli/frames/part-0000{i}.seq" for i in (0, 1)}  # the URIs, not local copies
    assert main(["info", uri, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert [f["path"] for f in facts] == [f"{uri}/part-00000.seq", f"{uri}/part-00001.seq"]
    assert sum(f["records"] for f in facts) == 12 and facts[0]["metadata"]["gpumr.pack"]

    name = sorted(os.listdir(sample_frames))[5]
    want = open(os.path.join(sample_frames, name), "rb").read()
    # A separate process: the credentials come from its environment; the endpoint from the S3-only variable.
    env = dict(os.environ, AWS_ENDPOINT_URL_S3=os.environ["AWS_ENDPOINT_URL"])
    del env["AWS_ENDPOINT_URL"]
    out = subprocess.run([sys.executable, "-m", "gpumr", "cat", uri, name], capture_output=True, env=env)
    assert out.returncode == 0 and out.stdout == want

    monkeypatch.chdir(tmp_path)  # unpack -d file:///... is the local folder, never a folder named "file:"
    assert main(["unpack", uri, "-d", f"file://{tmp_path}/back", "-q"]) == 0
    assert sorted(n for n in os.listdir(tmp_path / "back") if n != ".gpumr") == sorted(os.listdir(sample_frames))
    assert (tmp_path / "back" / name).read_bytes() == want and not os.path.exists(tmp_path / "file:")
    capsys.readouterr()
    assert main(["unpack", uri, "-d", f"s3://{BUCKET}/elsewhere", "-q"]) == 1
    assert "unpack writes into a folder of this machine" in capsys.readouterr().err

    # An existing destination is refused without --force; --force replaces only gpumr pack's own output.
    before = s3.get("cli/frames/part-00000.seq")
    assert main(["pack", sample_frames, "-o", uri, "--shards", "2", "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["pack", sample_frames, "-o", uri, "--shards", "3", "-q", "--force"]) == 0
    assert visible(s3.keys("cli/")) == [f"cli/frames/part-0000{i}.seq" for i in range(3)]
    assert s3.get("cli/frames/part-00000.seq") != before  # three shards now: the first holds other frames
    s3.put("cli/notes.seq", b"SEQ\x06 but not gpumr's")
    s3.put("cli/frames/README", b"someone's notes")
    capsys.readouterr()
    assert main(["pack", sample_frames, "-o", f"s3://{BUCKET}/cli/notes.seq", "-q", "--force"]) == 1
    assert "cli/notes.seq: exists and gpumr did not make it" in capsys.readouterr().err
    assert main(["pack", sample_frames, "-o", uri, "--shards", "2", "-q", "--force"]) == 1
    assert "holds README, which gpumr pack did not make" in capsys.readouterr().err
    assert s3.get("cli/notes.seq") == b"SEQ\x06 but not gpumr's" and s3.get("cli/frames/README") == b"someone's notes"
    assert len(visible(s3.keys("cli/frames/"))) == 4  # untouched


def test_an_interrupted_upload_leaves_no_object(s3, sample_frames, tmp_path):
    """Ctrl-C while `pack -o s3://...` uploads (held mid-stream by a relay): nothing visible, no temporary."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):  # 4 shards of ~2 MiB: the relay holds the upload inside the second
        (src / f"blob{i}.bin").write_bytes(os.urandom(2 << 20))
    host, port = s3.endpoint.rsplit("/", 1)[1].split(":")
    proxy = GatedProxy((host, int(port)), hold_after=3 << 20)
    env = dict(os.environ, AWS_ENDPOINT_URL=proxy.endpoint)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gpumr", "pack", str(src), "-o", f"s3://{BUCKET}/cut/blobs",
                                 "--shards", "4", "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proxy.holding.wait(60), "the upload never reached the relay's hold point"
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        proxy.release()
        _, err = proc.communicate(timeout=60)
    finally:
        proxy.close()
    assert proc.returncode == 130 and b"interrupted" in err and b"Traceback" not in err
    assert visible(s3.keys("cut/")) == []
    assert not [k for k in s3.keys("cut/") if ".tmp" in k]  # the hidden temporary upload was removed too
    # A failed upload (no such bucket) is one line, and leaves nothing either.
    out = subprocess.run([sys.executable, "-m", "gpumr", "pack", str(src), "-o", "s3://no-such-bucket-here/x", "-q"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "s3://no-such-bucket-here/x" in \
        out.stderr


def test_file_uris_take_the_layers_rename_path(sample_frames, tmp_path, capsys):
    """``file://``: the code HDFS runs (pyarrow filesystem, hidden upload, rename publish) on a local folder."""
    uri = f"file://{tmp_path}/remote/frames"  # its parent folder does not exist yet
    assert main(["pack", sample_frames, "-o", uri, "--shards", "2", "-q"]) == 0
    assert sorted(os.listdir(tmp_path / "remote")) == ["frames"]
    assert sorted(os.listdir(tmp_path / "remote" / "frames")) == ["part-00000.seq", "part-00001.seq"]
    assert [u for u, _ in remote.list_files(uri)] == [f"{uri}/part-00000.seq", f"{uri}/part-00001.seq"]
    capsys.readouterr()
    assert main(["info", uri]) == 0 and f"{uri}/part-00001.seq: SequenceFile v6" in capsys.readouterr().out
    # --force: the old folder is set aside, the new one renamed in, then the old one removed.
    assert main(["pack", sample_frames, "-o", uri, "--shards", "3", "-q", "--force"]) == 0
    assert sorted(os.listdir(tmp_path / "remote")) == ["frames"]
    assert len(os.listdir(tmp_path / "remote" / "frames")) == 3
    assert main(["pack", sample_frames, "-o", uri, "-q", "--force"]) == 1  # one file: not over a folder
    assert "is a folder, not a file that gpumr made" in capsys.readouterr().err


def test_a_name_ending_in_a_compression_suffix_is_written_byte_for_byte(s3, tmp_path):
    """pyarrow compresses a stream it opens for ``x.gz`` unless told not to: the layer writes what it is given."""
    (tmp_path / "local.zst").write_bytes(b"uploaded")
    for base, read in ((f"file://{tmp_path}", lambda name: (tmp_path / name).read_bytes()),
                       (f"s3://{BUCKET}/suffix", lambda name: s3.get(f"suffix/{name}"))):
        remote.write_bytes(f"{base}/whole.gz", b"whole")
        with remote.open_output(f"{base}/streamed.bz2") as f:
            f.write(b"streamed")
        remote.upload(str(tmp_path / "local.zst"), f"{base}/uploaded.zst")
        assert [read(n) for n in ("whole.gz", "streamed.bz2", "uploaded.zst")] == [b"whole", b"streamed", b"uploaded"]


def bucket_lines(s3, prefix):
    """The lines of the ``part-*`` objects under ``prefix`` (one output), in part order."""
    return [line for key in s3.keys(prefix) if key.rsplit("/", 1)[1].startswith("part-")
            for line in s3.get(key).decode("utf-8").splitlines()]


def test_spark_faces_reads_from_and_writes_to_the_bucket_like_local_files(sc, s3, corrupt_stretch, sample_frames,
                                                                          tmp_path):
    path, frames, offsets = corrupt_stretch
    local = frames_under(sample_frames, tmp_path, "frames")
    os.link(path, local / "part-00002.seq")  # the corrupt stretch, as a third file of the folder
    for name in sorted(os.listdir(local)):
        upload(s3, str(local / name), f"spark/frames/{name}")
    s3.put("spark/frames/_SUCCESS", b"")  # hidden: not an input
    # Splits of 100 KiB: most boundaries fall inside records (frames are ~75 KB). Two sorted parts.
    args = ["--split-size", "100KiB", "--device", "cpu", "--reducers", "2"]
    want_counts, _ = run_spark("faces", [str(local), "-o", str(tmp_path / "want"), *args], sc=sc)
    out = f"s3://{BUCKET}/spark/faces"
    counts, _ = run_spark("faces", [f"s3://{BUCKET}/spark/frames", "-o", out, *args], sc=sc)
    # The local folder's files as objects, the proof beside them listing each one's size and hash; no staging left.
    names = ["_SUCCESS", "part-00000", "part-00001"]
    assert sorted(os.listdir(tmp_path / "want")) == names
    assert objects(s3, "spark/") == ["spark/.faces.gpumr"] + [f"spark/faces/{n}" for n in names]
    proof = json.loads(s3.get("spark/.faces.gpumr"))
    assert proof["output"] == "gpumr run" and proof["versions"] == [
        {n: [len(s3.get(f"spark/faces/{n}")), hashlib.sha256(s3.get(f"spark/faces/{n}")).hexdigest()] for n in names}]
    want, got = by_key(lines_of(tmp_path / "want")), by_key(bucket_lines(s3, "spark/faces/"))
    lost_local = str(local / "part-00002.seq")
    lost_uri = f"s3://{BUCKET}/spark/frames/part-00002.seq"
    assert got.pop(lost_uri)["lost"][0] == want.pop(lost_local)["lost"][0] == offsets[3]
    assert got == want and len(got) == 4 + len(frames) - 1  # every record once
    assert len(bucket_lines(s3, "spark/faces/")) == len(got) + 1
    assert no_ms(counts) == no_ms(want_counts) and counts["bad records"] == 1


def test_spark_backproject_reads_projections_and_geometry_from_the_bucket_and_writes_there(sc, s3, tmp_path):
    d = tmp_path
    assert main(["ct", "geometry", "-o", str(d / "p.geometry.json"), "--voxels", "16", "--angles", "24"]) == 0
    assert main(["ct", "phantom", "--geometry", str(d / "p.geometry.json"), "-o", str(d / "p.seq")]) == 0
    # Other names than the local run's: one Spark context ships one path per file name.
    upload(s3, str(d / "p.seq"), "ct/q.seq")
    upload(s3, str(d / "p.geometry.json"), "ct/q.geometry.json")  # found beside the projections, as locally
    run_spark("backproject", ["--projections", str(d / "p.seq"), "--slab", "4", "-o", str(d / "want"), "--device",
                              "cpu"], sc=sc)
    counts, _ = run_spark("backproject", ["--projections", f"s3://{BUCKET}/ct/q.seq", "--slab", "4", "-o",
                                    f"s3a://{BUCKET}/ct/out", "--device", "cpu"], sc=sc)
    assert counts["records on CPU"] == 4 and bucket_lines(s3, "ct/out/") == lines_of(d / "want")
    assert objects(s3, "ct/out") == ["ct/out/_SUCCESS", *(f"ct/out/arrays/z{z:05d}.slab.npy" for z in (0, 4, 8, 12)),
                                      "ct/out/part-00000"]
    assert main(["ct", "assemble", str(d / "want"), "-o", str(d / "vol.npy")]) == 0
    assert np.load(d / "vol.npy").shape == (16, 16, 16)


def test_spark_refuses_too_many_splits_before_any_task(tmp_path):
    with pytest.raises(GpumrError, match="--split-size must be a whole number of at least 4,096, not 1"):
        run_spark("faces", ["x.seq", "-o", str(tmp_path / "o"), "--split-size", "1"])
    # Counted, not built: a petabyte at the smallest split size is refused at once, naming a size that fits.
    with pytest.raises(GpumrError, match=f"over the limit of {MAX_SPLITS} tasks") as refused:
        splits([("s3://b/huge.seq", 1 << 50), ("s3://b/small.seq", 10)], 4096)
    fits = int(re.search(r"use --split-size (\d+)MiB or more", str(refused.value)).group(1)) << 20
    assert len(splits([("s3://b/huge.seq", 1 << 50), ("s3://b/small.seq", 10)], fits)) <= MAX_SPLITS
    with pytest.raises(GpumrError, match="input files: each is at least one task"):
        splits([(f"f{i}", 10) for i in range(MAX_SPLITS + 1)], 1 << 20)
    assert len(splits([("a", (1 << 20) * 3 + 1)], 1 << 20)) == 4


@pytest.mark.slow
def test_a_failed_spark_job_is_one_line(corrupt_stretch, tmp_path):
    """A task's own error is the one line printed, no Py4J trace: here the executors' Python lacks gpumr."""
    bare = tmp_path / "python-without-site-packages"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # no site-packages: no gpumr (pyspark comes
    bare.chmod(0o755)                                                     # on PYTHONPATH from Spark itself)
    out = subprocess.run([sys.executable, "-m", "gpumr", "spark", "faces", corrupt_stretch[0], "-o",
                          str(tmp_path / "o"), "--master", "local[1]"],
                         capture_output=True, text=True, env=dict(os.environ, PYSPARK_PYTHON=str(bare)),
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 1
    err = out.stderr.strip().splitlines()
    assert err[-1].endswith("gpumr: error: a task of the spark job failed: ModuleNotFoundError: No module named "
                            "'gpumr' (see: gpumr help job-failed)")
    for trace in ("Traceback", "Py4J", "Exception", "\tat "):  # Spark's start-up notes only, then that line
        assert trace not in out.stderr
    assert not os.path.exists(tmp_path / "o")


def test_the_mrjob_job_reads_s3_inputs_through_the_layer(s3, corrupt_stretch, sample_frames, tmp_path):
    """The manifest path on the local runner (mrjob's wrapper script, a task process per file) and inline."""
    from gpumr.jobs.face_detect import MRFaceDetect
    path, frames, offsets = corrupt_stretch
    local = frames_under(sample_frames, tmp_path, "frames")
    uris = [upload(s3, str(local / n), f"mr/{n}") for n in sorted(os.listdir(local))] + [upload(s3, path, "mr/c.seq")]
    want_counts, _ = run_job(MRFaceDetect, [str(local), path], str(tmp_path / "want"), "inline", ["--device", "cpu"])
    want = by_key(lines_of(tmp_path / "want"))
    assert want.pop(path)["lost"][0] == offsets[3]
    for runner in ("local", "inline"):
        counts, _ = run_job(MRFaceDetect, [f"s3://{BUCKET}/mr/"], str(tmp_path / runner), runner, ["--device", "cpu"])
        got = by_key(lines_of(tmp_path / runner))
        assert got.pop(uris[-1])["lost"][0] == offsets[3], runner
        assert got == want and no_ms(counts) == no_ms(want_counts), runner


def test_a_missing_uri_is_one_line_before_any_task(s3, tmp_path):
    missing = f"s3://{BUCKET}/nothing/here"
    with pytest.raises(GpumrError, match=f"^{missing}: no such file or directory$"):
        run_spark("faces", [missing, "-o", str(tmp_path / "o")])  # before a Spark context is made
    with pytest.raises(GpumrError, match=f"^{missing}: no such file or directory$"):
        run_workload("faces", [missing, "-o", str(tmp_path / "o")], "local")  # (mrjob's local runner: the same)
    with pytest.raises(GpumrError, match="^gs://b/x: .*pyarrow has no filesystem for gs://$"):
        run_spark("faces", ["gs://b/x", "-o", str(tmp_path / "o")])
