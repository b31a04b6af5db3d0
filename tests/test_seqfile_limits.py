"""Size caps: decompression bombs, absurd lengths and counts are refused quickly in bounded memory.

Each hostile file is built here, at test time, and read in a child process
under ``RLIMIT_AS`` of 1 GiB (tests/seqfile_child.py): without the cap most of
them would need gigabytes. The library must answer with its own error naming
the file, the offset and the size, in a few seconds.
"""

import bz2
import json
import os
import struct
import subprocess
import sys
import time
import zlib

import pytest

import seqfile
from seqfile import codecs
from seqfile.header import Header
from seqfile.writable import BYTES, TEXT, encode_text, encode_vlong

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30
MiB = 1 << 20
CAP = 256 * MiB

try:
    codecs.check_available(codecs.ZSTD)
    HAVE_ZSTD = True
except codecs.CodecError:
    HAVE_ZSTD = False
try:
    codecs.check_available(codecs.LZ4)
    HAVE_CRAMJAM = True
except codecs.CodecError:
    HAVE_CRAMJAM = False


def read_in_child(jobs, limit=GiB, timeout=240):
    """Read ``jobs`` ([path, kwargs]) in one child under RLIMIT_AS ``limit``; its results and peak RSS (KiB)."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, os.path.join(HERE, "seqfile_child.py"), str(limit)],
                       input=json.dumps(jobs), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{p.stderr[-3000:]}"
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    for line in lines[:-1]:
        line.pop("secs")
    return lines[:-1], lines[-1]["maxrss_kb"], time.monotonic() - t0


# -- bombs: many GiB of zeros from a few KB -----------------------------------
def zlib_bomb(total, wbits):
    """A zlib (wbits 15) or gzip (31) stream inflating to ``total`` zero bytes, built from one repeated piece."""
    chunk = 16 * MiB
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)  # same bytes: history was reset
    return first + again * (total // chunk - 1) + c.flush()


def bz2_bomb(total):
    piece = bz2.compress(bytes(32 * MiB), 9)  # concatenated streams, as BZip2Codec reads them
    return piece * (total // (32 * MiB))


def zstd_bomb(total):
    from seqfile.codecs import _zstd
    piece = _zstd().compress(bytes(32 * MiB))
    return piece * (total // (32 * MiB))


BOMBS = {"default": lambda: zlib_bomb(8 * GiB, 15), "gzip": lambda: zlib_bomb(8 * GiB, 31),
         "bzip2": lambda: bz2_bomb(8 * GiB), "zstd": lambda: zstd_bomb(8 * GiB)}


def header(path, compression, codec, value_class=BYTES):
    h = Header(TEXT, value_class, compression, codecs.resolve(codec) if codec else None, {}, os.urandom(16))
    return h, h.to_bytes()


def record_file(path, codec, value_stream, key="bomb.jpg"):
    """A RECORD-compressed file: one good record, the bomb, one more good record."""
    h, head = header(path, "RECORD", codec)
    full = codecs.resolve(codec)

    def rec(k, stream):
        kf = encode_text(k)
        return struct.pack(">ii", len(kf) + len(stream), len(kf)) + kf + stream

    good = codecs.compress(full, struct.pack(">i", 3) + b"abc")
    with open(path, "wb") as f:
        f.write(head + rec("before.jpg", good) + rec(key, value_stream) + rec("after.jpg", good))


def block(sync, codec, count, key_lens, keys, val_lens, vals):
    """One block: sync entry, count, and the four buffers (given raw, or as ready streams)."""
    full = codecs.resolve(codec)
    out = [struct.pack(">i", -1), sync, encode_vlong(count)]
    for buf in (key_lens, keys, val_lens, vals):
        stream = buf if isinstance(buf, tuple) else codecs.compress(full, buf)
        stream = stream[0] if isinstance(stream, tuple) else stream
        out += [encode_vlong(len(stream)), stream]
    return b"".join(out)


def good_block(sync, codec, recs):
    keys = [encode_text(k) for k, _ in recs]
    vals = [struct.pack(">i", len(v)) + v for _, v in recs]
    return block(sync, codec, len(recs), b"".join(encode_vlong(len(k)) for k in keys), b"".join(keys),
                 b"".join(encode_vlong(len(v)) for v in vals), b"".join(vals))


def block_file(path, codec, bad_block):
    """A BLOCK-compressed file: a good block, ``bad_block(sync)``, a good block."""
    h, head = header(path, "BLOCK", codec)
    with open(path, "wb") as f:
        f.write(head + good_block(h.sync, codec, [("a.jpg", b"1")]) + bad_block(h.sync)
                + good_block(h.sync, codec, [("z.jpg", b"2")]))


def _needs(codec):
    if codec == "zstd" and not HAVE_ZSTD:
        pytest.skip("zstd needs cramjam and backports.zstd (pip install cramjam backports.zstd)")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["default", "gzip", "bzip2", "zstd"])
def test_record_bomb_is_one_record_error(tmp_path, codec):
    _needs(codec)
    path = str(tmp_path / f"bomb-{codec}.seq")
    record_file(path, codec, BOMBS[codec]())
    assert os.path.getsize(path) < 20 * MiB
    (res,), rss, secs = read_in_child([[path, {}]])
    # the two good records come out; the bomb is one per-record error, nothing lost
    assert res["records"] == 2 and "raised" not in res
    [(kind, msg, lost)] = res["errors"]
    assert kind == "RecordError" and lost is None
    assert path in msg and "at byte " in msg and f"exceeds {CAP - 9} bytes" in msg, msg
    assert rss < 700 * 1024 and secs < 90, (rss, secs)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["default", "gzip", "bzip2", "zstd"])
def test_block_bomb_loses_that_block_only(tmp_path, codec):
    _needs(codec)
    path = str(tmp_path / f"bomb-{codec}.seq")
    kf = encode_text("bomb.jpg")
    bomb = (BOMBS[codec](),)  # a ready stream

    def bad(sync):
        return block(sync, codec, 1, encode_vlong(len(kf)), kf, encode_vlong(2**31 - 1), bomb)

    block_file(path, codec, bad)
    (res,), rss, secs = read_in_child([[path, {}]])
    assert res["records"] == 2 and "raised" not in res
    [(kind, msg, lost)] = res["errors"]
    assert kind == "SequenceFileError" and "block values" in msg and "exceeds" in msg, msg
    start, end = lost
    data = open(path, "rb").read()
    assert data[end:end + 4] == b"\xff\xff\xff\xff" and end - start > len(bomb[0])  # the bad block, exactly
    assert rss < 700 * 1024 and secs < 90, (rss, secs)


@pytest.mark.skipif(not HAVE_CRAMJAM, reason="LZ4 and Snappy need cramjam (pip install cramjam)")
@pytest.mark.parametrize("codec", ["lz4", "snappy"])
def test_framed_codecs_declaring_huge_sizes_are_refused_before_allocating(tmp_path, codec):
    # Hadoop's BlockCompressorStream framing: <raw length><chunk length><chunk>
    full = codecs.resolve(codec)
    real = codecs.compress(full, struct.pack(">i", 5) + b"hello")
    chunk = real[8:]
    jobs = []
    for i, raw_len in enumerate([2**31 - 1, CAP + 1, 100 * MiB]):
        path = str(tmp_path / f"{codec}-{i}.seq")
        record_file(path, codec, struct.pack(">ii", raw_len, len(chunk)) + chunk)
        jobs.append([path, {}])
    if codec == "snappy":  # the raw chunk's own varint claims 1 GiB
        path = str(tmp_path / "snappy-varint.seq")
        lie = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + chunk[1:]
        record_file(path, codec, struct.pack(">ii", 9, len(lie)) + lie)
        jobs.append([path, {}])
    results, rss, secs = read_in_child(jobs, limit=GiB)
    for (path, _), res in zip(jobs, results):
        assert res["records"] == 2 and "raised" not in res, res
        [(kind, msg, lost)] = res["errors"]
        assert kind == "RecordError" and path in msg, msg
    assert "2147483647 raw bytes" in results[0]["errors"][0][1]
    assert rss < 400 * 1024 and secs < 60, (rss, secs)


def test_block_count_claims_are_bounded_by_the_block(tmp_path):
    kf = encode_text("k.jpg")
    one = (encode_vlong(len(kf)), kf, encode_vlong(5), struct.pack(">i", 1) + b"v")
    jobs = []
    for count in (100_000_000, 3_000_000):
        path = str(tmp_path / f"count-{count}.seq")
        block_file(path, "default", lambda sync, c=count: block(sync, "default", c, *one))
        jobs.append([path, {}])
    (huge, big), rss, secs = read_in_child(jobs)
    for res in (huge, big):
        assert res["records"] == 2 and len(res["errors"]) == 1 and res["errors"][0][2] is not None
    assert "claims 100000000 records, more than the 4194304" in huge["errors"][0][1]
    assert "claims 3000000 records but its key lengths hold 1 bytes" in big["errors"][0][1]
    assert rss < 200 * 1024 and secs < 60, (rss, secs)


def test_uncompressed_record_over_the_cap_is_skipped_unread(tmp_path):
    # A legal 2 GiB - 100 value in a sparse file: listing it reads no value; reading it is a
    # per-record error (over the cap) and the records around it still come out.
    path = str(tmp_path / "huge.seq")
    h, head = header(path, "NONE", None)
    kf = encode_text("huge.bin")
    n = 2**31 - 100 - len(kf) - 8
    small = encode_text("small.jpg")
    tail = struct.pack(">ii", len(small) + 7, len(small)) + small + struct.pack(">i", 3) + b"xyz"
    with open(path, "wb") as f:
        f.write(head + tail + struct.pack(">ii", len(kf) + 4 + n, len(kf)) + kf + struct.pack(">i", n))
        f.seek(n, os.SEEK_CUR)
        f.write(tail)
    (listed, read, small_cap), rss, secs = read_in_child(
        [[path, {"values": False}], [path, {}], [path, {"max_record_size": 16}]])
    assert listed == {"records": 3, "errors": [], "sizes": [3, n, 3]}
    assert read["records"] == 2 and read["errors"][0][0] == "RecordError"
    assert f"record of {len(kf) + 4 + n} bytes is over the size cap of {CAP} bytes" in read["errors"][0][1]
    assert small_cap["records"] == 0 and len(small_cap["errors"]) == 3  # every record over a 16-byte cap
    assert rss < 200 * 1024 and secs < 60, (rss, secs)


def test_cap_is_configurable_and_raises_without_on_error(tmp_path):
    path = str(tmp_path / "r.seq")
    with seqfile.Writer(path, compression="RECORD", codec="default") as w:
        w.append("a", bytes(1000))
        w.append("b", bytes(10))
    assert [len(v) for _, v, _ in seqfile.Reader(path)] == [1000, 10]
    with pytest.raises(seqfile.SequenceFileError, match=r"r\.seq at byte \d+: .*exceeds 498 bytes"):
        list(seqfile.Reader(path, max_record_size=500))
    with pytest.raises(ValueError):
        seqfile.Reader(path, max_record_size=0)


def test_cli_cap_option_and_listing_without_values(tmp_path):
    path = str(tmp_path / "r.seq")
    with seqfile.Writer(path, compression="BLOCK", codec="default") as w:
        w.append("a.jpg", bytes(100_000))
        w.append("b.jpg", b"xy")
    gpumr = [sys.executable, "-m", "gpumr"]
    p = subprocess.run(gpumr + ["ls", path], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "a.jpg\t100000\nb.jpg\t2\n", p.stderr
    p = subprocess.run(gpumr + ["info", "--json", path], capture_output=True, text=True)
    assert json.loads(p.stdout)["value_bytes"] == 100_002
    p = subprocess.run(gpumr + ["cat", "--max-record-size", "64KiB", path, "a.jpg"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "r.seq at byte" in p.stderr and "exceeds" in p.stderr
    p = subprocess.run(gpumr + ["ls", "--max-record-size", "0", path], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "size" in p.stderr


def test_non_regular_and_empty_inputs_are_refused_in_one_line(tmp_path):
    fifo = str(tmp_path / "pipe.seq")
    os.mkfifo(fifo)
    empty = tmp_path / "empty.seq"
    empty.write_bytes(b"")
    good = str(tmp_path / "g.seq")
    with seqfile.Writer(good) as w:
        w.append("a", b"1")
    gpumr = [sys.executable, "-m", "gpumr"]
    for cmd in (["ls", fifo], ["info", fifo], ["cat", fifo, "a"], ["ls", str(empty)], ["info", str(empty)]):
        p = subprocess.run(gpumr + cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and p.stdout == "" and p.stderr.count("\n") == 1, (cmd, p.stderr)
        assert cmd[1] in p.stderr
        assert ("FIFO" if cmd[1] == fifo else "empty file") in p.stderr
    # a process substitution, as `gpumr ls <(cat g.seq)` gives it
    p = subprocess.run(["bash", "-c", f'"$0" -m gpumr ls <(cat {good})', sys.executable],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "FIFO" in p.stderr and p.stdout == "", p.stderr
    # a FIFO inside a folder is named, not skipped, by the commands and by a job (before any task)
    folder = tmp_path / "folder"
    folder.mkdir()
    os.link(good, str(folder / "g.seq"))
    os.mkfifo(str(folder / "zz-pipe.seq"))
    for cmd in (gpumr + ["ls", str(folder)], [sys.executable, "-m", "gpumr.jobs.face_detect", "-r", "inline",
                                              str(folder), "--output-dir", str(tmp_path / "out")]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and p.stdout == "" and "zz-pipe.seq: a FIFO" in p.stderr, (cmd, p.stderr)
        assert "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_listing_measures_record_compressed_values_without_keeping_them(tmp_path):
    # 192 MiB value, bzip2 RECORD-compressed to a few hundred bytes: listing it holds ~1 MiB at a
    # time; reading it gives the whole value (and the cap still refuses it when set lower).
    n = 192 * MiB - 4
    stream = bz2.compress(struct.pack(">i", n) + bytes(32 * MiB - 4), 9) + bz2_bomb(160 * MiB)
    path = str(tmp_path / "big.seq")
    record_file(path, "bzip2", stream, key="big.bin")
    (listed,), rss, secs = read_in_child([[path, {"values": False}]])
    assert listed == {"records": 3, "errors": [], "sizes": [3, n, 3]}
    assert rss < 120 * 1024, rss
    (read, capped), rss, secs = read_in_child([[path, {}], [path, {"max_record_size": 64 * MiB}]])
    assert read == {"records": 3, "errors": [], "sizes": [3, n, 3]}
    assert capped["records"] == 2 and "exceeds" in capped["errors"][0][1]
