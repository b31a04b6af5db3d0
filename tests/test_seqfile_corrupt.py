"""Corrupt and truncated input: the library's error, never another exception or a hang."""

import struct

import pytest
from conftest import make_records

import seqfile
from seqfile import SequenceFileError
from seqfile.errors import RecordError


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


# -- per-record errors and exact lost ranges (framing intact vs broken) ------
BAD_KEY = b"dir/\xff\xfebad.jpg"


@pytest.mark.parametrize("comp, codec", [("NONE", None), ("RECORD", "default"), ("BLOCK", "default"),
                                         ("BLOCK", "bzip2")])
def test_undecodable_key_is_one_record_error_and_reading_goes_on(tmp_path, comp, codec):
    recs = make_records(30, seed=9, max_size=500)
    recs[7] = (BAD_KEY, recs[7][1])
    path = str(tmp_path / "k.seq")
    with seqfile.Writer(path, compression=comp, codec=codec, sync_interval=2000, block_size=900) as w:
        for k, v in recs:
            w.append(k, v)
    errors = []
    got = [(k, v) for k, v, _ in seqfile.Reader(path, on_error=errors.append)]
    assert got == recs[:7] + recs[8:]  # all 29 others, none skipped
    [err] = errors
    assert isinstance(err, RecordError) and err.key == BAD_KEY and err.lost is None
    assert "k.seq at byte" in str(err) and "key (Text)" in str(err)
    with pytest.raises(RecordError):  # without on_error it raises, naming the file
        list(seqfile.Reader(path))


def test_lost_range_is_exact_and_every_split_cut_agrees(tmp_path):
    recs = make_records(60, seed=3, max_size=700)
    recs[40] = (BAD_KEY, recs[40][1])
    path = str(tmp_path / "s.seq")
    with seqfile.Writer(path, sync_interval=1500) as w:
        for k, v in recs:
            w.append(k, v)
    offsets = [r.offset for r in seqfile.Reader(path, raw=True)]
    data = bytearray(open(path, "rb").read())
    victim = 12
    at = offsets[victim] + (20 if data[offsets[victim]:offsets[victim] + 4] == b"\xff" * 4 else 0)
    data[at:at + 4] = struct.pack(">i", 1 << 30)  # a length past the end: broken framing
    open(path, "wb").write(bytes(data))
    resume = next(o for o in offsets[victim + 1:] if data[o:o + 4] == b"\xff" * 4)

    def read(start=0, end=None):
        errs = []
        out = [(k, v) for k, v, _ in seqfile.Reader(path, start=start, end=end, on_error=errs.append)]
        return out, errs

    whole, errs = read()
    lost = [e for e in errs if not isinstance(e, RecordError)]
    assert [e.lost for e in lost] == [(offsets[victim], resume)]
    assert [e.key for e in errs if isinstance(e, RecordError)] == [BAD_KEY]
    expected = [r for r, o in zip(recs, offsets) if not offsets[victim] <= o < resume and r[0] != BAD_KEY]
    assert whole == expected
    # cut into two splits anywhere: each record and each error comes out exactly once
    for cut in range(0, len(data) + 1, 211):
        a, ea = read(0, cut)
        b, eb = read(cut, None)
        assert a + b == whole, cut
        assert sorted(str(e) for e in ea + eb) == sorted(str(e) for e in errs), cut


def test_read_split_items(tmp_path):
    from gpumr.io.records import Lost, Unreadable, read_split
    path = str(tmp_path / "r.seq")
    with seqfile.Writer(path) as w:
        w.append("a.jpg", b"1")
        w.append(BAD_KEY, b"2")
        w.append("c.jpg", b"3")
    items = list(read_split(path, name="hdfs:///r.seq"))
    assert [type(i).__name__ for i in items] == ["Record", "Unreadable", "Record"]
    bad = items[1]
    assert bad.key == BAD_KEY and bad.label == "dir/\\xff\\xfebad.jpg" and bad.name == "hdfs:///r.seq"
    empty = tmp_path / "empty.seq"
    empty.write_bytes(b"")
    not_seq = tmp_path / "x.seq"
    not_seq.write_bytes(b"\xff\xd8\xff\xe0 JPEG")
    [e] = read_split(str(empty))
    assert isinstance(e, Lost) and (e.start, e.end) == (0, 0) and "empty" in e.reason
    [n] = read_split(str(not_seq))
    assert isinstance(n, Lost) and (n.start, n.end) == (0, 9) and "not a SequenceFile" in n.reason
    assert list(read_split(str(not_seq), start=5)) == []  # reported once, by the split at byte 0
    assert not isinstance(bad, Lost) and isinstance(bad, Unreadable)
