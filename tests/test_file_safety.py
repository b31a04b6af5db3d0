"""Users' files are never lost, read forever or written outside their place (issue 11, items 1, 2, 6-8, 10, 11).

Real files, folders, FIFOs, sockets and symbolic links; commands run through ``gpumr.cli.main`` in this
process, or as a child process where a hang is the failure being tested.
"""

import os
import socket
import stat
import struct
import subprocess
import sys
import zlib

import pytest

import gpumr
import seqfile
from gpumr.cli import main
from seqfile.atomic import AtomicFile, swap_into_place, temp_dir_beside


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def tree_listing(root):
    """Every path under ``root`` (links not followed) with its bytes (None for folders and links)."""
    got = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            regular = os.path.isfile(path) and not os.path.islink(path)
            got[rel] = open(path, "rb").read() if regular else None
    return got


def temp_leftovers(root):
    return [p for p in tree_listing(root) if p.endswith((".tmp", ".old")) or ".unpack." in p]


@pytest.fixture
def src(tmp_path):
    s = tmp_path / "src"
    (s / "a").mkdir(parents=True)
    (s / "x.jpg").write_bytes(b"x" * 10)
    (s / "a" / "y.jpg").write_bytes(b"y" * 300)
    (s / "a" / "z.jpg").write_bytes(b"z" * 30)
    return s


def keys_of(path):
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, n) for n in os.listdir(path) if n.startswith("part-"))
    return sorted(k for p in paths for k, _, _ in seqfile.Reader(p))


# ---- item 1: gpumr demo --output DIR -------------------------------------------------------------

