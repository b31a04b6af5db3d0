"""Outputs at URIs under gpumr's one ownership rule (gpumr.io.outputs.UriOutput), against real servers.

S3: moto's S3-protocol server on loopback (the session's ``s3`` fixture);
``file://``: pyarrow's LocalFileSystem, where the same code as for HDFS
runs (publishing by rename; no NameNode here). The rule is checked on both
directly, then through ``gpumr spark`` on the session's ``local-cluster``
(tasks writing into the hidden stage, the driver publishing), and in a
``gpumr spark`` process whose job fails, or that is interrupted while it
publishes (held there by a relay in front of the server).
"""

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import run_spark, run_workload
from s3server import BUCKET, GatedProxy

from gpumr.cli import main
from gpumr.errors import GpumrError
from gpumr.io.outputs import UriOutput
from gpumr.io.packing import pack

NO_JAVA = not shutil.which("java") and not os.environ.get("JAVA_HOME")


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Store:
    """A place to write outputs in, seen without gpumr: a prefix of the bucket (boto3) or a local folder (os)."""

    def __init__(self, kind, s3, tmp_path):
        self.kind, self.s3 = kind, s3
        if kind == "s3":
            self.prefix = f"rule-{secrets.token_hex(4)}"
            self.base = f"s3://{BUCKET}/{self.prefix}"
        else:
            self.root = tmp_path / "store"
            self.root.mkdir()
            self.base = f"file://{self.root}"

    def uri(self, rel):
        return f"{self.base}/{rel}"

    def rel(self, uri):
        return uri[len(self.base) + 1:]

    def keys(self):
        """Every file below the base, hidden ones too (S3's "folder" markers are not files)."""
        if self.kind == "s3":
            return [k[len(self.prefix) + 1:] for k in self.s3.keys(self.prefix + "/") if not k.endswith("/")]
        return sorted(os.path.relpath(os.path.join(d, f), self.root) for d, _, fs in os.walk(self.root) for f in fs)

    def put(self, rel, data):
        if self.kind == "s3":
            self.s3.put(f"{self.prefix}/{rel}", data)
            return
        os.makedirs(os.path.dirname(self.root / rel), exist_ok=True)
        (self.root / rel).write_bytes(data)

    def get(self, rel):
        return self.s3.get(f"{self.prefix}/{rel}") if self.kind == "s3" else (self.root / rel).read_bytes()

    def delete(self, rel):
        if self.kind == "s3":
            self.s3.client().delete_object(Bucket=BUCKET, Key=f"{self.prefix}/{rel}")
        else:
            (self.root / rel).unlink()


@pytest.fixture(params=["s3", "file"])
def store(request, s3, tmp_path):
    return Store(request.param, s3, tmp_path)


def publish(store, contents, attempts=()):
    """An output ``out`` of "gpumr test" made of ``contents`` ({name: bytes}), staged as task attempts would be.

    Each part is staged as ``NAME.attempt-N``; ``attempts`` are further
    staged files that must not be published (attempts that were not chosen).
    Returns what :meth:`UriOutput.commit` returned.
    """
    out = UriOutput(store.uri("out"), "gpumr test", folder=True)
    stage = store.rel(out.begin())
    parts = {}
    for i, (name, data) in enumerate(sorted(contents.items())):
        store.put(f"{stage}/{name}.attempt-{i}", data)
        parts[name] = (f"{name}.attempt-{i}", len(data), sha(data))
    for name in attempts:
        store.put(f"{stage}/{name}", b"half of a lost attempt")
    return out.commit(parts)


def outputs(store):
    """The output's files and the proof: ``{name: bytes}`` (nothing else may be there)."""
    return {k: store.get(k) for k in store.keys()}


def test_one_attempt_per_part_is_published_with_its_proof(store):
    assert publish(store, {"part-00000": b"a\n", "part-00001": b"b\n", "_SUCCESS": b""},
                   attempts=["part-00000.attempt-9"]) is None
    got = outputs(store)
    proof = json.loads(got.pop(".out.gpumr"))
    assert got == {"out/_SUCCESS": b"", "out/part-00000": b"a\n", "out/part-00001": b"b\n"}  # no stage, no attempt
    assert proof["output"] == "gpumr test" and proof["versions"] == [
        {"_SUCCESS": [0, sha(b"")], "part-00000": [2, sha(b"a\n")], "part-00001": [2, sha(b"b\n")]}]


