"""Side files are checked by content where tasks read them (issue 64, class 8): the launcher names each by its
SHA-256 when it ships it, and a task uses a copy only when its bytes are the ones its name holds.

Real jobs (inline: the launcher's own process; local: task processes of
their own) of a small workload of the test's, whose ``plan`` (in the
launcher, after the side file was shipped) changes the file in place, as
its owner could while the job runs; and a real second user's file.
"""

import json
import os
import subprocess
import sys
import time

import pytest

CHANGES = """
from gpumr import Option, Workload

class Changes(Workload):
    name = "changes"
    summary = "the side file's text, in each record"
    input = "plan"
    decode = "raw"
    options = (Option("--data", "a side file", metavar="FILE", side_file=True),)

    def plan(self, o):
        with open(o.data, "r+b") as f:  # (its owner changes it in place, the same size, once it was shipped)
            f.write(b"CHANGED")
        return [("r0", "0"), ("r1", "1")]

    def setup(self, o):
        with open(o.data, "rb") as f:
            self.text = f.read().decode()

    def cpu(self, key, value, o):
        return {"text": self.text}
"""


def gpumr(args, cwd):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def job(tmp_path, engine):
    """Run the workload over ``tmp_path/data.txt`` on ``engine``: (status, stderr lines, output values)."""
    (tmp_path / "changes.py").write_text(CHANGES)
    proc = gpumr(["run", "changes.py:Changes", "--data", "data.txt", "-o", "out", "--engine", engine, "-q"], tmp_path)
    values = []
    if (tmp_path / "out").is_dir():
        for name in sorted(os.listdir(tmp_path / "out")):
            if name.startswith("part-"):
                values += [json.loads(line.split("\t")[1]) for line in (tmp_path / "out" / name).read_text().splitlines()]
    return proc.returncode, proc.stderr.strip().splitlines(), values


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_a_side_file_changed_after_it_was_shipped_is_refused_by_the_tasks(tmp_path, engine):
    """The shipped copy of a file of yours is a hard link to it (no copy of a CT job's projections): changed in place
    after it was shipped, the tasks read other bytes than the launcher checked and named. Before: the job ran on them
    (the tasks checked the size alone); now each task refuses it in one line and nothing is published."""
    (tmp_path / "data.txt").write_text("the data, as checked")
    status, err, values = job(tmp_path, engine)
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("gpumr: error: ") and "-data.txt on this node is not what the launcher shipped" in err[0]
    assert "changed since it was shipped" in err[0]
    assert not (tmp_path / "out").exists() and values == []


def test_another_users_side_file_is_copied_not_linked(tmp_path, other_user):
    """A side file of another user (a colleague's projections) was hard-linked into the job's folder like one of
    yours: its owner could change what the tasks read at any time. It is copied now (the bytes the launcher named),
    so the job runs on what was checked, whatever its owner does meanwhile."""
    os.chmod(tmp_path, 0o755)
    data = tmp_path / "data.txt"
    data.write_text("the data, as checked")
    os.chown(data, other_user, other_user)
    status, err, values = job(tmp_path, "inline")
    assert status == 0 and err == [], err
    assert [v["text"] for v in values] == ["the data, as checked"] * 2
    assert data.read_text() == "CHANGEDa, as checked"  # (its owner's change, on their file alone)


def test_another_jobs_hard_link_to_a_checked_side_file_is_no_change_but_new_content_is(tmp_path):
    """A side file's ctime moves when another job hard-links the same file (a built-in cascade, shipped by every job
    of the node): the task reads it again and goes on; a file whose bytes changed is still refused."""
    from gpumr.errors import GpumrError
    from gpumr.launch.ship import content_name
    from gpumr.tasks import runtime
    source = tmp_path / "cascade.xml"
    source.write_bytes(b"<cascade>" + os.urandom(4096) + b"</cascade>")
    name, size = content_name(str(source))
    shipped = tmp_path / name
    os.link(source, shipped)
    path = runtime._verified(name, lambda n: str(tmp_path / n), size)
    before = os.stat(path).st_ctime_ns
    while os.stat(path).st_ctime_ns == before:  # (a link made within the same clock tick leaves ctime as it was)
        os.link(source, tmp_path / f"link-{time.monotonic_ns()}")
    runtime._unchanged({name: path}, {name: size})
    with open(source, "r+b") as f:
        f.seek(20)
        f.write(b"X")
    with pytest.raises(GpumrError, match="changed on this node while the task read it"):
        runtime._unchanged({name: path}, {name: size})


def test_a_side_file_linked_by_another_job_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    """Another job hard-links the node's copy while this task hashes it (its ctime moves mid-read): the task reads it
    again and takes it, rather than refusing it as changed."""
    import hashlib

    from gpumr.launch.ship import content_name
    from gpumr.tasks import runtime
    source = tmp_path / "cascade.xml"
    source.write_bytes(b"<cascade>" + os.urandom(4096) + b"</cascade>")
    name, size = content_name(str(source))
    os.link(source, tmp_path / name)
    reads = []

    class Linking:
        def __init__(self):
            self.h = hashlib.sha256()
            reads.append(self)

        def update(self, data):
            if len(reads) == 1:  # (the first read: another job links the file meanwhile)
                before = os.stat(source).st_ctime_ns
                while os.stat(source).st_ctime_ns == before:
                    os.link(source, tmp_path / f"link-{time.monotonic_ns()}")
            self.h.update(data)

        def hexdigest(self):
            return self.h.hexdigest()
    monkeypatch.setattr(runtime, "hashlib", type("H", (), {"sha256": Linking}))
    assert runtime._verified(name, lambda n: str(tmp_path / n), size) == str(tmp_path / name)
    assert len(reads) == 2
