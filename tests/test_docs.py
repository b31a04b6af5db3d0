"""The documentation builds with warnings as errors, and its reference matches the code.

CI runs only ``make test``, so this is where CI builds the docs: a broken
link, a docstring Sphinx cannot read, or a ``gpumr`` subcommand missing from
the command reference fails here. The other tests compare the hand-written
reference tables (environment variables, scheduler error codes, exit
statuses) with the code they describe.
"""

import argparse
import glob
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

from conftest import missing

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
DOCS = os.path.join(ROOT, "docs")
REF = os.path.join(DOCS, "reference")


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()


def leaf_commands(parser, path=()):
    """Every leaf subcommand of an argparse parser, as tuples of names."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [path]
    return [leaf for name, sub in subs[0].choices.items() for leaf in leaf_commands(sub, path + (name,))]


def documented_commands():
    """``{path: pending}`` for each ``.. gpumr-command:: PATH`` of the command reference."""
    text = read(REF, "cli.rst")
    out = {}
    for m in re.finditer(r"^\.\. gpumr-command:: (.+)\n((?:[ \t]+\S.*\n)*)", text, re.M):
        out[tuple(m.group(1).split())] = ":pending:" in m.group(2)
    return out


def test_command_reference_lists_every_subcommand():
    from gpumr.cli import build_parser
    leaves = leaf_commands(build_parser())
    documented = documented_commands()
    assert leaves and documented
    missing = [" ".join(p) for p in leaves if not any(p[:len(d)] == d for d in documented)]
    assert not missing, f"gpumr subcommands without reference in docs/reference/cli.rst: {missing}"
    tops = {p[:len(d)] for p in leaves for d in documented}
    stale = [" ".join(d) for d, pending in documented.items() if d not in tops and not pending]
    assert not stale, f"docs/reference/cli.rst documents commands gpumr does not have: {stale}"



def engine_option_strings(kind, engine):
    """The option strings ``gpumr run KIND --engine ENGINE`` parses, from the parser that engine builds."""
    from gpumr.engines import common, dask, spark
    from gpumr.engines.runners import ENGINES as MRJOB
    from gpumr.workloads import get
    p = common.parser(kind, engine, split_size=engine not in MRJOB)
    {"spark": spark._master_option, "dask": dask._options}.get(engine, lambda p: None)(p)
    get(kind).add_to(p)
    return {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}


def test_run_parser_has_every_engines_options_in_groups():
    """``gpumr run WORKLOAD --help`` (the one parser, which the reference is generated from) lists ``--engine``'s
    choices and each engine's own options in a group of its own."""
    from gpumr import engines
    from gpumr.launch.parser import run_parser
    from gpumr.workloads import BUILT_IN, find, load
    for name in BUILT_IN:
        cls = load(find(name))
        p = run_parser(cls)
        engine = next(a for a in p._actions if a.dest == "engine")
        assert tuple(engine.choices) == engines.NAMES
        groups = {g.title: {s for a in g._group_actions for s in a.option_strings} for g in p._action_groups}
        assert groups["engine dask"] == {"--scheduler", "--workers"} and groups["engine spark"] == {"--master"}
        assert "--hadoop-splits" in next(v for k, v in groups.items() if k.startswith("engine inline"))
        assert {"--device", "--gpu-slots", "--gpu-memory"} == groups["device choice"]
        assert {o.name for o in cls.options} == groups[f"{name} options"]
        assert all(e in p.format_help() for e in engines.NAMES)


