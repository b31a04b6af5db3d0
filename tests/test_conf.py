"""``gpumr conf``: the packaged configs from any folder, and a copy of the EMR config that names files absolutely."""

import os

import gpumr.conf
from gpumr.cli import main

INSTALLED = os.path.dirname(gpumr.conf.__file__)


def test_lists_the_packaged_files_and_prints_one_s_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # any folder: nothing here
    assert main(["conf"]) == 0
    listing = capsys.readouterr().out
    for name in ("mrjob.local.conf", "mrjob.emr.conf", "bootstrap-gpu-node.sh"):
        assert name in listing
    assert main(["conf", "mrjob.local.conf"]) == 0
    path = capsys.readouterr().out.strip()
    assert path == os.path.join(INSTALLED, "mrjob.local.conf") and os.path.isfile(path)
    assert main(["conf", "nosuch.conf"]) == 1
    assert "no packaged file 'nosuch.conf': choose one of bootstrap-gpu-node.sh" in capsys.readouterr().err


def test_a_copy_names_the_bootstrap_and_the_package_absolutely(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["conf", "mrjob.emr.conf", "-o", "emr.conf"]) == 1  # the config uploads a package: which?
    assert "--package is required" in capsys.readouterr().err and not (tmp_path / "emr.conf").exists()
    assert main(["conf", "mrjob.emr.conf", "-o", "emr.conf", "--package", "missing.whl"]) == 1
    assert "--package missing.whl: no such file" in capsys.readouterr().err
    (tmp_path / "gpumr-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    assert main(["conf", "mrjob.emr.conf", "-o", "emr.conf", "--package", "gpumr-0.1.0-py3-none-any.whl"]) == 0
    text = (tmp_path / "emr.conf").read_text()
    assert f"sudo bash {INSTALLED}/bootstrap-gpu-node.sh# {tmp_path}/gpumr-0.1.0-py3-none-any.whl#" in text
    assert " conf/bootstrap-gpu-node.sh#" not in text and "dist/gpumr-" not in text
    # Its comments are right for someone who installed gpumr's wheel: no sdist to build, no checkout to stand in.
    for checkout_only in ("setup.py", "sdist", "checkout", "conf/mrjob.emr.conf"):
        assert checkout_only not in text, checkout_only
    assert "gpumr conf mrjob.emr.conf -o emr.conf --package gpumr-VERSION-py3-none-any.whl" in text
    # Written under the output rule: its own copy is replaced, a file of the user's is not.
    assert main(["conf", "mrjob.emr.conf", "-o", "emr.conf", "--package", "gpumr-0.1.0-py3-none-any.whl"]) == 0
    (tmp_path / "mine.conf").write_text("my own\n")
    capsys.readouterr()
    assert main(["conf", "mrjob.local.conf", "-o", "mine.conf"]) == 1
    assert (tmp_path / "mine.conf").read_text() == "my own\n"
