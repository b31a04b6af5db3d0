"""Property tests: any records, sync interval and cut of a file into splits."""

import os
import random
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqfile

# Large values come from a seeded generator: hypothesis draws their size, not every byte.
large = st.integers(5000, 20000).map(lambda n: random.Random(n).randbytes(n))
records = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.binary(max_size=200), large)), max_size=40)
kinds = st.sampled_from([("NONE", None), ("RECORD", "default"), ("RECORD", "snappy"), ("BLOCK", "default"),
                         ("BLOCK", "lz4"), ("BLOCK", "zstd"), ("RECORD", "bzip2"), ("BLOCK", "gzip")])


def _write(path, recs, kind, interval, block):
    with seqfile.Writer(path, compression=kind[0], codec=kind[1], sync_interval=interval, block_size=block) as w:
        for k, v in recs:
            w.append(k, v)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=records, kind=kinds, interval=st.integers(1, 30000), block=st.integers(1, 50000),
       cuts=st.lists(st.floats(0, 1), max_size=12))
def test_every_record_exactly_once_over_any_cut(recs, kind, interval, block, cuts):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.seq")
        _write(path, recs, kind, interval, block)
        size = os.path.getsize(path)
        whole = [(k, v) for k, v, _ in seqfile.Reader(path)]
        assert whole == recs
        points = sorted({int(c * size) for c in cuts} | {0, size})
        parts = []
        for s, e in zip(points[:-1], points[1:]):
            parts += [(k, v) for k, v, _ in seqfile.Reader(path, start=s, end=e)]
        assert parts == whole


@settings(max_examples=30, deadline=None)
@given(recs=records, interval=st.integers(1, 5000))
def test_sync_markers_appear_at_hadoops_interval(recs, interval):
    """A sync entry precedes a record once `interval` bytes have passed since the last one."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.seq")
        _write(path, recs, ("NONE", None), interval, 1)
        reader = seqfile.Reader(path)
        data = open(path, "rb").read()
        last_sync = 0
        for rec in reader:
            synced = data[rec.offset:rec.offset + 4] == b"\xff\xff\xff\xff"
            assert synced == (rec.offset >= last_sync + interval)
            if synced:
                last_sync = rec.offset + 20
