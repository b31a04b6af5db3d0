"""Error lines point to their troubleshooting entry, and ``gpumr help TOPIC`` shows it.

The entries are the documentation's troubleshooting page (``docs/troubleshooting.rst``
includes ``gpumr/troubleshooting.rst``, which is installed with gpumr). The
commands below fail as a newcomer's did, in a fresh folder, through the
installed ``gpumr``.
"""

import os
import re
import subprocess
import sys

import pytest

from gpumr.cli.troubleshooting import entries
from gpumr.errors import TROUBLESHOOTING, help_topic, hint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpumr(args, cwd, **env):
    e = {k: v for k, v in os.environ.items() if k != "GPUMR_SIMULATE_GPUS"}
    e.update(env)
    return subprocess.run([sys.executable, "-m", "gpumr", *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=300)


def test_every_topic_has_an_entry_and_the_docs_page_includes_them():
    found = entries()
    assert [t for t, _ in TROUBLESHOOTING if t not in found] == []
    with open(os.path.join(ROOT, "docs", "troubleshooting.rst"), encoding="utf-8") as f:
        assert ".. include:: ../gpumr/troubleshooting.rst" in f.read()
    for topic, (title, body) in found.items():
        assert title and "**What it means.**" in body and "**What to do.**" in body, topic


@pytest.mark.parametrize("line, topic", [
    ("no files in photos/", "no-files"),
    ("no SequenceFile among the inputs: a.jpg (a JPEG image); pack files first: gpumr pack a/ -o a.seq", "pack-first"),
    ("hadoop: No such file or directory", "hadoop-missing"),
    ("Could not mkdir hdfs:///user/root/tmp/mrjob/files", "hdfs-unreachable"),
    ("s3://***@b/x: a URI with user-info (a user name or credentials before '@') is refused", "credentials-in-uri"),
    ("--device gpu: no GPU on this node (NVML unavailable: NVML Shared Library Not Found)", "no-gpu"),
    ("flat.seq: already exists (use --force to replace it)", "output-in-the-way"),
    ("--scheduler tcp://127.0.0.1:1: no Dask scheduler answered (Timed out)", "dask-scheduler"),
    ("ValueError: x (an unexpected error, a bug: rerun with --debug to see where it happened)", "bug"),
    ("missing.seq: no such file or directory", None),  # says all there is to say: no pointer
])
def test_error_lines_map_to_their_topic(line, topic):
    assert help_topic(line) == topic
    assert hint(line) == (f" (see: gpumr help {topic})" if topic else "")


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """A folder with photos in a subfolder, photos in a flat folder, and those packed."""
    d = tmp_path_factory.mktemp("newcomer")
    assert gpumr(["sample", "-n", "2", "photos/2026"], d).returncode == 0
    assert gpumr(["sample", "-n", "2", "flat"], d).returncode == 0
    assert gpumr(["pack", "flat/", "-o", "flat.seq"], d).returncode == 0
    return d


@pytest.mark.parametrize("args, topic, env", [
    (["run", "faces", "photos/", "-o", "out1"], "no-files", {}),
    (["run", "faces", "flat/", "-o", "out2"], "pack-first", {}),
    (["pack", "flat/", "-o", "flat.seq"], "output-in-the-way", {}),
    (["run", "faces", "flat.seq", "-o", "out3", "--device", "gpu"], "no-gpu", {}),
    (["run", "faces", "flat.seq", "-o", "out4", "--engine", "hadoop"], "hadoop-missing",
     {"PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin", "HADOOP_HOME": ""}),
    (["ls", "s3://KEY:SECRET@bucket/x.seq"], "credentials-in-uri", {}),
    (["run", "backproject", "--projections", "flat.seq", "-o", "out5"], "geometry-required", {}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_newcomer_s_error_points_to_its_entry(newcomer, args, topic, env):
    proc = gpumr(args, newcomer, **env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and lines, proc.stderr
    assert lines[-1].startswith("gpumr: error: ") and lines[-1].endswith(f" (see: gpumr help {topic})"), lines[-1]
    assert "KEY:SECRET" not in proc.stderr
    shown = gpumr(["help", topic], newcomer)
    assert shown.returncode == 0
    title, body = entries()[topic]
    assert shown.stdout.startswith(title.replace("``", "")) and "What to do." in shown.stdout
    assert "``" not in shown.stdout and ":doc:" not in shown.stdout


def test_help_lists_the_topics_and_refuses_an_unknown_one(tmp_path):
    listing = gpumr(["help"], tmp_path)
    assert listing.returncode == 0
    for topic in entries():
        assert re.search(rf"^  {re.escape(topic)}\s", listing.stdout, re.M), topic
    unknown = gpumr(["help", "nosuch"], tmp_path)
    assert unknown.returncode == 1 and "no help topic 'nosuch': choose one of no-files," in unknown.stderr


def test_gpumr_help_names_the_engines_and_the_help_command(tmp_path):
    said = gpumr(["--help"], tmp_path).stdout
    from gpumr import engines
    assert f"Engines: {', '.join(engines.NAMES)}." in said and "(see: gpumr help TOPIC)" in said
    for command in ("help", "conf", "run"):
        assert re.search(rf"^    {command}\s", said, re.M), command
