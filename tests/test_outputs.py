"""One ownership rule for every output (issue 19, class 1) and a bundle of declared files only (class 6).

Real files, folders, links and processes: commands run through ``gpumr.cli.main`` in this process, or as a
child process where an interrupt or a file dropped in mid-run is the point. The Spark findings are tested
on a real cluster in test_spark.py.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest
from test_file_safety import run
from test_file_safety import tree_listing as listing

import seqfile
from gpumr.io.outputs import digest, proof_path, write_file

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpumr(*argv, cwd, wait=True):
    """``python -m gpumr ARGV`` as a child process in ``cwd``."""
    cmd = [sys.executable, "-m", "gpumr", *map(str, argv)]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def wait_for(what, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = what()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError("timed out")


def hidden_work(folder, name):
    """The hidden twins of output ``name`` in ``folder`` (``.NAME.xxxxxxxx.tmp``: work in progress)."""
    return [n for n in os.listdir(folder) if n.startswith(f".{name}.") and n.endswith(".tmp")]


# ---- a folder of parts ------------------------------------------------------------------------------

def test_an_earlier_folder_is_replaced_and_what_appeared_in_it_meanwhile_is_kept_and_named(tmp_path):
    """A real process replaces its earlier output while a user drops a file into it and edits a frame."""
    assert gpumr("sample", "frames", "-n", "3", cwd=tmp_path).returncode == 0
    assert sorted(os.listdir(tmp_path)) == [".frames.gpumr", "frames"]  # the proof lies beside, not inside
    assert sorted(os.listdir(tmp_path / "frames")) == [f"frame_0000{i}.jpg" for i in range(3)]
    proof = json.loads((tmp_path / ".frames.gpumr").read_text())
    assert proof["output"] == "gpumr sample" and sorted(proof["versions"][0]) == sorted(os.listdir(tmp_path / "frames"))
    edited = bytearray((tmp_path / "frames" / "frame_00001.jpg").read_bytes())
    edited[-3] ^= 0xFF  # same size, other content: only the contents say it is no longer gpumr's
    (tmp_path / "frames" / "frame_00001.jpg").write_bytes(bytes(edited))
    proc = gpumr("sample", "frames", "-n", "60", cwd=tmp_path, wait=False)
    try:
        wait_for(lambda: hidden_work(tmp_path, "frames"))  # at work beside the old output
        (tmp_path / "frames" / "notes.txt").write_text("mine")
    finally:
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert sorted(os.listdir(tmp_path / "frames")) == [f"frame_{i:05d}.jpg" for i in range(60)]
    (kept,) = [n for n in os.listdir(tmp_path) if n.endswith(".old")]
    assert sorted(os.listdir(tmp_path / kept)) == ["frame_00001.jpg", "notes.txt"]  # its own unchanged frames went
    assert (tmp_path / kept / "notes.txt").read_text() == "mine"
    assert (tmp_path / kept / "frame_00001.jpg").read_bytes() == bytes(edited)
    assert f"gpumr: warning: frames: the old output was set aside as {tmp_path / kept}, not removed" in err
    assert sorted(os.listdir(tmp_path)) == sorted([".frames.gpumr", kept, "frames"])


def test_a_folder_is_refused_unless_its_proof_vouches_for_all_it_holds(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "sample", "a", "-n", "2")[0] == 0
    (tmp_path / "a" / "extra.jpg").write_bytes(b"a user's")
    assert run(capsys, "sample", "b", "-n", "2")[0] == 0
    with open(tmp_path / "b" / "frame_00000.jpg", "ab") as f:
        f.write(b"appended")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "empty-folder").mkdir()
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    (tmp_path / "empty").mkdir()
    os.symlink(tmp_path / "empty", tmp_path / "to-empty")
    assert run(capsys, "sample", "e", "-n", "2")[0] == 0
    before = listing(tmp_path)
    for out, words in (("a", "holds extra.jpg, which gpumr sample did not make"),
                       ("b", "holds frame_00000.jpg, which changed since gpumr sample wrote it"),
                       ("c", "holds empty-folder, which gpumr sample did not make"),
                       ("link", "is a symbolic link"),
                       ("to-empty/", "is a symbolic link"),  # as shell completion writes it: still the link
                       (".", "is the current folder"),
                       (str(tmp_path.parent), "is the current folder or holds it")):
        code, _, err = run(capsys, "sample", out, "-n", "2")
        assert code == 1 and words in err and err.count("\n") == 1, err
    # another command's output is not this one's to replace
    code, _, err = run(capsys, "faces", "render", "x", "--images", "y", "-d", "e")
    assert code == 1 and "e: an output of gpumr sample, not of gpumr faces render" in err
    assert listing(tmp_path) == before
    assert run(capsys, "sample", "d", "-n", "2")[0] == 0  # an empty folder holds nothing to lose


def test_a_commit_that_fails_leaves_no_hidden_work(tmp_path):
    """``gpumr spark -o DIR`` commits its FolderOutput itself (no ``with``): a failing commit must clean up too."""
    from gpumr.errors import GpumrError
    from gpumr.io.outputs import FolderOutput
    out = FolderOutput(str(tmp_path / "out"), "gpumr spark")
    with open(os.path.join(out.begin(), "part-00000.attempt-7"), "wb") as f:
        f.write(b"x\n")
    assert hidden_work(tmp_path, "out")
    (tmp_path / ".out.gpumr").write_text("my notes")  # a user's file takes the proof's name meanwhile
    with pytest.raises(GpumrError, match="not a gpumr proof file"):
        out.commit({"part-00000": ("part-00000.attempt-7", 2, None)})
    assert listing(tmp_path) == {".out.gpumr": b"my notes"}  # no hidden stage left, nothing published


def test_render_never_draws_over_a_users_frames(tmp_path, capsys):
    """``faces render -d DIR`` used to overwrite files of DIR named like the keys (a user's original frames)."""
    frames = tmp_path / "frames"
    frames.mkdir()
    (frames / "frame_00000.jpg").write_bytes(b"the original")
    code, _, err = run(capsys, "faces", "render", tmp_path / "out", "--images", tmp_path / "in.seq", "-d", frames)
    assert code == 1 and "holds frame_00000.jpg, which gpumr faces render did not make" in err
    assert listing(tmp_path) == {"frames": None, "frames/frame_00000.jpg": b"the original"}


# ---- Ctrl-C ------------------------------------------------------------------------------------------

def test_ctrl_c_mid_write_leaves_nothing_and_the_old_outputs_whole(tmp_path):
    """SIGINT to a real process in the middle of writing a folder, then a file: nothing visible, nothing left."""
    assert gpumr("sample", "frames", "-n", "2", cwd=tmp_path).returncode == 0
    assert gpumr("ct", "phantom", "--voxels", "8", "--angles", "4", "-o", "proj.seq", cwd=tmp_path).returncode == 0
    before = listing(tmp_path)
    for argv, name in ((("sample", "frames", "-n", "2000"), "frames"),
                       (("ct", "phantom", "--voxels", "128", "--angles", "2000", "-o", "proj.seq"), "proj.seq")):
        proc = gpumr(*argv, cwd=tmp_path, wait=False)
        try:
            def writing():
                for n in hidden_work(tmp_path, name):
                    p = tmp_path / n
                    try:
                        if (p.is_dir() and os.listdir(p / name)) or (p.is_file() and p.stat().st_size > 4096):
                            return n
                    except FileNotFoundError:  # the hidden twin is made, its folder inside not yet
                        pass
            wait_for(writing)
            assert all(n.startswith(".") for n in set(os.listdir(tmp_path)) - set(before))  # nothing visible
            proc.send_signal(signal.SIGINT)
        finally:
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "gpumr: interrupted" in err, err
        assert listing(tmp_path) == before


# ---- single files ------------------------------------------------------------------------------------

def test_a_file_is_replaced_only_while_it_holds_what_gpumr_wrote(tmp_path, capsys):
    mine = tmp_path / "mine.json"
    mine.write_text("my notes")
    g = tmp_path / "g.json"
    code, _, err = run(capsys, "ct", "geometry", "--voxels", "8", "-o", mine)
    assert code == 1 and "mine.json: exists and gpumr did not make it" in err and mine.read_text() == "my notes"
    assert run(capsys, "ct", "geometry", "--voxels", "8", "-o", g)[0] == 0
    assert json.loads(open(proof_path(g)).read())["versions"] == [{"": [g.stat().st_size, digest(str(g))[1]]}]
    assert run(capsys, "ct", "geometry", "--voxels", "16", "-o", g)[0] == 0  # its own earlier output: replaced
    assert json.loads(g.read_text())["nVoxel"] == [16, 16, 16]
    # an edit of the same size passes the cheap check before the work, and is caught when the old file is set aside
    edited = g.read_text().replace('"DSO": ', '"DSO":_')
    g.write_text(edited)
    code, _, err = run(capsys, "ct", "geometry", "--voxels", "8", "-o", g)
    assert code == 1 and "not replaced" in err and "the new output was dropped" in err, err
    assert g.read_text() == edited
    # the input of a command is never its output, whoever made it
    h = tmp_path / "h.json"
    assert run(capsys, "ct", "geometry", "--voxels", "8", "-o", h)[0] == 0
    code, _, err = run(capsys, "ct", "phantom", "--geometry", h, "-o", tmp_path / "p.seq", "--truth", h)
    assert code == 1 and "h.json: is or holds the input" in err
    assert sorted(os.listdir(tmp_path)) == [".g.json.gpumr", ".h.json.gpumr", "g.json", "h.json", "mine.json"]


def test_reading_a_proof_sets_aside_its_size_not_the_cap(tmp_path):
    """A proof was read with ``read(MAX_PROOF + 1)``, which allocates the 256 MiB cap on every check."""
    import tracemalloc

    from gpumr.io.outputs import Proof
    write_file(str(tmp_path / "g.json"), b"{}", "gpumr ct geometry")
    tracemalloc.start()
    try:
        proof = Proof.load(proof_path(tmp_path / "g.json"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert proof.output == "gpumr ct geometry" and peak < 1 << 20, peak


def test_build_kernels_and_bundle_refuse_a_users_file_before_any_work(tmp_path, capsys, monkeypatch):
    from gpumr.engines.mrjob.bundle import ARCHIVE
    monkeypatch.chdir(tmp_path)
    from gpumr.gpu import kernels
    (tmp_path / "k").mkdir()
    users = tmp_path / "k" / f"haar-{kernels._digest('haar')}.fatbin"
    users.write_bytes(b"a user's fatbin")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ARCHIVE).write_bytes(b"a user's zip")
    before = listing(tmp_path)
    t0 = time.perf_counter()
    code, _, err = run(capsys, "build-kernels", "-o", tmp_path / "k", "--arch", "80")
    assert code == 1 and f"{users.name}: exists and gpumr did not make it" in err
    code, _, err = run(capsys, "bundle", "-o", tmp_path / "b")
    assert code == 1 and f"{ARCHIVE}: exists and gpumr did not make it" in err
    assert time.perf_counter() - t0 < 20  # refused before nvcc ran or a wheel was fetched
    for argv in (("bundle", "-o", "s3://bucket/b"), ("ct", "geometry", "-o", "hdfs:///g.json")):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "a URI; this output is written to a local path only" in err, err
    assert listing(tmp_path) == before


def test_a_stale_proof_beside_a_pack_folder_goes_with_the_next_pack(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "sample", "out", "-n", "1")[0] == 0
    shutil.rmtree(tmp_path / "out")  # the proof .out.gpumr stays behind
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jpg").write_bytes(b"a")
    for force in ([], ["--force"]):  # pack's shards prove themselves: the stale proof must not block the next pack
        assert run(capsys, "pack", "src", "-o", "out", "--shards", "1", "-q", *force)[0] == 0
        assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_pack_passes_over_gpumrs_proofs(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    write_file(str(src / "a.json"), b"{}", "gpumr ct geometry")
    (src / ".hidden.jpg").write_bytes(b"a user's hidden file is packed")
    code, _, err = run(capsys, "pack", src, "-o", tmp_path / "out.seq", "-q")
    assert code == 0 and "skipped" in err and ".a.json.gpumr: gpumr's proof of authorship" in err
    assert sorted(k for k, _, _ in seqfile.Reader(str(tmp_path / "out.seq"))) == [".hidden.jpg", "a.json"]


def test_a_job_on_this_machine_never_writes_into_a_users_output_folder(tmp_path, capsys):
    """mrjob's inline and local runners write part-NNNNN into --output-dir over whatever is there."""
    (tmp_path / "frames").mkdir()
    (tmp_path / "frames" / "a.jpg").write_bytes(b"not an image")
    assert run(capsys, "pack", tmp_path / "frames", "-o", tmp_path / "in.seq", "-q")[0] == 0
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-00000").write_text("my results")
    proc = subprocess.run([sys.executable, "-m", "gpumr.jobs.face_detect", "-r", "inline", str(tmp_path / "in.seq"),
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{tmp_path / 'out'}: holds part-00000, which gpumr run did not make" in proc.stderr
    assert listing(tmp_path / "out") == {"part-00000": b"my results"}


# ---- class 6: the bundle -------------------------------------------------------------------------------

#: What the planted files hold; no file of the bundle may.
PLANTED = "PLANTED-SECRET-4f1c9a"


def planted_tree(tmp_path):
    """A copy of the source tree with a ``.env``, links to a private key and stray files planted in it."""
    if not os.path.exists(os.path.join(CHECKOUT, "setup.cfg")):
        pytest.skip("needs the source checkout")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.cfg", "setup.py", "README.rst", "gpumr", "seqfile", "jobs", "cuda", "conf"):
        src = os.path.join(CHECKOUT, name)
        if os.path.isdir(src):
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, tree / name)
    key = tmp_path / "id_rsa"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY----- {PLANTED}")
    (tree / "gpumr" / ".env").write_text(f"AWS_SECRET_ACCESS_KEY={PLANTED}")
    os.symlink(key, tree / "gpumr" / "io" / "key.py")  # named like a module
    os.symlink(key, tree / "cuda" / "leak.cu")  # named like package data
    os.symlink(tmp_path, tree / "gpumr" / "outside")  # a folder link
    (tree / "gpumr" / "notes.txt").write_text(PLANTED)
    (tree / "conf" / ".hidden.conf").write_text(PLANTED)
    (tree / "gpumr" / "scratch").mkdir()  # a folder of modules that is no package (setup.py installs no such folder)
    (tree / "gpumr" / "scratch" / "notes.py").write_text(f"# {PLANTED}: not in a package")
    (tree / "gpumr" / "__pycache__").mkdir()
    (tree / "gpumr" / "__pycache__" / "x.cpython-311.pyc").write_text(PLANTED)
    return tree


def declared_names():
    from gpumr.engines.mrjob.bundle import declared_files
    names = {n for n, _ in declared_files(CHECKOUT)}
    assert names == {n for n, _ in declared_files()}  # the installed package holds just what setup.py installs
    assert {"gpumr/jobs/face_detect.py", "gpumr/cuda/haar.cu", "gpumr/conf/mrjob.local.conf",
            "seqfile/reader.py"} <= names
    return names


def test_the_bundle_copies_only_declared_files_never_hidden_ones_or_links(tmp_path):
    from gpumr.engines.mrjob.bundle import copy_declared, write_archive
    tree = planted_tree(tmp_path)
    site = tmp_path / "site"
    copy_declared(str(site), root=str(tree))
    os.symlink(tmp_path / "id_rsa", site / "gpumr" / "late.py")  # a link in the folder being zipped is not followed
    with open(tmp_path / "b.zip", "wb") as f:
        write_archive(str(site), f)
    z = zipfile.ZipFile(tmp_path / "b.zip")
    assert set(z.namelist()) == declared_names()
    assert not any(PLANTED.encode() in z.read(n) for n in z.namelist())


@pytest.mark.slow
def test_a_real_bundle_from_a_planted_source_tree(tmp_path):
    """``gpumr bundle`` run from the planted tree (PYTHONPATH): the zip's gpumr part is the declared files.

    An earlier archive that gpumr made is in the way and is replaced (the rule); a real build fetches wheels
    (from pip's cache here).
    """
    from gpumr.engines.mrjob.bundle import ARCHIVE
    tree = planted_tree(tmp_path)
    write_file(str(tmp_path / "out" / ARCHIVE), b"an earlier gpumr bundle", "gpumr bundle")
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", "import gpumr, sys; from gpumr.cli import main; "
                           "print(gpumr.__file__, file=sys.stderr); sys.exit(main())",
                           "bundle", "-o", str(tmp_path / "out"), "--faces-only"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.startswith(str(tree / "gpumr"))  # built from the planted tree
    z = zipfile.ZipFile(tmp_path / "out" / ARCHIVE)
    ours = {n for n in z.namelist() if n.split("/")[0] in ("gpumr", "seqfile")}
    assert ours == declared_names()
    assert not [n for n in z.namelist() if "__pycache__" in n]
    assert not any(PLANTED.encode() in z.read(n) for n in ours)
    assert sorted(os.listdir(tmp_path / "out")) == [f".{ARCHIVE}.gpumr", ARCHIVE]


def test_a_hashing_writer_hashes_in_order_whatever_it_is_given_and_in_a_forked_child(tmp_path):
    """Large ``bytes`` are hashed in a second thread after the write returns, large buffers while they are
    written (the caller fills them again next), small ones at once: the digest is SHA-256 of the file, in order,
    and a child forked after the hashing thread started (it has no such thread) hashes too."""
    import hashlib
    import io

    from gpumr.io.outputs import HASH_AHEAD, HashingWriter
    big = os.urandom(HASH_AHEAD + 3)
    buffer = bytearray(os.urandom(2 * HASH_AHEAD))
    out = io.BytesIO()
    w = HashingWriter(out)
    for data in (big, b"small", memoryview(buffer)[:HASH_AHEAD + 7], big, bytearray(b"tail")):
        w.write(data)
    kept = bytes(buffer[:HASH_AHEAD + 7])
    buffer[:] = bytes(len(buffer))  # (filled again once its write returned: what was written is what is hashed)
    assert out.getvalue() == big + b"small" + kept + big + b"tail"
    assert w.digest() == (len(out.getvalue()), hashlib.sha256(out.getvalue()).hexdigest())
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (Python 3.12+: a fork beside the hashing thread)
        pid = os.fork()
    if pid == 0:
        child = HashingWriter(io.BytesIO())
        child.write(big)
        os._exit(0 if child.digest() == (len(big), hashlib.sha256(big).hexdigest()) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
