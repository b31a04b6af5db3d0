"""Every example in gpumr's and seqfile's docstrings runs and shows what it says (numpydoc's Examples sections)."""

import doctest
import importlib
import pkgutil

import pytest

import gpumr
import seqfile

#: Modules whose examples are not run here: a program's entry (``__main__``), and the engines whose framework
#: runs in an environment of its own (PyFlink: ``make flink-env``).
NOT_RUN = ("gpumr.__main__", "gpumr.engines.flink")


def modules():
    for package in (seqfile, gpumr):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name not in NOT_RUN:
                yield info.name


@pytest.mark.parametrize("name", sorted(modules()))
def test_the_examples_of_each_module_hold(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = []
    for test in finder.find(module, name):
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)