def test_its_own_output_is_replaced_and_what_appeared_meanwhile_is_kept_and_named(store, capsys):
    publish(store, {"part-00000": b"a\n", "part-00001": b"b\n", "part-00002": b"c\n", "_SUCCESS": b""})
    out = UriOutput(store.uri("out"), "gpumr test", folder=True)
    stage = store.rel(out.begin())
    store.put(f"{stage}/p0", b"A\n")
    store.put(f"{stage}/p1", b"B\n")
    # Meanwhile (the job runs): a user's object dropped into the old output, and an old part edited.
    store.put("out/notes.txt", b"mine")
    store.put("out/part-00001", b"edited")
    kept = out.commit({"part-00000": ("p0", 2, sha(b"A\n")), "part-00001": ("p1", 2, sha(b"B\n"))})
    got = outputs(store)
    assert json.loads(got.pop(".out.gpumr"))["versions"] == [{"part-00000": [2, sha(b"A\n")],
                                                              "part-00001": [2, sha(b"B\n")]}]
    aside = store.rel(kept)
    assert aside.startswith(".out.") and aside.endswith(".old")
    # The old output's own parts are gone (part-00002 and _SUCCESS too); the rest kept aside, named.
    assert got == {"out/part-00000": b"A\n", "out/part-00001": b"B\n",
                   f"{aside}/notes.txt": b"mine", f"{aside}/part-00001": b"edited"}
    said = [ln[len("gpumr: warning: "):] for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpumr: warning: ")]
    assert said == [f"{store.uri('out')}: the old output was set aside as {kept}, not removed: it holds files gpumr "
                    "did not make, or that changed since gpumr wrote them"]


def test_what_gpumr_did_not_make_is_refused_before_any_work(store):
    publish(store, {"part-00000": b"a\n"})
    before = outputs(store)
    store.put("out/README", b"notes")
    for kwargs, words in (({}, "holds README, which gpumr test did not make"),
                          ({"replace": False}, r"already exists \(use --force to replace it\)")):
        with pytest.raises(GpumrError, match=words):
            UriOutput(store.uri("out"), "gpumr test", folder=True, **kwargs)
    store.delete("out/README")
    with pytest.raises(GpumrError, match="an output of gpumr test, not of gpumr spark"):
        UriOutput(store.uri("out"), "gpumr spark", folder=True)
    with pytest.raises(GpumrError, match="is or holds the input"):
        UriOutput(store.uri("out"), "gpumr test", folder=True, inputs=[store.uri("out/part-00000")])
    store.put("one.seq", b"SEQ\x06 but not gpumr pack's")
    with pytest.raises(GpumrError, match="one.seq: exists and gpumr did not make it"):
        UriOutput(store.uri("one.seq"), "gpumr pack", folder=False, proves_itself=True)
    store.put("out/.nested/x", b"")
    with pytest.raises(GpumrError, match=r"holds \.nested, which gpumr test did not make"):
        UriOutput(store.uri("out"), "gpumr test", folder=True)
    assert {k: v for k, v in outputs(store).items() if k not in ("one.seq", "out/.nested/x")} == before


def test_a_link_swapped_in_for_the_old_output_is_set_aside_untouched(s3, tmp_path, capsys):
    """file://: the old folder replaced by a symbolic link while gpumr worked; nothing is deleted through it."""
    store = Store("file", s3, tmp_path)
    publish(store, {"part-00000": b"a\n"})
    out = UriOutput(store.uri("out"), "gpumr test", folder=True)
    store.put(f"{store.rel(out.begin())}/p0", b"A\n")
    os.rename(store.root / "out", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", store.root / "out")
    kept = out.commit({"part-00000": ("p0", 2, sha(b"A\n"))})
    assert os.path.islink(store.root / store.rel(kept)) and (tmp_path / "elsewhere" / "part-00000").read_bytes() == b"a\n"
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpumr: warning: ")]
    assert (store.root / "out" / "part-00000").read_bytes() == b"A\n" and said and kept in said[0]


def test_pack_replaces_one_file_at_a_uri_only_while_gpumr_pack_made_it(store, sample_frames, capsys):
    uri = store.uri("one.seq")
    assert main(["pack", sample_frames, "-o", uri, "-q"]) == 0
    first = store.get("one.seq")
    assert main(["pack", sample_frames, "-o", uri, "-q", "--force", "--include", "frame_0000[0-3].jpg"]) == 0
    assert store.keys() == ["one.seq"] and len(store.get("one.seq")) < len(first)  # no stage, set-aside or proof
    store.put("one.seq", b"my notes")
    capsys.readouterr()
    assert main(["pack", sample_frames, "-o", uri, "-q", "--force"]) == 1
    assert "one.seq: exists and gpumr did not make it" in capsys.readouterr().err
    assert store.keys() == ["one.seq"] and store.get("one.seq") == b"my notes"
    # A file that appears at the name while gpumr writes is not replaced: the new output is dropped.
    out = UriOutput(store.uri("two.seq"), "gpumr pack", folder=False, proves_itself=True)
    store.put(store.rel(out.begin()), first)
    store.put("two.seq", b"mine, meanwhile")
    with pytest.raises(GpumrError, match="two.seq: not replaced: it appeared, or changed, while gpumr was writing it"):
        out.commit({"": ("", len(first), None)})
    assert store.keys() == ["one.seq", "two.seq"] and store.get("two.seq") == b"mine, meanwhile"


def test_pack_refuses_a_shard_s3_cannot_publish_before_packing_it(s3, tmp_path):
    """A shard over S3's 5 GiB copy limit was refused only once packed: the whole input read (whole files in
    memory) and written locally first. Here a sparse 5 GiB file, under a 2 GiB address-space limit."""
    import resource
    (tmp_path / "src").mkdir()
    with open(tmp_path / "src" / "huge.bin", "wb") as f:
        f.truncate((5 << 30) + 1)
    (tmp_path / "src" / "small.bin").write_bytes(b"small")
    prefix = f"huge-{secrets.token_hex(4)}"

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    for out, extra, words in ((f"{prefix}.seq", [], f"{prefix}.seq is 5.4 GB, over 5 GiB"),
                              (prefix, ["--shards", "2"], "a shard is 5.4 GB, over 5 GiB")):
        proc = subprocess.run([sys.executable, "-m", "gpumr", "pack", "src", "-o", f"s3://{BUCKET}/{out}", "-q",
                               *extra], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              preexec_fn=limited)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
        assert proc.stderr.startswith(f"gpumr: error: s3://{BUCKET}/{out}: {words}"), proc.stderr
    assert not [k for k in s3.keys() if prefix in k]


def test_a_publish_that_fails_on_s3_leaves_the_old_output_or_nothing(s3, tmp_path):
    """A real failure mid-publish (a staged object gone: the copy fails): before any change the old output
    stays whole; after the first part was published, the parts published and the old output are removed."""
    store = Store("s3", s3, tmp_path)
    old = {"part-00000": b"a\n", "part-00001": b"b\n"}
    publish(store, old)
    before = outputs(store)
    for lost, left in (("p0", before), ("p1", {})):
        out = UriOutput(store.uri("out"), "gpumr test", folder=True)
        stage = store.rel(out.begin())
        for name in ("p0", "p1", "p2"):
            store.put(f"{stage}/{name}", name.encode())
        store.delete(f"{stage}/{lost}")
        with pytest.raises(GpumrError) as failed:
            out.commit({f"part-0000{i}": (f"p{i}", 2, sha(f"p{i}".encode())) for i in range(3)})
        assert str(failed.value).count("\n") == 0 and f"{stage}/{lost}" in str(failed.value)
        got = outputs(store)
        if left:  # the proof vouches for the new output too, which is not there: harmless
            assert json.loads(got.pop(".out.gpumr"))["versions"][1:] == json.loads(left[".out.gpumr"])["versions"]
            left = {k: v for k, v in left.items() if k != ".out.gpumr"}
        assert got == left, lost  # and no stage
    assert "the parts published and the old output were removed" in str(failed.value)
    publish(store, old)  # nothing is in the way of the next run
    assert outputs(store).keys() == before.keys()


# -- through gpumr spark --------------------------------------------------------------------------------
def test_spark_refuses_an_output_uri_it_cannot_write_before_any_task(s3, tmp_path):
    """Checked before a Spark context is made (none is given here: the checks come first)."""
    import seqfile
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        w.append("k", b"v")
    for out, words in (("gs://b/out", "^-o gs://b/out: pyarrow has no filesystem for gs://; this output is written "
                                      "through pyarrow only$"),
                       (f"s3://{BUCKET}", f"^-o s3://{BUCKET}: names the top of a filesystem"),
                       ("s3://no-such-bucket-here/out", r"^s3://no-such-bucket-here/out: no such bucket")):
        with pytest.raises(GpumrError, match=words):
            run_spark("faces", [str(tmp_path / "in.seq"), "-o", out])


def test_spark_checks_its_output_against_the_inputs_as_given_before_fetching_them(s3, tmp_path):
    """The driver fetches file options at URIs (here the projections and their geometry); the output was
    checked only after that download, and against the local copies, never against the URIs given."""
    prefix = f"ct-{secrets.token_hex(4)}"
    assert main(["ct", "phantom", "--voxels", "8", "--angles", "4", "-o", str(tmp_path / "p.seq")]) == 0
    for name in ("p.seq", "p.geometry.json"):
        s3.put(f"{prefix}/{name}", (tmp_path / name).read_bytes())
    with pytest.raises(GpumrError, match=f"^s3://{BUCKET}/{prefix}: is or holds the input s3://{BUCKET}/{prefix}/"):
        run_spark("backproject", ["--projections", f"s3://{BUCKET}/{prefix}/p.seq", "--slab", "4",
                            "-o", f"s3://{BUCKET}/{prefix}"])
    assert s3.keys(prefix) == [f"{prefix}/p.geometry.json", f"{prefix}/p.seq"]


@pytest.mark.parametrize("how", ["dout/../{p}", "./{p}", "{p}/x/.."])
def test_dot_segments_name_the_key_every_check_and_write_uses(s3, tmp_path, how):
    """``-o s3://b/dout/../in`` (or ``./in``): the output rule checked the literal key while writes went to the
    normalized one, and the job ran over the input's folder, leaving a stage and a false proof beside it."""
    import seqfile
    prefix = f"dots-{secrets.token_hex(4)}"
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        w.append("k", b"v")
    s3.put(f"{prefix}/in.seq", (tmp_path / "in.seq").read_bytes())
    out = f"s3://{BUCKET}/" + how.format(p=prefix)
    with pytest.raises(GpumrError, match=f"^s3://{BUCKET}/{prefix}: is or holds the input s3://{BUCKET}/{prefix}/"):
        run_workload("faces", [f"s3://{BUCKET}/{prefix}/in.seq", "-o", out, "--device", "cpu"])
    assert s3.keys(prefix) == [f"{prefix}/in.seq"]
    assert not [k for k in s3.keys() if k.startswith(f".{prefix}") or "dout" in k]


@pytest.fixture(scope="module")
def packed(sample_frames, tmp_path_factory):
    seq = str(tmp_path_factory.mktemp("packed") / "frames")
    pack([sample_frames], seq, shards=2, progress=False)
    return seq


def part_lines(names_and_data):
    return [line for name, data in sorted(names_and_data) if name.rsplit("/", 1)[-1].startswith("part-")
            for line in data.decode("utf-8").splitlines()]


@pytest.mark.slow
def test_spark_replaces_its_output_at_a_uri_keeps_what_appeared_refuses_foreign_and_writes_file_uris(
        sc, s3, packed, tmp_path, capsys):
    args = [packed, "--split-size", "100KiB", "--device", "cpu", "--reducers", "2"]
    run_spark("faces", [*args, "-o", f"s3://{BUCKET}/rerun"], sc=sc)
    first = part_lines((k, s3.get(k)) for k in s3.keys("rerun/"))
    assert len(first) == 12

    # A second run replaces it; an object a user puts into the old output while the job runs is kept and named.
    failed = []
    worker = threading.Thread(target=lambda: failed.extend(
        _raised(run_spark, "faces", [*args, "-o", f"s3://{BUCKET}/rerun"], sc=sc)))
    tracker = sc.statusTracker()
    worker.start()
    t0 = time.monotonic()
    while not tracker.getActiveJobsIds():
        assert time.monotonic() - t0 < 120 and worker.is_alive()
        time.sleep(0.01)
    s3.put("rerun/notes.txt", b"mine")
    assert tracker.getActiveJobsIds()  # put while the job ran, before anything was published
    worker.join(300)
    assert not failed
    keys = [k for k in s3.keys() if k.startswith(("rerun", ".rerun")) and not k.endswith("/")]
    (kept,) = [k for k in keys if k.endswith(".old/notes.txt")]
    assert keys == [kept, ".rerun.gpumr", "rerun/_SUCCESS", "rerun/part-00000", "rerun/part-00001"]
    assert s3.get(kept) == b"mine"
    assert part_lines((k, s3.get(k)) for k in keys) == first
    assert f"the old output was set aside as s3://{BUCKET}/{kept.rsplit('/', 1)[0]}, not removed" in \
        capsys.readouterr().err
    assert len(json.loads(s3.get(".rerun.gpumr"))["versions"]) == 1

    # A prefix holding an object gpumr did not make: refused before any task, untouched.
    s3.put("foreign/README", b"someone's")
    with pytest.raises(GpumrError, match=f"^s3://{BUCKET}/foreign: holds README, which gpumr run did not make"):
        run_spark("faces", [*args, "-o", f"s3://{BUCKET}/foreign"], sc=sc)
    assert s3.keys("foreign") == ["foreign/README"] and not [k for k in s3.keys() if k.startswith(".foreign")]

    # file:// (the code HDFS runs): the same files and lines; staged beside it, renamed in.
    run_spark("faces", [*args, "-o", f"file://{tmp_path}/out"], sc=sc)
    assert sorted(os.listdir(tmp_path)) == [".out.gpumr", "out"]
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["_SUCCESS", "part-00000", "part-00001"]
    assert part_lines((n, (tmp_path / "out" / n).read_bytes()) for n in names) == first


def _raised(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 (reported by the caller)
        return [exc]
    return []


# -- a gpumr spark process that fails, or is interrupted ----------------------------------------------
def spark_process(argv, endpoint, env=()):
    """``gpumr spark ARGV`` as a child process on ``local[1]`` reaching the S3 server through ``endpoint``."""
    return subprocess.Popen([sys.executable, "-m", "gpumr", "spark", *argv, "--master", "local[1]", "--device", "cpu"],
                            env={**os.environ, "AWS_ENDPOINT_URL": endpoint, **dict(env)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def relay(s3, **hold):
    host, port = s3.endpoint.rsplit("/", 1)[1].split(":")
    return GatedProxy((host, int(port)), **hold)


def gpumrs(s3, name):
    """Every object of output ``name`` (its parts, proof, stage, set-aside copies), "folder" markers too."""
    return [k for k in s3.keys() if k == name or k.startswith((f"{name}/", f".{name}."))]


@pytest.mark.slow
@pytest.mark.skipif(NO_JAVA, reason="Spark needs Java 17 (java on PATH or JAVA_HOME)")
def test_a_failed_spark_job_leaves_nothing_at_the_uri(s3, packed, tmp_path):
    """The second task's Python worker dies (as one the OOM killer ends) after the first wrote its part."""
    (tmp_path / "workers").mkdir()
    flaky = tmp_path / "flaky-python"
    flaky.write_text(f"#!/bin/sh\nmkdir '{tmp_path}/workers/first' 2>/dev/null && exec '{sys.executable}' \"$@\"\n"
                     "exit 9\n")
    flaky.chmod(0o755)
    proxy = relay(s3)  # only to see the requests
    try:
        # A new Python worker per task (no daemon, no reuse); local[1] fails the job at the first failed task.
        proc = spark_process(["faces", packed, "-o", f"s3://{BUCKET}/failed", "--reducers", "0",
                              "--split-size", "100KiB"], proxy.endpoint,
                             {"PYSPARK_PYTHON": str(flaky),
                              "PYSPARK_SUBMIT_ARGS": "--conf spark.python.use.daemon=false "
                                                     "--conf spark.python.worker.reuse=false pyspark-shell"})
        _, err = proc.communicate(timeout=300)
    finally:
        proxy.close()
    assert proc.returncode == 1, err
    assert err.strip().splitlines()[-1].startswith("gpumr: error: the Spark job failed: ") and "Traceback" not in err
    staged = [r for r in proxy.requests if r.startswith(f"PUT /{BUCKET}/.failed.".encode()) and b".tmp/part-" in r]
    assert staged, proxy.requests  # the first task's part went into the stage ...
    assert gpumrs(s3, "failed") == []  # ... and nothing is left: no part, no stage, no proof


@pytest.mark.slow
@pytest.mark.skipif(NO_JAVA, reason="Spark needs Java 17 (java on PATH or JAVA_HOME)")
def test_ctrl_c_while_spark_publishes_to_s3_leaves_nothing(s3, packed):
    """SIGINT while the driver publishes (a relay holds its second copy): the first part, published, goes too."""
    proxy = relay(s3, hold_on=(b"x-amz-copy-source", 2))
    try:
        proc = spark_process(["faces", packed, "-o", f"s3://{BUCKET}/cut", "--reducers", "3"], proxy.endpoint)
        assert proxy.holding.wait(300), "the publish never reached the relay's hold point"
        assert [r for r in proxy.requests if r.startswith(f"PUT /{BUCKET}/cut/part-00000 ".encode())]
        proc.send_signal(signal.SIGINT)
        proxy.release()
        _, err = proc.communicate(timeout=120)
    finally:
        proxy.close()
    assert proc.returncode == 130 and "gpumr: interrupted" in err and "Traceback" not in err, err
    assert gpumrs(s3, "cut") == []
