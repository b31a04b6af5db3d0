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


def test_a_file_that_grows_while_packed_is_read_to_its_end(tmp_path, monkeypatch):
    f = tmp_path / "grows.bin"
    f.write_bytes(b"a" * 1000)
    real = os.fstat

    def grown(fd):
        st = real(fd)
        with open(f, "ab") as g:  # grows after its size was taken
            g.write(b"b" * 3_000_000)
        return st
    monkeypatch.setattr(packing.os, "fstat", grown)
    assert packing._read_regular(str(f)) == b"a" * 1000 + b"b" * 3_000_000
