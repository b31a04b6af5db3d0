"""One redaction function: no credential in a URI reaches a message."""

import pytest

from gpumr.errors import redact


@pytest.mark.parametrize("text, shown", [
    ("s3://AKIA:wJal/K7+MD@bucket/a//b.seq", "s3://***@bucket/a//b.seq"),
    ("gpumr: error: s3a://K:S@b/p@q.seq: no such file", "gpumr: error: s3a://***@b/p@q.seq: no such file"),
    ("s3://user@b/k", "s3://***@b/k"),
    ("file:///tmp/a@b", "file:///tmp/a@b"),
    ("hdfs://nn:9000/data/x.seq", "hdfs://nn:9000/data/x.seq"),
    ("two: s3://A:B@x/1 s3://C:D@y/2", "two: s3://***@x/1 s3://***@y/2"),
])
def test_user_info_is_hidden(text, shown):
    assert redact(text) == shown
