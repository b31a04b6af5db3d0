"""The one filesystem layer (gpumr.io.remote.locate) against the moto S3 server: the fourth hostile round's URIs.

Each test failed before the layer: a URI holding credentials ended in a
traceback printing them, ``s3://b/a//b.seq`` and ``s3://b:9000/x.seq`` in
pyarrow tracebacks, an object that shrank under a reader killed the read
with ``OSError: AWS Error UNKNOWN (HTTP status 416)``, and ``ct assemble``
and ``faces render`` listed a URI folder and then opened its parts as
local files.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from s3server import BUCKET

from gpumr.io import remote
from gpumr.io.packing import pack
from gpumr.io.records import Lost, read_split

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def gpumr(*argv, env=None):
    """``gpumr ARGV`` as a real process: ``(exit status, stdout, stderr)``."""
    out = subprocess.run([sys.executable, "-m", "gpumr", *map(str, argv)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=120)
    return out.returncode, out.stdout, out.stderr


@pytest.fixture
def packed_at(s3, sample_frames, tmp_path):
    """The sample frames packed as one SequenceFile, uploaded at ``s3://BUCKET/<key>``.

    This module's keys all start ``fslayer/``: the bucket is the session's, and a test looks only at what it made.
    """
    pack([sample_frames], str(tmp_path / "frames.seq"), progress=False)
    data = (tmp_path / "frames.seq").read_bytes()

    def put(key):
        s3.put(key, data)
        return f"s3://{BUCKET}/{key}", data
    return put


@pytest.mark.parametrize("argv", [
    ("ls", f"s3://AKIDEXAMPLE:{SECRET}@{BUCKET}/x.seq"),
    ("info", f"s3a://AKIDEXAMPLE:{SECRET}@{BUCKET}/x.seq"),
    ("pack", "{src}", "-o", f"s3://AKIDEXAMPLE:{SECRET}@{BUCKET}/out"),
    ("ct", "assemble", f"s3://AKIDEXAMPLE:{SECRET}@{BUCKET}/out", "-o", "{tmp}/v.npy"),
])
def test_a_uri_with_credentials_is_one_line_that_never_shows_them(s3, sample_frames, tmp_path, argv):
    argv = [a.format(src=sample_frames, tmp=tmp_path) for a in argv]
    code, out, err = gpumr(*argv)
    assert code == 1 and SECRET not in out + err and "AKIDEXAMPLE" not in out + err, err
    assert len(err.strip().splitlines()) == 1 and "user-info" in err and "Traceback" not in err, err
    assert s3.keys("out") == []


def test_a_job_input_with_credentials_is_refused_without_them(s3, tmp_path):
    uri = f"s3://AKIDEXAMPLE:{SECRET}@{BUCKET}/x.seq"
    items = list(read_split(uri))  # the split reader names what it cannot read, and never the secret
    assert len(items) == 1 and isinstance(items[0], Lost) and SECRET not in repr(items) \
        and "AKIDEXAMPLE" not in repr(items)
    from gpumr.errors import GpumrError
    with pytest.raises(GpumrError) as exc:
        remote.locate(uri)
    assert SECRET not in str(exc.value) and "s3://***@" in str(exc.value)


def test_a_key_with_an_empty_path_component_is_read(packed_at):
    uri, data = packed_at("fslayer/a//b.seq")
    code, out, err = gpumr("info", uri)
    assert code == 0 and "SequenceFile v6" in out, err
    code, out, err = gpumr("ls", uri)
    assert code == 0 and len(out.splitlines()) == 12, err
    records = list(read_split(uri))
    assert len(records) == 12 and not any(isinstance(r, Lost) for r in records)


def test_an_s3_uri_with_a_port_is_one_line(s3):
    code, _, err = gpumr("ls", f"s3://{BUCKET}:9000/x.seq")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "names a bucket, not a host and port" in err and "AWS_ENDPOINT_URL" in err


def test_an_object_that_shrinks_under_the_reader_is_a_lost_stretch_naming_it(s3, tmp_path):
    """A ranged read past the new end (HTTP 416 from S3) is a lost stretch of the split, not a dead task."""
    from seqfile import Writer
    rng = np.random.default_rng(0)
    with Writer(str(tmp_path / "big.seq")) as w:
        for i in range(40):
            w.append(f"r{i:03d}", rng.integers(0, 256, 256 << 10, dtype=np.uint8).tobytes())
    data = (tmp_path / "big.seq").read_bytes()
    s3.put("fslayer/shrinks.seq", data)
    uri = f"s3://{BUCKET}/fslayer/shrinks.seq"
    items = read_split(uri)
    first = next(items)
    assert first.key == "r000"
    s3.put("fslayer/shrinks.seq", data[:len(data) // 3])  # the object is replaced by a shorter one meanwhile
    rest = list(items)
    lost = [i for i in rest if isinstance(i, Lost)]
    assert len(lost) == 1 and lost[0].name == uri and lost[0].end == len(data), rest
    assert "reading stopped" in lost[0].reason and "shrinks.seq" in lost[0].reason
    assert 1 + len(rest) - 1 < 40  # the records after the loss are not made up


def test_ct_assemble_reads_a_job_output_at_a_uri(s3, tmp_path):
    import hashlib
    import io

    from gpumr.io.outputs import Proof
    vol = np.arange(4 * 3 * 5, dtype=np.float32).reshape(4, 3, 5)
    lines, listed = [], {}
    for z0, z1 in ((0, 1), (1, 4)):
        name = f"arrays/z{z0:05d}.slab.npy"
        buf = io.BytesIO()
        np.save(buf, vol[z0:z1])
        s3.put(f"fslayer/ct/out/{name}", buf.getvalue())
        listed[name] = [len(buf.getvalue()), hashlib.sha256(buf.getvalue()).hexdigest()]
        value = {"z": [z0, z1], "nz": 4, "slab": {"array": name, "shape": [z1 - z0, 3, 5], "dtype": "<f4"},
                 "device": "cpu"}
        lines.append(f"{json.dumps(f'z{z0:05d}')}\t{json.dumps(value)}")
    s3.put("fslayer/ct/out/part-00000", lines[1].encode() + b"\n")  # (in any order, any part)
    s3.put("fslayer/ct/out/part-00001", lines[0].encode() + b"\n")
    s3.put("fslayer/ct/out/_SUCCESS", b"")
    Proof(str(tmp_path / ".out.gpumr"), "gpumr run", [listed]).save()  # (the proof the job writes beside it)
    s3.put("fslayer/ct/.out.gpumr", (tmp_path / ".out.gpumr").read_bytes())
    code, out, err = gpumr("ct", "assemble", f"s3://{BUCKET}/fslayer/ct/out", "-o", tmp_path / "v.npy")
    assert code == 0, err
    assert (np.load(tmp_path / "v.npy") == vol).all()


def test_faces_render_reads_job_output_and_images_at_uris(s3, packed_at, tmp_path):
    from seqfile import Reader
    uri, _ = packed_at("fslayer/render/frames.seq")
    with Reader(str(tmp_path / "frames.seq")) as r:
        keys = [rec.key for rec in r]
    lines = [f"{json.dumps(k)}\t{json.dumps({'faces': [[1, 1, 4, 4]], 'device': 'cpu'})}" for k in keys]
    s3.put("fslayer/render/out/part-00000", ("\n".join(lines) + "\n").encode())
    code, out, err = gpumr("faces", "render", f"s3://{BUCKET}/fslayer/render/out", "--images", uri, "-d", tmp_path / "pics")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "pics")) == sorted([*keys, "contact_sheet.png"])
