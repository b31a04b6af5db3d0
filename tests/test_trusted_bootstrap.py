"""Trusted paths, bootstrap (issue 25, class 3): root runs nothing from an environment someone else could change.

The real bootstrap (``conf/bootstrap-gpu-node.sh``) against a temporary
root, with an environment whose folder is root's but whose ``bin/``,
``bin/python`` (or where its link leads) or ``site-packages`` is a second
user's (``useradd``) or open to all. Before the fix the bootstrap checked
the folder only and ran that ``python``.
"""

import grp
import os
import subprocess
import sys

import pytest

BOOTSTRAP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf",
                         "bootstrap-gpu-node.sh")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the bootstrap runs as root (EMR runs it with sudo)")


def _bootstrap(root):
    env = dict(os.environ, GPUMR_ROOT=str(root), GPUMR_GROUP=grp.getgrgid(os.getegid()).gr_name, GPUMR_GPU="no",
               GPUMR_SERVICE="nohup", PYTHON=sys.executable)
    env.pop("GPUMR_SCHEDULER_SOCKET", None)
    return subprocess.run(["bash", BOOTSTRAP, "unused.tar.gz"], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("plant", ["python-foreign", "bin-foreign", "site-packages-open", "python-links-to-foreign",
                                   "bin-sticky-open"])
def test_bootstrap_runs_nothing_from_an_environment_others_could_change(tmp_path, other_user, plant):
    root = tmp_path / "root"
    venv = root / "opt/gpumr/venv"
    site = venv / "lib/python3/site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    for p in (root, root / "opt", root / "opt/gpumr", venv, venv / "lib", venv / "lib/python3", site, venv / "bin"):
        os.chmod(p, 0o755)
    ran = tmp_path / "planted-python-ran"
    script = f"#!/bin/sh\ntouch {ran}\nexit 1\n"
    python = venv / "bin/python"
    if plant == "python-links-to-foreign":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o755)
        (elsewhere / "python").write_text(script)
        os.chmod(elsewhere / "python", 0o755)
        os.chown(elsewhere / "python", other_user, other_user)
        python.symlink_to(elsewhere / "python")
        named, why = str(python), f"leads to {elsewhere / 'python'}, which belongs to uid {other_user}, not to root"
    else:
        python.write_text(script)
        os.chmod(python, 0o755)
        if plant == "python-foreign":
            os.chown(python, other_user, other_user)
            named, why = str(python), f"belongs to uid {other_user}, not to root"
        elif plant == "bin-foreign":
            os.chown(venv / "bin", other_user, other_user)
            named, why = str(venv / "bin"), f"belongs to uid {other_user}, not to root"
        elif plant == "bin-sticky-open":
            os.chmod(venv / "bin", 0o1777)
            named, why = str(venv / "bin"), "mode 1777 lets others write in it"
        else:
            os.chmod(site, 0o777)
            named, why = str(site), "mode 777 lets others write in it"
    proc = _bootstrap(root)
    assert not ran.exists(), "the bootstrap ran a python that someone else could have put there"
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"gpumr bootstrap: {named}: ") and why in lines[0], proc.stderr
    assert not (root / "run").exists()  # refused before anything was made

