"""What ``gpumr pack`` no longer does per byte: read a self-proving output back to hash it, copy large values
through the writer's buffer. The output is the same."""

import os

import pytest

import seqfile
import seqfile.writer
from gpumr.io import outputs, packing


def _files(folder, sizes):
    folder.mkdir()
    for i, n in enumerate(sizes):
        (folder / f"f{i:03d}.bin").write_bytes(bytes((i + j) % 251 for j in range(n)))
    return folder


def test_a_self_proving_pack_is_not_read_back(tmp_path, monkeypatch):
    src = _files(tmp_path / "src", [10, 70_000, 200_000, 3])

    def refuse(*a, **k):
        raise AssertionError("the output was read back to be hashed")
    monkeypatch.setattr(outputs, "digest", refuse)
    out = tmp_path / "one.seq"
    packing.pack([str(src)], str(out), progress=False)
    got = {k: bytes(v) for k, v, _ in seqfile.Reader(str(out))}
    assert got == {p.name: p.read_bytes() for p in src.iterdir()}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".gpumr")]  # it proves itself: no proof file


@pytest.mark.parametrize("direct", [True, False])
def test_large_values_written_past_the_buffer_are_the_same_records(tmp_path, monkeypatch, direct):
    """Values of 64 KiB and more go to the file directly; the file is the same as through the buffer."""
    if not direct:
        monkeypatch.setattr(seqfile.writer, "_DIRECT", 1 << 40)
    sync = bytes(range(16))
    values = [os.urandom(n) for n in (5, 65_536, 300_000, 1, 70_000) * 40]  # crosses sync intervals
    path = tmp_path / "v.seq"
    with seqfile.Writer(str(path), sync=sync) as w:
        for i, v in enumerate(values):
            w.append(f"k{i}", v)
    assert [bytes(v) for _, v, _ in seqfile.Reader(str(path))] == values
    want = tmp_path / "want.seq"
    monkeypatch.setattr(seqfile.writer, "_DIRECT", 1 << 40)
    with seqfile.Writer(str(want), sync=sync) as w:
        for i, v in enumerate(values):
            w.append(f"k{i}", v)
    assert path.read_bytes() == want.read_bytes()


@pytest.mark.parametrize("start, change", [(1000, 3_000_000), (100_000, 3_000_000), (200_000, -100_000)])
def test_a_file_that_changes_size_while_packed_is_packed_as_read(tmp_path, monkeypatch, start, change):
    """A file that grows (or shrinks) after its size was taken: small, it is read to its end; large, the kernel's
    copy finds it changed, takes its record back and the file is read instead. Every record is whole."""
    src = _files(tmp_path / "src", [70_000, 5])
    f = src / "changes.bin"
    f.write_bytes(b"a" * start)
    real = os.fstat

    def changed(fd):
        st = real(fd)
        if os.path.samestat(st, os.stat(f)):
            with open(f, "r+b") as g:  # changes after its size was taken
                if change > 0:
                    g.seek(0, os.SEEK_END)
                    g.write(b"b" * change)
                else:
                    g.truncate(start + change)
        return st
    monkeypatch.setattr(packing.os, "fstat", changed)
    out = tmp_path / "one.seq"
    packing.pack([str(src)], str(out), progress=False)
    monkeypatch.setattr(packing.os, "fstat", real)
    got = {k: bytes(v) for k, v, _ in seqfile.Reader(str(out))}
    want = b"a" * start + b"b" * change if change > 0 else b"a" * (start + change)
    assert got["changes.bin"] == want and got == {p.name: p.read_bytes() for p in src.iterdir()}


def test_large_files_are_copied_by_the_kernel_into_the_same_records(tmp_path, monkeypatch):
    """Files of 64 KiB and more go from their descriptor into the SequenceFile by os.sendfile (never read into
    Python); the records are those of reading them (the kernel's copy turned off)."""
    src = _files(tmp_path / "src", [10, 65_536, 300_000, 3, 70_000, 1_500_000])
    copied = []
    sendfile = os.sendfile
    monkeypatch.setattr(seqfile.writer.os, "sendfile", lambda *a: copied.append(a[3]) or sendfile(*a))
    packing.pack([str(src)], str(tmp_path / "kernel.seq"), progress=False)
    assert sum(copied) == 65_536 + 300_000 + 70_000 + 1_500_000
    monkeypatch.setattr(seqfile.Writer, "append_file", lambda self, key, fd, size: False)
    packing.pack([str(src)], str(tmp_path / "read.seq"), progress=False)
    records = [[(k, bytes(v)) for k, v, _ in seqfile.Reader(str(tmp_path / n))] for n in ("kernel.seq", "read.seq")]
    assert records[0] == records[1] and len(records[0]) == 6
    assert (tmp_path / "kernel.seq").stat().st_size == (tmp_path / "read.seq").stat().st_size


def test_a_file_written_by_name_after_close_is_proved_by_its_bytes(tmp_path):
    """A compiler's output: the writer closes gpumr's temporary file and another program writes it by name
    (``kernels.compile_into``); the proof holds the bytes it wrote, not the empty hash of what passed through."""
    path = tmp_path / "lib.so"
    out = outputs.FileOutput(str(path), "gpumr test")
    with out as f:
        f.close()
        with open(out.tmp, "wb") as other:
            other.write(b"built by another program")
    proof = outputs.Proof.load(outputs.proof_path(str(path)))
    assert proof.vouches("", outputs.digest(str(path)))
