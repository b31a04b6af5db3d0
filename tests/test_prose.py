"""Prose where it belongs: docstrings stay short, and no timing figure lives in a docstring or a comment.

A docstring says what and why; measurements, incidents and history go to
``docs/benchmarks.rst``, ``docs/lab-notes/``, the changelog and commit
messages (issue 67, Build 5).
"""

import ast
import io
import os
import re
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The library, whose lines the docstring ratio counts.
LIBRARY = ("gpumr", "seqfile")
#: Where no timing figure may sit in a docstring or a comment.
SCANNED = ("gpumr", "seqfile", "jobs", "bench")
#: The most of the library's lines that docstrings may span.
MAX_RATIO = 0.20

# A timing figure is a measurement: a time, a rate or a speed-up. A limit the code keeps (``64 MiB``, a
# ``30 s`` timeout, an image of ``4096 x 4096``) is a contract and passes. Measurements are told apart by
# their form: a time with a fraction or a range (``0.12 s``, ``5-7 s``), any rate (``1,337 fps``, ``928
# GUPS``, ``2.1 GB/s``), a factor written onto its number (``2.5x``), a median of runs (``medians of 8``),
# and a whole time or a percentage in a sentence that reports a measurement (``took 30 s``, ``cost 5%``).
_NUM = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}\s*(?:-|–|to)\s*\d[\d,]*(?:\.\d+)?"
_TIME = r"\s*(?:s|ms|µs|us|ns|sec|secs|seconds?|min|mins|minutes?|hours?)(?![\w/])"
ALWAYS = re.compile(
    rf"(?:(?<![\w.])\d[\d,]*\.\d+|{_RANGE}){_TIME}"            # 0.12 s, 5-7 s, 0.1-0.45 s
    rf"|{_NUM}\s*(?:fps|GUPS|[kKMGT]i?B/s|MB/s|it/s|records?/s|frames?/s)(?!\w)"  # rates
    rf"|{_NUM}[x×](?![\w])"                                  # 2.5x (not 24 x 24)
    r"|\bmedians? of \d",                                     # medians of 8
)
MEASURED = re.compile(rf"{_NUM}{_TIME}|{_NUM}\s*%|{_RANGE}\s*%")
REPORTING = re.compile(
    r"\b(?:took|takes|taking|cost|costs|costing|spent|saved|measured|paired|median|against|faster|slower|"
    r"sped|speed-?up|moved)\b", re.I)


def python_files(folders):
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            for name in sorted(filenames):
                if name.endswith(".py"):
                    yield os.path.join(dirpath, name)


def docstrings(tree):
    """``(first line, last line, text)`` of each module, class and function docstring."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                yield first.lineno, first.end_lineno, first.value.value


def prose(source):
    """``(line, text)`` of each docstring and each run of comment lines of a module's source."""
    lines = source.splitlines()
    for start, end, _ in docstrings(ast.parse(source)):
        yield start, "\n".join(lines[start - 1:end])
    run = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if run and run[-1][0] != tok.start[0] - 1:
                yield run[0][0], "\n".join(text for _, text in run)
                run = []
            run.append((tok.start[0], tok.string))
    if run:
        yield run[0][0], "\n".join(text for _, text in run)


def sentence(text, at):
    """The sentence of ``text`` around offset ``at`` (a full stop and a space, or a blank line, end one)."""
    starts = [m.end() for m in re.finditer(r"[.;!?]\s|\n\s*\n", text[:at])]
    end = re.search(r"[.;!?]\s|\n\s*\n", text[at:])
    return text[starts[-1] if starts else 0:at + (end.start() if end else len(text))]


def timing_figures(source):
    """``(line, figure)`` of every timing figure in the docstrings and comments of a module's source."""
    out = []
    for line, text in prose(source):
        found = [m for m in ALWAYS.finditer(text)]
        found += [m for m in MEASURED.finditer(text) if REPORTING.search(sentence(text, m.start()))]
        spans = sorted({m.span() for m in found}, key=lambda span: (span[0], -span[1]))
        for at, end in spans:
            if not any(a <= at and end <= b and (a, b) != (at, end) for a, b in spans):
                out.append((line + text.count("\n", 0, at), text[at:end].strip()))
    return out


def test_docstrings_span_at_most_a_fifth_of_the_library():
    docs = total = 0
    heavy = []
    for path in python_files(LIBRARY):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = sum(end - start + 1 for start, end, _ in docstrings(ast.parse(source)))
        docs += lines
        total += len(source.splitlines())
        heavy.append((lines, os.path.relpath(path, ROOT)))
    ratio = docs / total
    top = ", ".join(f"{path} {n}" for n, path in sorted(heavy, reverse=True)[:8])
    assert ratio <= MAX_RATIO, f"docstrings span {docs} of {total} library lines ({ratio:.1%}); the most: {top}"


def test_no_timing_figures_in_docstrings_or_comments():
    found = []
    for path in python_files(SCANNED):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        found += [f"{os.path.relpath(path, ROOT)}:{line}: {figure}" for line, figure in timing_figures(source)]
    assert not found, "timing figures belong in docs/benchmarks.rst, docs/lab-notes/ and the changelog:\n" \
        + "\n".join(found)


PLANTED = '''\
"""A module. Reading a set took 0.25 ms a projection."""

LIMIT = 64 * 2**20  # 64 MiB: a contract, not a measurement

def f(timeout=30):
    """Wait at most 30 s (a 24 x 24 window, 15% more pixels by default)."""
    # paired: 6.73 s against 6.27 s, medians of 8
    x = 1  # the kernel runs at 928 GUPS, 2.5x the CPU
    # this import cost two busy workers 5-7%
    return x
'''


@pytest.mark.parametrize("source, expected", [
    (PLANTED, [(1, "0.25 ms"), (7, "6.73 s"), (7, "6.27 s"), (7, "medians of 8"), (8, "928 GUPS"), (8, "2.5x"),
               (9, "5-7%")]),
    ('# waits 30 s, then 60 seconds more; 2**27 pixels, e.g. 11585 x 11585; 8 MiB a message\n', []),
    ('def g():\n    """A test step.\n\n    The call took 30 s\n    on this machine.\n    """\n', [(4, "30 s")]),
])
def test_the_rule_finds_planted_figures_and_passes_contracts(source, expected):
    assert timing_figures(source) == expected
