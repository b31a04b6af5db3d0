"""The EMR walk-through (``docs/how-to/emr.rst``) run as written, against a local S3 server and ``--dry-run``.

Its ``bash`` blocks run in page order in one fresh folder holding the
reader's ``photos/`` (sample frames in two subfolders) and the wheel the
page's copy of the config names: a stand-in file with the wheel's name,
which the dry run never opens (without ``-c`` the job builds its own). ``$BUCKET`` (the page's first block) is
a bucket of moto's S3 server (the ``s3`` fixture: every process gets its
endpoint and fake credentials). Where the page runs the cluster (a
``console`` block), the test runs the same job with ``--engine inline``
into the same bucket, and the page's last steps draw its results from
there. The ``console`` run must be the dry run without ``--dry-run``.
"""

import json
import os
import re
import subprocess
import sys

import pytest
from test_getting_started import bash_blocks

PAGE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "how-to", "emr.rst")


def page():
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def console_commands(text):
    """The ``$ ...`` commands of the page's ``console`` blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"^\.\. code-block:: console\n\n((?:[ \t]+.*\n|\n)+)", text, re.M):
        joined = re.sub(r"\\\n\s*", "", block)
        out += [ln.strip()[2:] for ln in joined.splitlines() if ln.strip().startswith("$ ")]
    return out


def test_the_page_has_every_step():
    text = page()
    script = "\n".join(bash_blocks(text))
    for step in ("export BUCKET=", "gpumr pack photos/ -o", "--engine emr --cloud-tmp-dir", "--dry-run",
                 "gpumr faces render", "gpumr conf mrjob.emr.conf -o emr.conf --package", "--engine emr -c emr.conf"):
        assert step in script, step
    shown = "\n".join(console_commands(text))
    for step in ("aws configure", "aws s3 mb", "aws emr create-default-roles", "aws s3 cp"):
        assert step in shown, step
    # The run the page shows is the (first) dry run, less --dry-run: gpumr's packaged config, no -c.
    dry = next(re.sub(r"\s+", " ", b.replace("\\\n", " ")) for b in bash_blocks(text) if "--dry-run" in b)
    assert " -c " not in dry
    run = next(c for c in console_commands(text) if "--engine emr" in c)
    assert re.sub(r"\s+", " ", run).strip() == dry.replace(" --dry-run", "").strip()


@pytest.mark.slow
def test_the_walkthrough_runs_as_written(s3, tmp_path):
    blocks = bash_blocks(page())
    (bucket,) = re.findall(r"^export BUCKET=(\S+)$", blocks[0], re.M)
    s3.client().create_bucket(Bucket=bucket)
    env = {k: v for k, v in os.environ.items() if k != "GPUMR_SIMULATE_GPUS"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

    def sh(script):
        r = subprocess.run(["bash", "-e", "-c", blocks[0] + "\n" + script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{script}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        return r

    sh("gpumr sample -n 3 photos/2025\ngpumr sample -n 3 photos/2026")
    (tmp_path / "gpumr-0.1.0-py3-none-any.whl").write_bytes(b"stand-in: the dry run names the wheel, never opens it")
    said = {}
    for block in blocks[1:]:
        said[block] = sh(block).stdout
        if "--dry-run" in block:
            # What the cluster would do, here: the same job into the same bucket.
            sh(f'gpumr run faces "s3://{bucket}/photos/" -o "s3://{bucket}/faces/" --engine inline -q')

    conf = (tmp_path / "emr.conf").read_text()
    import gpumr.conf
    installed = os.path.dirname(gpumr.conf.__file__)
    assert f"sudo bash {installed}/bootstrap-gpu-node.sh# {tmp_path}/gpumr-0.1.0-py3-none-any.whl#" in conf
    packaged, copied = [out for block, out in said.items() if "--dry-run" in block]
    prefix = "gpumr run: mrjob's settings (secrets hidden): "
    for dry, wheel in ((packaged, r"/\S+/gpumr-job-\w+/gpumr-0\.1\.0-py3-none-any\.whl"),
                       (copied, re.escape(f"{tmp_path}/gpumr-0.1.0-py3-none-any.whl"))):
        lines = [ln for ln in dry.splitlines() if ln.startswith("gpumr run: ")]
        assert lines[0].startswith("gpumr run: workload faces (built in): 4 task(s) over 4 input file(s)"), dry
        assert lines[1].startswith(f"gpumr run: engine emr; output s3://{bucket}/") and \
            any(ln.startswith("gpumr run: mrjob's emr runner would run: ") for ln in lines), dry
        settings = json.loads(next(ln for ln in lines if ln.startswith(prefix))[len(prefix):])["options"]
        (line,) = settings["bootstrap"]
        assert re.fullmatch(rf"sudo bash {re.escape(installed)}/bootstrap-gpu-node\.sh# {wheel}#", line), line
        assert settings["python_bin"] == ["/opt/gpumr/venv/bin/python"]
        assert {g["InstanceType"] for g in settings["instance_groups"]} >= {"g4dn.2xlarge", "g5.2xlarge"}
    assert "gpumr run: EMR config: emr.conf\n" in copied and "EMR config: gpumr's packaged mrjob.emr.conf" in packaged
    # The page's sample of the dry run is what it prints (less the paths of this machine).
    sample = re.search(r"\.\. code-block:: text\n\n((?:   .*\n)+)", page()).group(1)
    for shown_line in sample.splitlines():
        head = " ".join(shown_line.split()[:5])
        assert any(ln.startswith(head) for ln in packaged.splitlines()), shown_line
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket).get("Contents", ())]
    assert not [k for k in keys if k.startswith("tmp/")], "the dry run wrote to the bucket"
    assert len([k for k in keys if k.startswith("photos/") and k.endswith(".seq")]) == 4, keys
    pictures = sorted(p.relative_to(tmp_path / "boxes").as_posix() for p in (tmp_path / "boxes").rglob("*.jpg"))
    assert len(pictures) == 6 and pictures[0].startswith("2025/")
    assert (tmp_path / "boxes" / "contact_sheet.png").stat().st_size > 0
