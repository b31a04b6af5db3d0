"""Corrupt and truncated input: the library's error, never another exception or a hang."""

import struct

import pytest

import seqfile
from seqfile import SequenceFileError
from conftest import make_records


def _file(tmp_path, comp, codec, n=6):
    path = str(tmp_path / f"c-{comp}.seq")
    recs = make_records(n, seed=5, max_size=800)
    with seqfile.Writer(path, compression=comp, codec=codec, sync_interval=300, block_size=900,
                        metadata={"k": "v"}) as w:
        for k, v in recs:
            w.append(k, v)
    return path, recs, open(path, "rb").read()


def _read_all(path):
    return [(k, v) for k, v, _ in seqfile.Reader(path)]


KINDS = [("NONE", None), ("RECORD", "default"), ("BLOCK", "default"), ("BLOCK", "bzip2"), ("RECORD", "snappy")]


@pytest.mark.parametrize("comp, codec", KINDS)
def test_every_truncation(tmp_path, comp, codec):
    path, recs, data = _file(tmp_path, comp, codec)
    cut = str(tmp_path / "cut.seq")
    for n in range(len(data)):
        with open(cut, "wb") as f:
            f.write(data[:n])
        try:
            got = _read_all(cut)
        except SequenceFileError as exc:
            assert exc.path == cut and "cut.seq" in str(exc)
            continue
        assert got == recs[:len(got)], n  # a cut at a record boundary is a valid shorter file


@pytest.mark.parametrize("comp, codec", KINDS)
def test_every_byte_flip(tmp_path, comp, codec):
    path, recs, data = _file(tmp_path, comp, codec, n=4)
    bad = str(tmp_path / "bad.seq")
    for i in range(len(data)):
        for flip in (0xFF, 0x80):
            with open(bad, "wb") as f:
                f.write(data[:i] + bytes([data[i] ^ flip]) + data[i + 1:])
            try:
                _read_all(bad)
            except SequenceFileError:
                pass


def test_header_errors_name_file_offset_and_expectation(tmp_path):
    p = tmp_path / "x.seq"
    p.write_bytes(b"\xff\xd8\xff\xe0JFIF")
    with pytest.raises(SequenceFileError, match=r"x\.seq at byte 0: not a SequenceFile"):
        seqfile.Reader(str(p))
    p.write_bytes(b"SEQ\x05")
    with pytest.raises(SequenceFileError, match="version 5"):
        seqfile.Reader(str(p))
    p.write_bytes(b"SEQ\x06\x05Text")
    with pytest.raises(SequenceFileError, match="file ends inside the key class name"):
        seqfile.Reader(str(p))


def test_huge_length_fields_are_refused_before_allocating(tmp_path):
    path, recs, data = _file(tmp_path, "NONE", None)
    hsize = seqfile.Reader(path).header.size
    bad = str(tmp_path / "huge.seq")
    with open(bad, "wb") as f:
        f.write(data[:hsize] + struct.pack(">ii", 2**31 - 1, 2**31 - 10) + data[hsize + 8:])
    with pytest.raises(SequenceFileError, match="do not fit"):
        _read_all(bad)


def test_corrupt_record_is_reported_and_reading_resumes_at_next_sync(tmp_path):
    path, recs, data = _file(tmp_path, "NONE", None, n=40)
    reader = seqfile.Reader(path)
    offsets = [r.offset for r in reader]
    # Break the length field of the 3rd record: the records up to the next sync are lost, no others.
    victim = offsets[2]
    bad = str(tmp_path / "bad.seq")
    with open(bad, "wb") as f:
        f.write(data[:victim] + struct.pack(">i", -7) + data[victim + 4:])
    errors = []
    got = [(k, v) for k, v, _ in seqfile.Reader(bad, on_error=errors.append)]
    assert len(errors) == 1 and "bad.seq" in str(errors[0])
    next_sync = min(o for o in offsets if o > victim and data[o:o + 4] == b"\xff\xff\xff\xff")
    expected = [r for r, o in zip(recs, offsets) if o < victim or o >= next_sync]
    assert got == expected
    assert 0 < len(recs) - len(got) < len(recs) // 2


def test_writer_is_atomic(tmp_path):
    target = tmp_path / "out.seq"
    with pytest.raises(RuntimeError):
        with seqfile.Writer(str(target)) as w:
            w.append("a", b"1")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_missing_codec_library_is_named(monkeypatch, tmp_path):
    import builtins
    real = builtins.__import__

    def no_cramjam(name, *a, **k):
        if name == "cramjam":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_cramjam)
    with pytest.raises(ValueError, match="cramjam"):
        seqfile.Writer(str(tmp_path / "z.seq"), compression="BLOCK", codec="zstd")