def test_demo_refuses_a_checkout_and_any_folder_it_did_not_make(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "setup.py").write_text("setup()\n")
    (tmp_path / "frames").mkdir()
    (tmp_path / "frames" / "frame_00000.jpg").write_bytes(b"a frame")
    (tmp_path / ".frames.gpumr").write_text('{"gpumr": "0", "output": "gpumr sample", "versions": '
                                           '[{"frame_00000.jpg": [7, "' + "0" * 64 + '"]}]}')
    before = tree_listing(tmp_path)
    for cwd, output, words in ((checkout, ".", "is the current folder"),
                               (checkout, str(checkout), "is the current folder"),
                               (tmp_path, "checkout", "holds .git, which gpumr demo did not make"),
                               (tmp_path, "frames", "an output of gpumr sample, not of gpumr demo")):
        proc = subprocess.run([sys.executable, "-m", "gpumr", "demo", "--output", output], cwd=cwd,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert tree_listing(tmp_path) == before


# ---- item 2: pack --force ------------------------------------------------------------------------

def test_force_never_replaces_a_users_folder(src, tmp_path, capsys):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    (thesis / "part-00000.seq").write_bytes(b"SEQ not really")
    before = tree_listing(thesis)
    code, _, err = run(capsys, "pack", src, "-o", thesis, "--shards", "2", "--force", "-q")
    assert code == 1 and "holds chapter1.tex, which gpumr pack did not make" in err and err.count("\n") == 1
    assert tree_listing(thesis) == before
    # only part files, but one that gpumr pack did not write (a SequenceFile from elsewhere): not replaced
    (thesis / "chapter1.tex").unlink()
    (thesis / "part-00000.seq").unlink()
    write_seq(thesis / "part-00000.seq", [("k", b"from Hadoop")])
    before = tree_listing(thesis)
    code, _, err = run(capsys, "pack", src, "-o", thesis, "--shards", "2", "--force", "-q")
    assert code == 1 and "part-00000.seq was not written by gpumr pack" in err
    assert tree_listing(thesis) == before
    assert sorted(os.listdir(tmp_path)) == ["src", "thesis"]


def test_force_never_replaces_the_current_folder_or_the_inputs(src, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(src)
    before = tree_listing(tmp_path)
    for out, words in ((".", "is the current folder"), (str(tmp_path), "is the current folder or holds it"),
                       (str(src / "a"), "is or holds the input")):
        source = str(src / "a") if out == str(src / "a") else str(src / "x.jpg")
        code, _, err = run(capsys, "pack", source, "-o", out, "--shards", "2", "--force", "-q")
        assert code == 1 and words in err, err
    code, _, err = run(capsys, "pack", src / "x.jpg", "-o", src / "x.jpg", "--force", "-q")
    assert code == 1 and "is or holds the input" in err
    assert tree_listing(tmp_path) == before


def test_force_replaces_an_earlier_output_only_once_the_new_one_is_complete(src, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(capsys, "pack", src, "-o", out, "--shards", "3", "-q")[0] == 0
    assert sorted(os.listdir(out)) == ["part-00000.seq", "part-00001.seq", "part-00002.seq"]
    assert seqfile.Reader(str(out / "part-00000.seq")).header.metadata == {"gpumr.pack": gpumr.__version__}
    old = tree_listing(out)
    # an interrupted pack leaves the old output whole and no temporary folder
    real, calls = seqfile.Writer.append, []

    def flaky(self, key, value):
        calls.append(key)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, key, value)
    monkeypatch.setattr(seqfile.Writer, "append", flaky)
    assert main(["pack", str(src), "-o", str(out), "--shards", "2", "--force", "-q"]) == 130
    assert tree_listing(out) == old and sorted(os.listdir(tmp_path)) == ["out", "src"]
    monkeypatch.setattr(seqfile.Writer, "append", real)
    (src / "new.jpg").write_bytes(b"n")
    code, stdout, _ = run(capsys, "pack", src, "-o", out, "--shards", "2", "--force")
    assert code == 0 and "packed 4 files" in stdout
    assert sorted(os.listdir(out)) == ["part-00000.seq", "part-00001.seq"]
    assert keys_of(str(out)) == ["a/y.jpg", "a/z.jpg", "new.jpg", "x.jpg"]
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_force_on_one_file_replaces_only_its_own_sequencefile(src, tmp_path, capsys):
    notes = tmp_path / "notes.seq"
    notes.write_text("not a SequenceFile")
    hadoops = write_seq(tmp_path / "hadoop.seq", [("k", b"from Hadoop")])  # a SequenceFile gpumr pack did not write
    link = tmp_path / "link.seq"
    good = tmp_path / "good.seq"
    assert run(capsys, "pack", src, "-o", good, "-q")[0] == 0
    os.symlink(str(good), str(link))
    before = tree_listing(tmp_path)
    for out, words in ((notes, "gpumr did not make it"), (hadoops, "gpumr did not make it"),
                       (link, "a symbolic link"), (src, "is or holds the input")):
        code, _, err = run(capsys, "pack", src / "a", "-o", out, "--force", "-q")
        assert code == 1 and words in err, err
    assert tree_listing(tmp_path) == before
    assert run(capsys, "pack", src / "a", "-o", good, "--force", "-q")[0] == 0
    assert keys_of(str(good)) == ["y.jpg", "z.jpg"]


# ---- item 6: image size from the header, before decoding -------------------------------------------

def png_chunk(kind, body, crc=None):
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc & 0xFFFFFFFF)


def test_a_huge_png_with_a_bad_text_crc_is_refused_without_decoding(monkeypatch):
    import cv2

    from gpumr.core import BadRecord
    from gpumr.core.images import decode_gray
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 32000, 32000, 8, 0, 0, 0, 0))
    text = png_chunk(b"tEXt", b"Comment\x00hello", crc=0xDEADBEEF)
    rows = zlib.compress(b"\x00" + b"\x00" * 32000, 9) * 1  # a start of the pixel data; never read
    bomb = b"\x89PNG\r\n\x1a\n" + ihdr + text + png_chunk(b"IDAT", rows) + png_chunk(b"IEND", b"")

    def never(*a, **k):
        raise AssertionError("cv2.imdecode was called")
    monkeypatch.setattr(cv2, "imdecode", never)
    with pytest.raises(BadRecord, match="32000x32000 pixels exceeds the limit"):
        decode_gray(bomb)
    for unreadable in (b"\x89PNG\r\n\x1a\n" + text, b"\xff\xd8\xff\xda" + b"\x00" * 40, b"#?RADIANCE\n" + b"\x00" * 40):
        with pytest.raises(BadRecord, match="size cannot be read from its header"):
            decode_gray(unreadable)


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp", ".tiff", ".webp", ".pgm"])
def test_header_sizes_match_what_opencv_decodes(ext):
    import cv2
    import numpy as np

    from gpumr.core.images import decode_gray, image_size
    img = (np.arange(37 * 53) % 251).astype(np.uint8).reshape(37, 53)
    data = cv2.imencode(ext, img)[1].tobytes()
    assert image_size(data) == (53, 37)
    assert decode_gray(data).shape == (37, 53)


