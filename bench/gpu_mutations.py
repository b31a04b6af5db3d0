"""Each wait the GPU drivers make, left out in turn: which test catches it.

A site is a host synchronisation (``synchronize``), a host wait for an
event or a copy (``wait``), a stream's wait for an event (``wait_event``),
or a copy's order after another stream (``to_host_async(..., after=...)``)
in the drivers (:data:`DRIVERS`). For each, the drivers are run with that
one wait left out (a *mutant*: the call removed, or, where it wraps a call,
that call made without the wait; ``after=None``), under the asynchronous
emulating launcher, through the tests of :data:`TESTS`, which stop at the
first failure; the table says which test failed first, or that none did.
Every site must be caught: a wait no test misses is either not needed or
not tested. A test process that dies of a signal (an emulated kernel that
read or wrote past its buffers, where a GPU raises an illegal address)
counts as caught by the test it was running (Python's fault handler names
it).

The mutant is made in each pytest process by the plugin ``tests/gpu_mutant.py``
(``-p gpu_mutant``), from ``$GPUMR_MUTANT`` (``module:line:kind``), before
any test module imports the drivers.

Usage: python bench/gpu_mutations.py [--list] [--only MODULE:LINE ...]
"""

import argparse
import ast
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import table  # noqa: E402 (after the sys.path line that finds it)

#: The modules whose waits are left out in turn.
DRIVERS = ("gpumr.ct.backproject_gpu", "gpumr.ct.fdk_gpu", "gpumr.faces.gpu", "gpumr.blobs.gpu", "gpumr.gpu.trust")
#: The tests run against each mutant (in this order, stopping at the first failure): the driving tests.
TESTS = ("test_gpu_async.py", "test_ct_filter_gpu.py", "test_gpu_driving.py", "test_blobs.py")
#: The tests of the emulator alone (no driver): left out.
DESELECT = "not queued and not non_blocking and not set_constant_lands and not no_stream and not random_orders " \
           "and not eager and not injected and not faults_are and not memory_given_back"
WAITS = ("synchronize", "wait", "wait_event")


def source_of(module):
    """The path of ``module``'s source, as installed."""
    return importlib.util.find_spec(module).origin


def sites(module):
    """The sites of ``module``: ``(line, kind, text)`` each, ``kind`` ``call`` (a wait statement) or ``after``."""
    path = source_of(module)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Attribute) and node.value.func.attr in WAITS:
            out.append((node.lineno, "call", lines[node.lineno - 1].strip()))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "to_host_async" and any(k.arg == "after" for k in node.keywords):
            out.append((node.lineno, "after", lines[node.lineno - 1].strip()))
    return sorted(out)


class Mutate(ast.NodeTransformer):
    """Leave out the wait at ``line`` of ``kind`` (see :func:`sites`); ``done`` says whether it was found."""

    def __init__(self, line, kind):
        self.line, self.kind, self.done = line, kind, False

    def visit_Expr(self, node):
        call = node.value
        if self.kind == "call" and node.lineno == self.line and isinstance(call, ast.Call) and \
                isinstance(call.func, ast.Attribute) and call.func.attr in WAITS:
            self.done = True
            inner = [a for a in call.args if isinstance(a, ast.Call)]
            return ast.copy_location(ast.Expr(inner[0]), node) if inner else ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Call(self, node):
        if self.kind == "after" and node.lineno == self.line and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "to_host_async":
            self.done = True
            node.keywords = [ast.keyword("after", ast.Constant(None)) if k.arg == "after" else k
                             for k in node.keywords]
        return self.generic_visit(node)


def mutant(module, line, kind):
    """``module``'s code with the wait at ``line`` of ``kind`` left out.

    Raises
    ------
    ValueError
        If there is no such site.
    """
    path = source_of(module)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    m = Mutate(line, kind)
    tree = ast.fix_missing_locations(m.visit(tree))
    if not m.done:
        raise ValueError(f"{module}:{line}: no {kind} site there")
    return compile(tree, path, "exec")


def run(module, line, kind, cache, timeout):
    """Run :data:`TESTS` against one mutant: ``(first failing test or None, seconds)``."""
    env = dict(os.environ, GPUMR_MUTANT=f"{module}:{line}:{kind}", GPUMR_TESTS_KERNEL_CACHE=cache)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "gpu_mutant",
                           "-k", DESELECT, *TESTS], cwd=os.path.join(REPO, "tests"), env=env, capture_output=True,
                          text=True, timeout=timeout)
    took = time.perf_counter() - t0
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    if proc.returncode == 0:
        return None, took
    if proc.returncode < 0:  # a kernel read past its buffers and the process died: a GPU's illegal address
        import signal
        where = re.findall(r'File "[^"]*/(test_\w+\.py)", line \d+ in (test_\w+)', proc.stderr)
        if where:
            return f"{where[-1][0]}::{where[-1][1]} (crashed: {signal.Signals(-proc.returncode).name})", took
    if not failed:
        raise RuntimeError(f"the tests of mutant {module}:{line} ended with status {proc.returncode} and no failure "
                           f"named:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return failed.group(1), took


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the sites only")
    ap.add_argument("--only", nargs="*", metavar="MODULE:LINE", help="these sites only")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per mutant's tests")
    args = ap.parse_args(argv)
    every = [(m, line, kind, text) for m in DRIVERS for line, kind, text in sites(m)]
    if args.only:
        every = [s for s in every if f"{s[0]}:{s[1]}" in args.only]
    if args.list:
        table("Waits in the drivers", ["site", "kind", "code"], [[f"{m}:{ln}", k, t] for m, ln, k, t in every])
        return 0
    cache = os.environ.get("GPUMR_TESTS_KERNEL_CACHE") or tempfile.mkdtemp(prefix="gpumr-mutants-kernels-")
    rows, missed = [], 0
    for m, line, kind, text in every:
        caught, took = run(m, line, kind, cache, args.timeout)
        missed += caught is None
        rows.append([f"{m.rpartition('.')[0].partition('.')[2]}/{os.path.basename(source_of(m))}:{line}", text[:70],
                     "after=None" if kind == "after" else "left out", caught or "NOT CAUGHT", f"{took:.0f}"])
        print(f"gpu_mutations: {rows[-1][0]}: {rows[-1][3]} ({took:.0f} s)", flush=True)
    table(f"Each wait of the drivers left out in turn, under the asynchronous emulator ({len(rows)} sites, "
          f"{len(rows) - missed} caught)", ["site", "code", "mutation", "first test to fail", "s"], rows)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
