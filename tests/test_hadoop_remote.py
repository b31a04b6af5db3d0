"""SequenceFiles at Hadoop URIs through mrjob's filesystem layer, with the real `hadoop fs`.

The local Hadoop's ``file://`` scheme takes the same path through ``hadoop fs``
as ``hdfs://`` on a cluster. Each ``hadoop fs`` call starts a JVM, so one
test does the whole round trip.
"""

import json
import os
import shutil

import pytest

from gpumr.cli import main
from hadoop import cluster


@pytest.mark.slow
def test_pack_to_a_uri_then_read_it_back_through_hadoop_fs(sample_frames, tmp_path, capsys):
    why = cluster.unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the Hadoop tests must run in CI: {why}")
        pytest.skip(why)
    src = tmp_path / "src"
    shutil.copytree(sample_frames, src)
    (src / "notes.txt").write_text("frames from the built-in sample\n")
    remote = tmp_path / "cluster"  # made by the upload (its parent folder does not exist yet)
    uri = f"file://{remote}/frames"
    assert main(["pack", str(src), "-o", uri, "--shards", "2", "-q"]) == 0
    assert f"uploaded to {uri}" in capsys.readouterr().out
    # Uploaded under a temporary name and renamed: only the final folder is there.
    assert sorted(os.listdir(remote)) == ["frames"]
    assert sorted(n for n in os.listdir(remote / "frames") if not n.startswith(".")) == \
        ["part-00000.seq", "part-00001.seq"]

    assert main(["info", uri, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert sum(f["records"] for f in facts) == 13 and facts[0]["key_class"] == "org.apache.hadoop.io.Text"

    assert main(["cat", uri, "notes.txt"]) == 0
    assert capsys.readouterr().out == "frames from the built-in sample\n"

    assert main(["unpack", uri, "-d", str(tmp_path / "back"), "-q"]) == 0
    for name in os.listdir(src):
        assert (tmp_path / "back" / name).read_bytes() == (src / name).read_bytes()

    # An existing destination is refused, not replaced.
    assert main(["pack", str(src), "-o", uri, "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert sorted(os.listdir(remote)) == ["frames"]
