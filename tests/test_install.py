"""The tests run against the installed package, as users get it."""

import os

import gpumr
import gpumr.conf
import gpumr.cuda
import gpumr.jobs
import seqfile


def test_imported_from_installed_package_not_source_tree():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for mod, source in ((gpumr, "gpumr"), (seqfile, "seqfile"), (gpumr.jobs, "jobs")):
        here = os.path.dirname(os.path.abspath(mod.__file__))
        assert here != os.path.join(repo, source), f"{mod.__name__} imported from the source tree"
        assert "site-packages" in here.split(os.sep), here


def test_package_data_installed():
    cuda_dir = os.path.dirname(gpumr.cuda.__file__)
    assert any(n.endswith(".cu") for n in os.listdir(cuda_dir)), "kernel sources missing from the install"
    conf_dir = os.path.dirname(gpumr.conf.__file__)
    assert any(n.endswith(".conf") for n in os.listdir(conf_dir)), "mrjob configs missing from the install"
