"""Interop with Hadoop itself (pyspark's Hadoop 3 jars, Java 17), in both directions."""

import os
import random

import pytest
from conftest import KINDS, make_records

import seqfile

pytestmark = pytest.mark.hadoop


@pytest.mark.parametrize("comp, short, cls", KINDS)
def test_we_read_what_hadoop_writes(hadoop, tmp_path, comp, short, cls):
    recs = make_records(120, seed=1)
    path = str(tmp_path / "hadoop.seq")
    hadoop.write(path, recs, comp, cls)
    with seqfile.Reader(path) as r:
        assert r.header.compression == comp
        assert r.header.codec == cls
        assert r.header.metadata == {"written-by": "hadoop"}
        got = [(k, v) for k, v, _ in r]
    assert got == recs


@pytest.mark.parametrize("comp, short, cls", KINDS)
def test_hadoop_reads_what_we_write(hadoop, tmp_path, comp, short, cls):
    recs = make_records(120, seed=2)
    path = str(tmp_path / "ours.seq")
    with seqfile.Writer(path, compression=comp, codec=short, metadata={"b": "2", "a": "1"}) as w:
        for k, v in recs:
            w.append(k, v)
    assert hadoop.read(path) == recs


def _cuts(size, header, rng, n):
    """Random split boundaries past the header, as FileInputFormat would never go below it."""
    points = sorted(rng.sample(range(header + 1, size), min(n, size - header - 1)))
    bounds = [0] + points + [size]
    return list(zip(bounds[:-1], bounds[1:]))


@pytest.mark.parametrize("comp, codec, writer", [
    ("NONE", None, "ours"), ("RECORD", "default", "ours"), ("BLOCK", "snappy", "ours"),
    ("NONE", None, "hadoop"), ("BLOCK", "default", "hadoop"),
])
def test_splits_match_hadoop_record_reader(hadoop, tmp_path, comp, codec, writer):
    """Per split, our reader returns exactly SequenceFileRecordReader's records."""
    recs = make_records(300, seed=3, max_size=6000)
    path = str(tmp_path / "split.seq")
    if writer == "ours":
        with seqfile.Writer(path, compression=comp, codec=codec, sync_interval=3000, block_size=20_000) as w:
            for k, v in recs:
                w.append(k, v)
    else:
        hadoop.write(path, recs, comp, {"default": "org.apache.hadoop.io.compress.DefaultCodec"}.get(codec))
    size = os.path.getsize(path)
    header = seqfile.Reader(path).header.size
    rng = random.Random(7)
    splits = _cuts(size, header, rng, 40)
    # Also cuts right at, just before and just after sync escapes.
    data = open(path, "rb").read()
    marker = seqfile.Reader(path).header.sync
    escapes = [i - 4 for i in range(len(data)) if data.startswith(marker, i) and i - 4 >= header]
    around = sorted({p + d for p in escapes[:6] for d in (-1, 0, 1, 4, 20) if header < p + d < size})
    bounds = [0] + around + [size]
    splits_sync = list(zip(bounds[:-1], bounds[1:]))
    for cut in (splits, splits_sync):
        theirs = hadoop.splits(path, cut)
        ours = [[(k, v) for k, v, _ in seqfile.Reader(path, start=s, end=e)] for s, e in cut]
        assert ours == theirs
        assert [r for part in ours for r in part] == recs


def test_hadoop_many_small_splits_of_our_file(hadoop, tmp_path):
    """Hadoop splitting our file into many 4 KB splits still sees every record once."""
    recs = make_records(200, seed=4, max_size=3000)
    path = str(tmp_path / "small.seq")
    with seqfile.Writer(path, sync_interval=2000) as w:
        for k, v in recs:
            w.append(k, v)
    size = os.path.getsize(path)
    splits = [(s, min(s + 4096, size)) for s in range(0, size, 4096)]
    parts = hadoop.splits(path, splits)
    assert sum(len(p) for p in parts) == len(recs)
    assert [r for p in parts for r in p] == recs
    assert sum(1 for p in parts if p) > 10
