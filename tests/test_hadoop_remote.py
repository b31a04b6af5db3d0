"""SequenceFiles at Hadoop URIs through the fallback of gpumr's filesystem layer: the real ``hadoop fs``.

gpumr reaches URIs through pyarrow (``tests/test_remote.py``); where pyarrow
cannot (not installed, as in ``gpumr bundle``'s archive; no libhdfs; a
scheme only Hadoop's connectors know) the same commands go through the
``hadoop fs`` command. The local Hadoop's ``file://`` scheme takes the same
path through ``hadoop fs`` as ``hdfs://`` on a cluster. The commands run in
a process where pyarrow cannot be imported. Each ``hadoop fs`` call starts
a JVM, so one test does the round trip.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import missing
from hadoop import cluster

#: The gpumr command in a Python where ``import pyarrow`` fails, as on a node without it.
NO_PYARROW = [sys.executable, "-c", "import sys; sys.modules['pyarrow'] = None; from gpumr.cli import main; "
                                    "sys.exit(main(sys.argv[1:]))"]


@pytest.mark.slow
def test_pack_to_a_uri_then_read_it_back_through_hadoop_fs(sample_frames, tmp_path):
    why = cluster.unavailable()
    if why:
        missing("the Hadoop tests", why)
    src = tmp_path / "src"
    shutil.copytree(sample_frames, src)
    (src / "notes.txt").write_text("frames from the built-in sample\n")
    remote = tmp_path / "cluster"  # made by the upload (its parent folder does not exist yet)
    uri = f"file://{remote}/frames"

    def gpumr(*args):
        return subprocess.run(NO_PYARROW + list(args), capture_output=True, text=True, cwd=tmp_path)
    out = gpumr("pack", str(src), "-o", uri, "--shards", "2")
    assert out.returncode == 0 and f"uploaded to {uri}" in out.stdout, out.stderr
    # Uploaded under a temporary name and renamed: only the final folder is there.
    assert sorted(os.listdir(remote)) == ["frames"]
    assert sorted(n for n in os.listdir(remote / "frames") if not n.startswith(".")) == \
        ["part-00000.seq", "part-00001.seq"]

    out = gpumr("info", uri, "--json")  # listed by `hadoop fs -ls`, each file fetched by `hadoop fs -copyToLocal`
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert sum(f["records"] for f in facts) == 13 and facts[0]["key_class"] == "org.apache.hadoop.io.Text"
    assert [f["path"] for f in facts] == [f"{uri}/part-00000.seq", f"{uri}/part-00001.seq"]  # URIs, not local copies

    # An existing destination is refused, not replaced.
    out = gpumr("pack", str(src), "-o", uri, "-q")
    assert out.returncode == 1 and "already exists" in out.stderr
    assert sorted(os.listdir(remote)) == ["frames"]
