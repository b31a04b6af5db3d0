"""Each wait of the GPU drivers left out in turn, under the asynchronous emulator: a test catches every one
(``bench/gpu_mutations.py``; the table is printed, ``pytest -s`` shows it)."""

import os
import re
import subprocess
import sys

import pytest

from gpumr.gpu import emulate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.skipif(not emulate.available()[0], reason="no C++ compiler for the emulated kernels")
def test_every_wait_the_drivers_make_is_caught_when_left_out():
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu_mutations.py")], capture_output=True,
                          text=True, timeout=3600, env=dict(os.environ,
                                                            GPUMR_TESTS_KERNEL_CACHE=os.environ["GPUMR_KERNEL_CACHE"]))
    print(proc.stdout)
    found = re.search(r"\((\d+) sites, (\d+) caught\)", proc.stdout)
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    sites, caught = map(int, found.groups())
    assert sites >= 10 and caught == sites and proc.returncode == 0, proc.stdout[-3000:]
    assert "NOT CAUGHT" not in proc.stdout


def test_a_mutant_leaves_out_exactly_the_wait_named():
    """The mutation itself: a wait statement becomes nothing (or the call it wraps), ``after=`` becomes None."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import ast

    import gpu_mutations
    sites = gpu_mutations.sites("gpumr.ct.backproject_gpu")
    kinds = {kind for _, kind, _ in sites}
    assert kinds == {"call", "after"}
    for line, kind, text in sites:
        code = gpu_mutations.mutant("gpumr.ct.backproject_gpu", line, kind)
        assert code.co_filename.endswith("backproject_gpu.py")
    with pytest.raises(ValueError, match="no call site there"):
        gpu_mutations.mutant("gpumr.ct.backproject_gpu", 1, "call")
    tree = ast.parse("lx.wait(lx.to_host_async(a, b, s, after=c))\nlx.synchronize()\n")
    m = gpu_mutations.Mutate(1, "call")
    assert ast.unparse(m.visit(tree)).splitlines()[0] == "lx.to_host_async(a, b, s, after=c)" and m.done
    tree = ast.parse("lx.wait(lx.to_host_async(a, b, s, after=c))\n")
    assert "after=None" in ast.unparse(gpu_mutations.Mutate(1, "after").visit(tree))
