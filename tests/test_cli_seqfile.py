"""The gpumr pack / ls / info / cat / unpack / sample commands, success and error paths."""

import json
import os
import subprocess
import sys

import pytest

import seqfile
from gpumr.cli import main
from gpumr.io import packing


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    files = {"x.jpg": b"x" * 10, "a/y.jpg": b"y" * 3000, "a/b/z.png": b"z" * 500, "a/b/w.jpg": b""}
    for k, v in files.items():
        (src / k).write_bytes(v)
    return src, files


def test_pack_ls_info_cat_unpack_roundtrip(tree, tmp_path, capsys):
    src, files = tree
    out = str(tmp_path / "p.seq")
    code, stdout, _ = run(capsys, "pack", str(src), "-o", out)
    assert code == 0 and "packed 4 files" in stdout
    assert {k: v for k, v, _ in seqfile.Reader(out)} == files
    assert [k for k, _, _ in seqfile.Reader(out)] == sorted(files)

    code, stdout, _ = run(capsys, "ls", out)
    assert stdout.splitlines() == [f"{k}\t{len(files[k])}" for k in sorted(files)]
    code, stdout, _ = run(capsys, "ls", "--long", out)
    offsets = [int(line.split("\t")[1]) for line in stdout.splitlines()]
    assert offsets == [r.offset for r in seqfile.Reader(out)]

    code, stdout, _ = run(capsys, "info", "--json", out)
    facts = json.loads(stdout)
    assert facts["records"] == 4 and facts["value_bytes"] == sum(map(len, files.values()))
    assert facts["compression"] == "NONE" and facts["key_class"].endswith("Text")

    proc = subprocess.run([sys.executable, "-m", "gpumr", "cat", out, "a/y.jpg"], capture_output=True)
    assert proc.returncode == 0 and proc.stdout == files["a/y.jpg"]

    dest = tmp_path / "unpacked"
    code, stdout, _ = run(capsys, "unpack", out, "-d", str(dest), "-q")
    assert code == 0
    for k, v in files.items():
        assert (dest / k).read_bytes() == v


def test_pack_compressed_and_filtered(tree, tmp_path, capsys):
    src, files = tree
    out = str(tmp_path / "c.seq")
    code, _, _ = run(capsys, "pack", str(src), "-o", out, "--compression", "block", "--codec", "bzip2",
                     "--include", "*.jpg", "--exclude", "a/b/*", "-q")
    assert code == 0
    r = seqfile.Reader(out)
    assert r.header.compression == "BLOCK" and r.header.codec.endswith("BZip2Codec")
    assert [k for k, _, _ in r] == ["a/y.jpg", "x.jpg"]


