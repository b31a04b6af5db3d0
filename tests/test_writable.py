"""Hadoop's VLong/Text/BytesWritable encodings."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqfile import writable as w


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"), (127, b"\x7f"), (-112, b"\x90"), (128, b"\x8f\x80"), (-113, b"\x87\x70"),
    (255, b"\x8f\xff"), (256, b"\x8e\x01\x00"), (2**31 - 1, b"\x8c\x7f\xff\xff\xff"),
])
def test_vlong_known_encodings(value, encoded):
    # Values as WritableUtils.writeVLong lays them out.
    assert w.encode_vlong(value) == encoded
    assert w.decode_vlong(encoded, 0) == (value, len(encoded))
    assert w.vlong_size(encoded[0]) == len(encoded)


@given(st.integers(min_value=-2**63, max_value=2**63 - 1))
def test_vlong_roundtrip(value):
    enc = w.encode_vlong(value)
    assert w.decode_vlong(b"xx" + enc, 2) == (value, 2 + len(enc))


def test_vlong_truncated():
    with pytest.raises(ValueError):
        w.decode_vlong(b"\x8c\x7f", 0)


@given(st.text())
def test_text_roundtrip(s):
    assert w.decode(w.TEXT, w.encode(w.TEXT, s)) == s


def test_decode_known_classes():
    assert w.decode(w.INT, b"\xff\xff\xff\xfe") == -2
    assert w.decode(w.LONG, (5).to_bytes(8, "big")) == 5
    assert w.decode(w.NULL, b"") is None
    assert w.decode(w.BYTES, b"\x00\x00\x00\x02ab") == b"ab"
    assert w.decode("com.example.Custom", b"raw") == b"raw"
    with pytest.raises(ValueError):
        w.decode(w.BYTES, b"\x00\x00\x00\x05ab")
