"""Lines of code per engine module: what each engine holds of its own, now and at an earlier revision.

An engine (a package ``gpumr/engines/NAME/``) should hold only what differs
between engines (its options, how it submits and ends tasks); what they
share lives in the launcher (``gpumr/launch/``), the task runtime
(``gpumr/tasks/``) and the engines' shared modules, the files directly in
``gpumr/engines/`` (``base``, ``mapreduce``, ``processes``, ``start``, ``jvm``). A code line is a
line with a token of code on it: blank lines, comments and docstrings do not
count (they are the reader's, not the engine's).

Usage: python bench/engine_lines.py [--base REV]   (REV: a git revision to compare with, e.g. acd3174)
"""

import argparse
import ast
import io
import os
import subprocess
import sys
import tokenize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = os.path.join("gpumr", "engines")


def shared(name):
    """Whether the module file ``name`` (a path in the engines' folder) is shared: directly in the folder."""
    return "/" not in name


def family(name):
    """The engine a module file belongs to: ``radical/pilot.py`` is ``radical``'s; a shared one its own name's.

    Examples
    --------
    >>> family("radical/pilot.py"), family("jvm.py")
    ('radical', 'jvm')
    """
    return name.split("/")[0].removesuffix(".py")


def code_lines(source):
    """Lines of ``source`` (Python text) holding code: not blank, not only a comment, not a docstring.

    Examples
    --------
    >>> code_lines("def f():\\n    'Doc.'\\n    # note\\n\\n    return 1\\n")
    2
    """
    docs = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docs.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def modules(rev=None):
    """``{module file name: source}`` of the engines' folder, in the work tree or at git revision ``rev``."""
    if rev is None:
        folder = os.path.join(REPO, ENGINES)
        names = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder)
                       for f in files if f.endswith(".py"))
        return {n: open(os.path.join(folder, n), encoding="utf-8").read() for n in names}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", f"{rev}:{ENGINES}"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:{ENGINES}/{n}"], cwd=REPO, check=True, capture_output=True,
                              text=True).stdout for n in names if n.endswith(".py")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", metavar="REV", help="a git revision to compare with")
    a = ap.parse_args(argv)
    sources = modules()
    now = {n: code_lines(s) for n, s in sources.items()}
    before = {n: code_lines(s) for n, s in modules(a.base).items()} if a.base else {}
    print(f"{'module':<20} {'kind':<7} {'lines':>6} {'code lines':>10}" + (f" {'at ' + a.base:>12}" if a.base else ""))
    for name in sorted(set(now) | set(before)):
        kind = "shared" if shared(name) else "engine"
        lines = len(sources[name].splitlines()) if name in sources else "-"
        row = f"{name:<20} {kind:<7} {lines:>6} {now.get(name, '-'):>10}"
        print(row + (f" {before.get(name, '-'):>12}" if a.base else ""))
    largest = max((v, n) for n, v in now.items() if not shared(n))
    print(f"largest engine module: {largest[1]} with {largest[0]} code lines")
    totals = {}
    for name, n in now.items():
        if not shared(name):
            totals[family(name)] = totals.get(family(name), 0) + n
    print("code lines per engine, its modules together: "
          + ", ".join(f"{e} {n}" for e, n in sorted(totals.items(), key=lambda t: t[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