def test_shards_balance_by_bytes(tmp_path, capsys):
    src = tmp_path / "many"
    src.mkdir()
    sizes = [1000 * (i % 7 + 1) for i in range(40)]
    for i, s in enumerate(sizes):
        (src / f"f{i:02d}.bin").write_bytes(os.urandom(s))
    out = tmp_path / "shards"
    code, _, _ = run(capsys, "pack", str(src), "-o", str(out), "--shards", "4", "-q")
    assert code == 0
    parts = sorted(os.listdir(out))
    assert parts == [f"part-{i:05d}.seq" for i in range(4)]
    loads = [sum(len(v) for _, v, _ in seqfile.Reader(str(out / p))) for p in parts]
    assert sum(loads) == sum(sizes)
    assert max(loads) - min(loads) <= max(sizes)
    keys = [k for p in parts for k, _, _ in seqfile.Reader(str(out / p))]
    assert sorted(keys) == sorted(f"f{i:02d}.bin" for i in range(40))
    code, _, _ = run(capsys, "pack", str(src), "-o", str(tmp_path / "s2"), "--shard-size", "50KB", "-q")
    assert len(os.listdir(tmp_path / "s2")) == -(-sum(sizes) // 50_000)


@pytest.mark.parametrize("setup, message", [
    ("duplicate", "duplicate key 'x.jpg'"),
    ("empty", "no input files"),
    ("missing", "no such file or directory"),
    ("broken link", "a broken symbolic link"),
    ("fifo", "a FIFO (named pipe), not a regular file or folder"),
    ("exists", "already exists"),
])
def test_pack_errors_are_one_line(tree, tmp_path, capsys, setup, message):
    src, _ = tree
    out = tmp_path / "out.seq"
    args = [str(src)]
    if setup == "duplicate":
        other = tmp_path / "other"
        other.mkdir()
        (other / "x.jpg").write_bytes(b"1")
        args = [str(src / "x.jpg"), str(other / "x.jpg")]
    elif setup == "empty":
        (tmp_path / "void").mkdir()
        args = [str(tmp_path / "void")]
    elif setup == "missing":
        args = [str(tmp_path / "nope")]
    elif setup == "broken link":
        os.symlink(str(tmp_path / "gone"), str(src / "broken.jpg"))
        args = [str(src / "broken.jpg")]
    elif setup == "fifo":
        os.mkfifo(str(tmp_path / "pipe"))
        args = [str(tmp_path / "pipe")]
    elif setup == "exists":
        out.write_bytes(b"keep")
    code, stdout, err = run(capsys, "pack", *args, "-o", str(out), "-q")
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("gpumr: error:") and message in err
    assert "Traceback" not in err
    if setup == "exists":
        assert out.read_bytes() == b"keep"
    else:
        assert not out.exists()


def test_interrupted_pack_leaves_nothing(tree, tmp_path, monkeypatch):
    src, _ = tree
    calls = []
    real = seqfile.Writer.append

    def flaky(self, key, value):
        calls.append(key)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, key, value)

    monkeypatch.setattr(seqfile.Writer, "append", flaky)
    for out, extra in ((tmp_path / "one.seq", []), (tmp_path / "dir", ["--shards", "2"])):
        calls.clear()
        assert main(["pack", str(src), "-o", str(out), "-q", *extra]) == 130
        assert sorted(os.listdir(tmp_path)) == ["src"]


def test_unpack_refuses_escaping_keys(tmp_path, capsys):
    for key in ("../evil", "/etc/passwd", "a/../../b", ""):
        path = str(tmp_path / "evil.seq")
        with seqfile.Writer(path) as w:
            w.append("fine.txt", b"ok")
            w.append(key, b"bad")
        code, _, err = run(capsys, "unpack", path, "-d", str(tmp_path / "d"), "-q")
        assert code == 1 and repr(key) in err and "refusing key" in err
        assert not (tmp_path / "evil").exists()


def test_bad_input_files_get_one_line_errors(tmp_path, capsys):
    jpg = tmp_path / "photo.jpg"
    jpg.write_bytes(b"\xff\xd8\xff\xe0" + b"0" * 100)
    for cmd in (["ls", str(jpg)], ["info", str(jpg)], ["cat", str(jpg), "k"], ["unpack", str(jpg), "-d", str(tmp_path)]):
        code, _, err = run(capsys, *cmd)
        assert code == 1 and "photo.jpg at byte 0: not a SequenceFile" in err and err.count("\n") == 1


def test_debug_shows_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpumr", "--debug", "info", str(tmp_path / "none.seq")],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_cat_missing_key(tmp_path, capsys):
    path = str(tmp_path / "k.seq")
    with seqfile.Writer(path) as w:
        w.append("a", b"1")
    code, _, err = run(capsys, "cat", path, "b")
    assert code == 1 and "no record with key 'b'" in err


def test_sample_frames_are_video_like_jpegs(sample_frames):
    import cv2
    names = sorted(os.listdir(sample_frames))
    assert len(names) == 12 and all(n.endswith(".jpg") for n in names)
    sizes = [os.path.getsize(os.path.join(sample_frames, n)) for n in names]
    assert 40_000 < sum(sizes) / len(sizes) < 120_000
    img = cv2.imread(os.path.join(sample_frames, names[0]))
    assert img.shape == (480, 640, 3)


def test_collect_sorted_and_relative(tree):
    src, files = tree
    got = packing.collect([str(src)])
    assert [k for k, _, _ in got] == sorted(files)