def env_names_in_code():
    """Every ``GPUMR_*`` environment variable the shipped code and scripts name.

    C macros of the kernels' host emulation (``GPUMR_KERNEL(...)``, include
    guards in ``cuda/``) are not variables: ``cuda/`` is not searched and a
    name followed by ``(`` is a macro.
    """
    names = set()
    for top in ("gpumr", "seqfile", "jobs", "conf", "bench"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if os.path.splitext(path)[1] in (".py", ".sh", ".conf", ".json") and os.path.isfile(path):
                names |= set(re.findall(r"\b(GPUMR_[A-Z0-9_]+)\b(?!\()", read(path)))
    return names


def test_environment_table_lists_every_variable():
    in_code = env_names_in_code()
    table = read(REF, "environment.rst")
    documented = set(re.findall(r"^   \* - ``(GPUMR_[A-Z0-9_]+)``", table, re.M))
    assert "GPUMR_SIMULATE_GPUS" in in_code
    assert not in_code - documented, f"not in docs/reference/environment.rst: {sorted(in_code - documented)}"
    assert not documented - in_code, f"documented but not in the code: {sorted(documented - in_code)}"


def test_scheduler_error_codes_documented():
    from gpumr.devices import protocol
    codes = {v for n, v in vars(protocol).items()
             if n.isupper() and isinstance(v, str) and re.fullmatch(r"[a-z]+(-[a-z]+)+", v)}
    errors = read(REF, "scheduler-protocol.rst").split("\nErrors\n------\n", 1)[1]
    table = set(re.findall(r"^``([a-z-]+)``\s", errors, re.M))
    assert {"no-gpu", "no-gpu-free", "bad-request"} <= codes
    assert codes == table


def test_exit_statuses_documented():
    from gpumr import errors
    text = read(REF, "exit-status.rst")
    for name in ("EXIT_OK", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED"):
        assert re.search(rf"^{getattr(errors, name)}\s+``{name}``", text, re.M), name


def rst_files():
    """Every reStructuredText source of the documentation (the build's output aside)."""
    return sorted(p for p in glob.glob(os.path.join(DOCS, "**", "*.rst"), recursive=True)
                  if os.sep + "_build" + os.sep not in p)


#: furo's escape hatch: a ``contents`` directive with this class shows no error box.
FURO_ESCAPE = "this-will-duplicate-information-and-it-is-still-useful-here"


def test_no_contents_directive_under_furo():
    """furo draws a red "ERROR: Adding a table of contents..." box (by CSS: -W cannot see it) over any ``contents``."""
    assert re.search(r"^html_theme = \"furo\"$", read(DOCS, "conf.py"), re.M)
    offenders = []
    for path in rst_files():
        text = read(path)
        for m in re.finditer(r"^[ \t]*\.\. contents::.*\n((?:[ \t]+:.*\n)*)", text, re.M):
            if FURO_ESCAPE not in m.group(1):
                offenders.append(f"{os.path.relpath(path, ROOT)}:{text[:m.start()].count(chr(10)) + 1}")
    assert not offenders, f"'.. contents::' under furo shows an error box on the page: {offenders}"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation built with warnings as errors (as ``make docs``), its figures made by gpumr."""
    try:
        import sphinx  # noqa: F401
        import furo  # noqa: F401
    except ImportError as exc:
        missing("the docs build", f"{exc} (pip install '.[docs]')")
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        "-d", str(tmp / "doctrees"), DOCS, str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(site):
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    from gpumr.cli import build_parser
    for path in leaf_commands(build_parser()):
        assert f'id="cmd-{"-".join(path)}"' in cli, path
    # gpumr run WORKLOAD's options, from the one parser, in the reference.
    from gpumr.launch.parser import run_parser
    from gpumr.workloads import BUILT_IN, find, load
    for name in BUILT_IN:
        assert f'id="run-{name}"' in cli
        for action in run_parser(load(find(name)))._actions:
            for option in action.option_strings:
                assert option in cli, (name, option)


def furo_error_selectors(site):
    """The selectors of furo's stylesheet rules that draw an "ERROR: ..." text (``::before`` taken off)."""
    css = (site / "_static" / "styles" / "furo.css").read_text(encoding="utf-8")
    rules = re.findall(r"([^{}]+)\{[^}]*content:\s*[\"']ERROR", css)
    return [re.sub(r"::?(before|after)\b", "", sel).strip() for rule in rules for sel in rule.split(",")]


@pytest.mark.slow
def test_no_page_shows_furo_error_box(site):
    """No element of any built page matches a furo rule that draws an error (the rule read from furo's own CSS)."""
    from bs4 import BeautifulSoup
    sys.path.insert(0, os.path.dirname(__file__))
    from browser import pages_of
    selectors = furo_error_selectors(site)
    assert any(".contents" in s for s in selectors), selectors  # furo's rule is found, so the check can fail
    shown = {}
    for page in pages_of(str(site)):
        soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
        hits = [sel for sel in selectors if soup.select(sel)]
        if hits:
            shown[page] = hits
    assert not shown, f"pages furo draws an error box on: {shown}"


@pytest.mark.slow
def test_no_page_shows_an_error_in_a_browser(site):
    """Every page as headless Chromium renders it: no "ERROR" drawn by a stylesheet, no docutils error node."""
    sys.path.insert(0, os.path.dirname(__file__))
    import browser
    command, why = browser.find()
    if command is None:
        missing("the rendered-page check (.ci/run installs Chromium)", why)
    shown = browser.shown_errors(str(site), command)
    assert "getting-started/index.html" in shown and "index.html" in shown, sorted(shown)
    bad = {page: errors for page, errors in shown.items() if errors}
    assert not bad, f"pages that show an error in a browser: {bad}"


#: The widest command line a code box shows whole at furo's desktop width (checked in Chromium screenshots).
MAX_COMMAND = 88


def code_blocks(text):
    """``(language or "::", line number, body lines)`` of every code block of a reStructuredText text."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:\.\. code-block:: (\S+)\s*$|(?!\.\. ).*::\s*$)", line)
        if not m or (m.group(2) is None and not line.rstrip().endswith("::")):
            continue
        indent = len(m.group(1))
        body, j = [], i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            body.append(lines[j])
            j += 1
        out.append((m.group(2) or "::", i + 1, [b for b in body if b.strip()]))
    return out


def test_shell_blocks_are_highlighted_as_shell_and_fit_their_box():
    """A command is shown in a ``bash``/``console`` block (``::`` would colour it as Python), and fits the box."""
    shellish = re.compile(r"^\s*(\$ |gpumr [a-z][a-z-]*\s|python3? -m |pip install |make |hadoop |spark-submit |aws )")
    wrong = []
    for path in rst_files() + [os.path.join(ROOT, "gpumr", "troubleshooting.rst")]:
        rel = os.path.relpath(path, ROOT)
        for lang, n, body in code_blocks(read(path)):
            if lang in ("::", "python", "text") and body and shellish.match(body[0]):
                wrong.append(f"{rel}:{n}: shell commands in a '{lang}' block (use code-block:: bash or console)")
            if lang in ("bash", "console", "shell"):
                commands = body if lang != "console" else [b for b in body if b.strip().startswith("$ ")
                                                           or b.startswith("     ")]
                indent = min((len(b) - len(b.lstrip()) for b in body), default=0)
                for b in commands:
                    if len(b) - indent > MAX_COMMAND:
                        wrong.append(f"{rel}:{n}: a {len(b) - indent}-character command line is clipped in its "
                                     f"box (at most {MAX_COMMAND}; break it with \\): {b.strip()[:60]}...")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_every_figure_is_made_and_shown(site):
    """Each ``gpumr-figure`` a page names (optional ones aside) is an image of that built page, made at this build."""
    from bs4 import BeautifulSoup
    named = {}
    for path in rst_files() + [os.path.join(ROOT, "gpumr", "troubleshooting.rst")]:
        for m in re.finditer(r"^\.\. gpumr-figure:: (\S+)\n((?:[ \t]+:.*\n)*)", read(path), re.M):
            if ":optional:" not in m.group(2):
                named[m.group(1)] = os.path.splitext(os.path.relpath(path, DOCS))[0] + ".html"
    assert {"contact_sheet", "ct_preview", "record_path", "architecture", "seqfile_layout", "scaling"} <= set(named)
    for name, page in named.items():
        soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
        images = [img["src"] for img in soup.select("figure img") if os.path.basename(img["src"]).startswith(name)]
        assert images, f"{page} shows no image of figure {name}"
        built = site / page
        picture = (built.parent / images[0]).resolve()
        assert picture.stat().st_size > 10_000, (name, picture.stat().st_size)  # a picture, not an empty canvas
        # made at this build, from gpumr's commands and code (not a stale file)
        assert picture.stat().st_mtime >= (site / "index.html").stat().st_mtime - 900, name
