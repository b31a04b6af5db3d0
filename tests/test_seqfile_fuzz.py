"""Fuzzing the reader: mutated files of every compression kind and codec end in records or SequenceFileError.

A seeded loop (reproducible: the seed and the mutation are in every failure
message) takes a valid file of each kind - NONE, RECORD and BLOCK with each
installed codec - and mutates it: flipped bits, truncation, and length fields
overwritten with huge or negative values. Each mutant is read whole (with and
without ``on_error``), listed without values, and read as two splits, in a
child process under ``RLIMIT_AS`` of 1 GiB with a time limit (one child per
kind, to save start-up). The child lets any exception other than
SequenceFileError escape, so a crash, a MemoryError, a hang or another
exception fails the test.
"""

import json
import os
import random
import struct
import subprocess
import sys

import pytest

import seqfile
from seqfile import codecs

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261123
MUTANTS_PER_KIND = 300


def installed_codecs():
    out = []
    for name in ("default", "gzip", "bzip2", "snappy", "lz4", "zstd"):
        try:
            codecs.check_available(codecs.resolve(name))
            out.append(name)
        except codecs.CodecError:
            pass
    return out


KINDS = [("NONE", None)] + [(comp, c) for comp in ("RECORD", "BLOCK") for c in installed_codecs()]


def valid_file(path, comp, codec, rng):
    recs = []
    for i in range(12):
        size = rng.choice([0, 1, 7, rng.randint(8, 300), rng.randint(300, 3000)])
        recs.append((f"k/{i:03d}-é.jpg", rng.randbytes(size // 2) + bytes(size - size // 2)))
    with seqfile.Writer(path, compression=comp, codec=codec, sync_interval=600, block_size=1500) as w:
        for k, v in recs:
            w.append(k, v)
    return open(path, "rb").read()


def mutate(data, rng, hsize):
    """A mutated copy of ``data`` and a description of the mutation."""
    data = bytearray(data)
    kind = rng.choice(["flip", "flip", "truncate", "length", "length", "vint", "splice"])
    body = max(hsize, 1)
    if kind == "flip":
        spots = [rng.randrange(len(data)) for _ in range(rng.randint(1, 3))]
        for i in spots:
            data[i] ^= 1 << rng.randrange(8)
        what = f"flip bits at {spots}"
    elif kind == "truncate":
        n = rng.randrange(len(data))
        del data[n:]
        what = f"truncate to {n}"
    elif kind == "length":
        i = rng.randrange(body, len(data) - 4) if len(data) - 4 > body else rng.randrange(len(data) - 4)
        value = rng.choice([2**31 - 1, 2**31 - 100, -1, -2**31, 1 << 28, 1 << 30, rng.randrange(2**31)])
        data[i:i + 4] = struct.pack(">i", value)
        what = f"int32 {value} at {i}"
    elif kind == "vint":  # a huge variable-length integer (block counts and sizes)
        i = rng.randrange(body, len(data) - 9) if len(data) - 9 > body else 0
        data[i:i + 9] = bytes([0x88]) + rng.choice([b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x00\x00\x00\x00\x05\xf5\xe1\x00"])
        what = f"vlong at {i}"
    else:  # a stretch copied over another place
        a, b = sorted(rng.randrange(len(data)) for _ in range(2))
        at = rng.randrange(len(data))
        data[at:at + (b - a)] = data[a:b]
        what = f"splice [{a}, {b}) to {at}"
    return bytes(data), f"{kind}: {what}"


def run_child(jobs, timeout=300):
    p = subprocess.run([sys.executable, os.path.join(HERE, "seqfile_child.py"), str(1 << 30)],
                       input=json.dumps(jobs), capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line) for line in p.stdout.splitlines()]
    return p, results[:-1] if p.returncode == 0 else results


@pytest.mark.slow
@pytest.mark.parametrize("comp, codec", KINDS, ids=[f"{c}-{k or 'none'}" for c, k in KINDS])
def test_mutated_files_end_in_records_or_sequencefile_error(tmp_path, comp, codec):
    rng = random.Random(f"{SEED}-{comp}-{codec}")
    original = valid_file(str(tmp_path / "valid.seq"), comp, codec, rng)
    hsize = seqfile.Reader(str(tmp_path / "valid.seq")).header.size
    jobs, described = [], []
    for n in range(MUTANTS_PER_KIND):
        data, what = mutate(original, rng, hsize)
        path = str(tmp_path / f"m{n:03d}.seq")
        with open(path, "wb") as f:
            f.write(data)
        cut = rng.randrange(len(data) + 1)
        for kwargs in ({}, {"on_error": False}, {"values": False}, {"end": cut}, {"start": cut}):
            jobs.append([path, kwargs])
            described.append(f"seed {SEED}, {comp}/{codec}, mutant {n} ({what}), reader {kwargs}")
    try:
        p, results = run_child(jobs)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {comp}/{codec} mutants did not finish in time")
    assert p.returncode == 0, (f"{described[len(results)]}: the reader failed with something other than "
                               f"SequenceFileError:\n{p.stderr[-3000:]}")
    assert len(results) == len(jobs)
    for (path, kwargs), res, what in zip(jobs, results, described):
        size = os.path.getsize(path)
        for kind, message, lost in res["errors"]:
            assert kind in ("SequenceFileError", "RecordError") and path in message, what
            if kind == "RecordError":
                assert lost is None, what
            else:
                assert 0 <= lost[0] < lost[1] <= size, (what, lost)
        if kwargs.get("on_error") is False:
            assert not res["errors"], what