# ---- item 7: pack and files that are not regular ---------------------------------------------------

def test_pack_skips_fifos_sockets_and_device_links_and_names_them(src, tmp_path):
    os.mkfifo(str(src / "pipe"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "a" / "sock"))
    os.symlink("/dev/zero", str(src / "zero.jpg"))
    expected = [("pipe", "a FIFO"), ("a/sock", "a socket"), ("zero.jpg", "a symbolic link to a character device")]
    try:
        os.mknod(str(src / "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # where this process may (root)
        expected.append(("null", "a character device"))
    except OSError:
        pass
    try:
        proc = subprocess.run([sys.executable, "-m", "gpumr", "pack", str(src), "-o", str(tmp_path / "o.seq")],
                              capture_output=True, text=True, timeout=60)
    finally:
        sock.close()
    assert proc.returncode == 0, proc.stderr
    for name, words in expected:
        assert f"gpumr: warning: skipped {src / name}: {words}" in proc.stderr
    assert f"skipped {len(expected)} (see warnings)" in proc.stdout
    assert keys_of(str(tmp_path / "o.seq")) == ["a/y.jpg", "a/z.jpg", "x.jpg"]
    assert temp_leftovers(tmp_path) == []


def test_pack_refuses_a_fifo_or_a_device_named_as_a_source(tmp_path):
    os.mkfifo(str(tmp_path / "pipe"))
    os.symlink("/dev/zero", str(tmp_path / "zero"))
    for source, words in (("pipe", "a FIFO (named pipe), not a regular file"), ("zero", "a character device")):
        proc = subprocess.run([sys.executable, "-m", "gpumr", "pack", str(tmp_path / source), "-o",
                               str(tmp_path / "o.seq"), "-q"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and words in proc.stderr and proc.stderr.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["pipe", "zero"]


# ---- items 8 and 10: unpack writes inside DIR only, one line per refused key -------------------------

def write_seq(path, records):
    with seqfile.Writer(str(path)) as w:
        for k, v in records:
            w.append(k, v)
    return path


def test_unpack_never_writes_through_a_link_inside_dir(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "target").write_bytes(b"precious")
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(elsewhere), str(dest / "lnk"))
    os.symlink(str(elsewhere / "target"), str(dest / "file"))
    seq = write_seq(tmp_path / "in.seq", [("ok/fine.txt", b"1"), ("lnk/evil", b"2"), ("lnk/target", b"3"),
                                          ("file", b"4")])
    for extra in ([], ["--force"]):
        code, out, err = run(capsys, "unpack", seq, "-d", dest, *extra)
        assert code == 1 and "refused 3" in out
        assert "refusing key 'lnk/evil': 'lnk' in " in err and "is a symbolic link" in err
        assert "refusing key 'file': it exists in" in err and "as a symbolic link; unpack replaces only regular" in err
        assert "Traceback" not in err
    assert tree_listing(elsewhere) == {"target": b"precious"}
    assert (dest / "ok" / "fine.txt").read_bytes() == b"1" and os.path.islink(dest / "file")
    assert temp_leftovers(tmp_path) == []


def test_unpack_refusals_are_one_line_each_naming_the_key(tmp_path, capsys):
    deep = "/".join(["d"] * 2000) + "/f"
    long_name = "n" * 300
    keys = [("a", b"file a"), ("a/b", b"under a file"), ("c/d", b"in folder c"), ("c", b"a folder already"),
            ("dup.txt", b"first"), ("dup.txt", b"second"), ("nul\x00.txt", b"x"), (long_name, b"x"), (deep, b"x"),
            ("line\nbreak.txt", b"fine"), ("../up", b"x"), ("/abs", b"x")]
    seq = write_seq(tmp_path / "in.seq", keys)
    dest = tmp_path / "dest"
    proc = subprocess.run([sys.executable, "-m", "gpumr", "unpack", str(seq), "-d", str(dest)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    refusals = [ln for ln in lines if ln.startswith("gpumr: error: refusing key")]
    assert len(refusals) == 8 and lines[-1].startswith("gpumr: error: refused 8 of 12 records")
    for key, words in (("a/b", "'a' in"), ("c", "exists in"), ("dup.txt", "a duplicate"), ("nul\\x00.txt", "NUL"),
                       (long_name, "300 bytes long"), (deep[:60], "2000 folders deep"), ("../up", "climbs out"),
                       ("/abs", "absolute")):
        assert any(f"refusing key '{key}" in ln and words in ln for ln in refusals), (key, proc.stderr)
    assert "unpacked 4 records" in proc.stdout and "refused 8" in proc.stdout
    assert (dest / "a").read_bytes() == b"file a" and (dest / "dup.txt").read_bytes() == b"first"
    assert (dest / "line\nbreak.txt").read_bytes() == b"fine" and (dest / "c" / "d").read_bytes() == b"in folder c"
    assert temp_leftovers(tmp_path) == [] and not (tmp_path / "up").exists()


def test_unpack_replaces_only_files_it_wrote_and_only_with_force(tmp_path, capsys):
    dest = tmp_path / "dest"
    (dest / "folder").mkdir(parents=True)
    (dest / "mine.txt").write_bytes(b"mine")
    seq = write_seq(tmp_path / "in.seq", [("mine.txt", b"new"), ("folder", b"x"), ("sub/a.txt", b"a")])
    code, out, err = run(capsys, "unpack", seq, "-d", dest)
    assert code == 1 and "refused 2" in out and "(use --force to replace files that gpumr wrote)" in err
    # --force replaces neither a file gpumr did not write nor a folder
    code, out, err = run(capsys, "unpack", seq, "-d", dest, "--force")
    assert code == 1 and "refused 2" in out and "gpumr did not write it" in err and "as a folder" in err
    assert (dest / "mine.txt").read_bytes() == b"mine" and (dest / "folder").is_dir()
    # what unpack wrote is recorded beside DIR (the proof .dest.gpumr: nothing in DIR but the records), so --force
    # replaces it ...
    assert sorted(os.listdir(tmp_path)) == [".dest.gpumr", "dest", "in.seq"]
    assert sorted(os.listdir(dest)) == ["folder", "mine.txt", "sub"]
    seq2 = write_seq(tmp_path / "in2.seq", [("sub/a.txt", b"A2"), ("sub/b.txt", b"b")])
    assert run(capsys, "unpack", seq2, "-d", dest, "-q", "--force")[0] == 0
    assert (dest / "sub" / "a.txt").read_bytes() == b"A2" and (dest / "sub" / "b.txt").read_bytes() == b"b"
    # ... until someone changes it: then it is theirs
    (dest / "sub" / "a.txt").write_bytes(b"edited")
    code, out, err = run(capsys, "unpack", seq2, "-d", dest, "--force")
    assert code == 1 and "refused 1" in out and "refusing key 'sub/a.txt'" in err
    assert (dest / "sub" / "a.txt").read_bytes() == b"edited"
    assert temp_leftovers(tmp_path) == []


# ---- item 11: names, own outputs, the symlink policy, listings --------------------------------------

def test_a_file_name_that_is_not_utf8_is_named(src, tmp_path, capsys):
    bad = os.path.join(os.fsencode(str(src)), b"caf\xe9.jpg")
    with open(bad, "wb") as f:
        f.write(b"latin-1 name")
    code, _, err = run(capsys, "pack", src, "-o", tmp_path / "o.seq", "-q")
    assert code == 1 and f"{src}/caf\\xe9.jpg: the file name is not valid UTF-8" in err and err.count("\n") == 1
    assert not (tmp_path / "o.seq").exists()
    code, _, _ = run(capsys, "pack", src, "-o", tmp_path / "o.seq", "-q", "--exclude", "caf*")
    assert code == 0


def test_force_with_the_output_inside_the_input_never_packs_the_old_output(src, tmp_path, capsys):
    out = src / "packed"
    assert run(capsys, "pack", src, "-o", out, "--shards", "2", "-q")[0] == 0
    assert keys_of(str(out)) == ["a/y.jpg", "a/z.jpg", "x.jpg"]
    code, _, _ = run(capsys, "pack", src, "-o", out, "--shards", "2", "-q", "--force")
    assert code == 0 and keys_of(str(out)) == ["a/y.jpg", "a/z.jpg", "x.jpg"]
    one = src / "all.seq"
    assert run(capsys, "pack", src, "-o", one, "-q")[0] == 0
    code, _, err = run(capsys, "pack", src, "-o", one, "-q", "--force")
    assert code == 0 and keys_of(str(one)) == ["a/y.jpg", "a/z.jpg", "x.jpg"]
    assert f"skipped {out}: an earlier gpumr pack output" in err


def test_the_symlink_policy_is_applied_and_said(src, tmp_path, capsys):
    secret = tmp_path / "hostname"
    secret.write_bytes(b"outside")
    os.symlink("a/y.jpg", str(src / "inside.jpg"))
    os.symlink(str(secret), str(src / "outside.jpg"))
    os.symlink("a", str(src / "folderlink"))
    os.symlink(str(tmp_path / "gone"), str(src / "broken.jpg"))
    code, out, err = run(capsys, "pack", src, "-o", tmp_path / "o.seq")
    assert code == 0 and "followed 1 symbolic link to files inside the packed folders; skipped 3" in out
    assert f"skipped {src / 'outside.jpg'}: a symbolic link to {secret}, outside the folder being packed" in err
    assert f"skipped {src / 'folderlink'}: a symbolic link to a folder (folder links are not followed)" in err
    assert f"skipped {src / 'broken.jpg'}: a broken symbolic link" in err
    got = {k: v for k, v, _ in seqfile.Reader(str(tmp_path / "o.seq"))}
    assert got["inside.jpg"] == b"y" * 300 and sorted(got) == ["a/y.jpg", "a/z.jpg", "inside.jpg", "x.jpg"]


def test_ls_escapes_control_characters_in_keys(tmp_path, capsys):
    seq = write_seq(tmp_path / "k.seq", [("a\nb\tc.jpg", b"123"), ("back\\slash", b""), ("\x1b[2J", b"e"),
                                         ("é.jpg", b"ok")])
    code, out, _ = run(capsys, "ls", seq)
    assert code == 0
    assert out.splitlines() == ["a\\nb\\tc.jpg\t3", "back\\\\slash\t0", "\\x1b[2J\t1", "é.jpg\t2"]


# ---- the atomic helper's folder-relative and folder-swapping forms -----------------------------------

def test_atomic_file_relative_to_an_open_folder_never_replaces_without_asking(tmp_path):
    fd = os.open(str(tmp_path), os.O_RDONLY)
    try:
        with AtomicFile("a.txt", dir_fd=fd, replace=False) as f:
            f.write(b"one")
        with pytest.raises(FileExistsError):
            with AtomicFile("a.txt", dir_fd=fd, replace=False) as f:
                f.write(b"two")
        name = "n" * 250
        with AtomicFile(name, dir_fd=fd) as f:  # a name near the limit still gets a temporary twin
            f.write(b"long")
    finally:
        os.close(fd)
    assert (tmp_path / "a.txt").read_bytes() == b"one" and (tmp_path / name).read_bytes() == b"long"
    assert sorted(os.listdir(tmp_path)) == sorted(["a.txt", name])


def test_swap_into_place_sets_the_old_folder_aside(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_bytes(b"o")
    stage = temp_dir_beside(out)
    open(os.path.join(stage, "new"), "wb").close()
    old = swap_into_place(stage, out)
    assert os.listdir(out) == ["new"] and os.listdir(old) == ["old"]
    assert os.path.dirname(old) == str(tmp_path) and os.path.basename(old).startswith(".out.")
    assert swap_into_place(temp_dir_beside(tmp_path / "fresh"), tmp_path / "fresh") is None
