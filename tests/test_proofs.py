"""Proofs of authorship read and written as streams (gpumr.io.proofs): memory bounded whatever their size.

Before, a proof was parsed as one JSON document: about 8.6 bytes of memory
per byte of proof (a 57 MB proof took over 300 MiB), over 2 GB at the
256 MiB cap, for any command that looked at the output beside it.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from gpumr.io.outputs import FOLDER_PROOF, Proof, digest, is_proof


def write_proof(path, n, versions=1, sep=(",", ":")):
    """A proof listing ``n`` files (in each of ``versions`` versions); the listing of the first version."""
    first = {f"frames/cam{i % 7}/frame_{i:08d}.jpg": [10000 + i, hashlib.sha256(str(i).encode()).hexdigest()]
             for i in range(n)}
    doc = {"gpumr": "0", "output": "gpumr unpack", "versions": [first] + [{"old": [1, "0" * 64]}] * (versions - 1)}
    with open(path, "w") as f:
        json.dump(doc, f, separators=sep, sort_keys=True)
    return first


LOAD = """
import resource, sys
from gpumr.io.outputs import Proof
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
p = Proof.load(sys.argv[1])
assert p.vouches("frames/cam3/frame_00000010.jpg", (10010, __import__("hashlib").sha256(b"10").hexdigest()))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_reading_a_large_proof_takes_memory_by_files_listed_not_by_its_text(tmp_path):
    path = tmp_path / ".out.gpumr"
    write_proof(path, 200_000)
    size = os.path.getsize(path)
    assert size > 20e6
    grew = int(subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True,
                              check=True).stdout) * 1024
    assert grew < 16 << 20, f"{size} bytes of proof took {grew} bytes of memory"  # (was over 100 MiB)


def test_a_loaded_proof_answers_as_the_json_says(tmp_path):
    path = tmp_path / ".out.gpumr"
    first = write_proof(path, 1000, versions=2, sep=(", ", ": "))  # another layout of the same JSON
    p = Proof.load(str(path))
    assert p.output == "gpumr unpack" and len(p.versions) == 2
    rel, (size, sha) = next(iter(first.items()))
    assert p.vouches(rel, (size, sha)) and p.vouches("old", (1, "0" * 64))
    assert not p.vouches(rel, (size, "1" * 64)) and not p.vouches("other", (size, sha))
    assert p.has_size(rel, size) and not p.has_size(rel, size + 1) and p.lists(rel) and not p.lists("x")
    assert p.listed_folders(["frames", "frames/cam3", "frames/cam9", "elsewhere"]) == {"frames", "frames/cam3"}


def test_saving_copies_the_older_versions_from_the_proof_read(tmp_path):
    path = tmp_path / ".out.gpumr"
    first = write_proof(path, 5000)
    old = Proof.load(str(path))
    new = Proof(str(path), "gpumr unpack", [{"a\"b\\c\u00e9": [3, "f" * 64]}])
    new.versions += old.versions
    new.save()
    doc = json.loads(path.read_text())
    assert doc["versions"] == [{"a\"b\\c\u00e9": [3, "f" * 64]}, first]
    Proof.load(str(path)).record({"frames/cam0/frame_00000000.jpg": [1, "e" * 64]})
    doc = json.loads(path.read_text())
    assert doc["versions"][0]["frames/cam0/frame_00000000.jpg"] == [1, "e" * 64]
    assert "frames/cam0/frame_00000000.jpg" not in doc["versions"][1] and len(doc["versions"][1]) == 4999


@pytest.mark.parametrize("text", [
    '{"gpumr":"0","output":"x","versions":[{"a":[1,"short"]}]}',
    '{"gpumr":"0","output":"x","versions":[{"a":[1,"' + "0" * 64 + '"]}]',
    '{"gpumr":"0","output":"x"}',
    '{"gpumr":"0","output":"x","versions":[],"more":1}',
    '{"gpumr":"0","output":"x","versions":[{"a\\q":[1,"' + "0" * 64 + '"]}]}',
    '{"gpumr":"0","output":"x","versions":[{"a":[1.5,"' + "0" * 64 + '"]}]} trailing',
    "my notes",
])
def test_anything_else_is_not_a_proof(tmp_path, text):
    (tmp_path / ".out.gpumr").write_text(text)
    assert not is_proof(str(tmp_path / ".out.gpumr"))
    with pytest.raises(Exception, match="not a gpumr proof file"):
        Proof.load(str(tmp_path / ".out.gpumr"))


def test_a_folder_proof_read_in_its_open_folder(tmp_path):
    """The folder proof of ``gpumr unpack`` (DIR/.gpumr, read by name in the open folder) is the same stream."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "k").write_bytes(b"data")
    listing = write_proof(d / FOLDER_PROOF, 3000)
    listing["k"] = list(digest(str(d / "k")))
    with open(d / FOLDER_PROOF, "w") as f:
        json.dump({"gpumr": "0", "output": "gpumr unpack", "versions": [listing]}, f)
    fd = os.open(d, os.O_RDONLY)
    try:
        p = Proof.load(FOLDER_PROOF, fd)
        assert p.vouches("k", digest("k", fd))
    finally:
        os.close(fd)
