"""The documentation builds with warnings as errors, and its reference matches the code.

CI runs only ``make test``, so this is where CI builds the docs: a broken
link, a docstring Sphinx cannot read, or a ``gpumr`` subcommand missing from
the command reference fails here. The other tests compare the hand-written
reference tables (environment variables, scheduler error codes, exit
statuses) with the code they describe.
"""

import argparse
import glob
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


CLI = os.path.join(REF, "cli")


def documented_commands():
    """``{path: pending}`` for each ``.. gpumr-command:: PATH`` of the command reference (a page per command)."""
    text = "\n".join(read(path) for path in sorted(glob.glob(os.path.join(CLI, "*.rst"))))
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
    assert not missing, f"gpumr subcommands without reference in docs/reference/cli/: {missing}"
    tops = {p[:len(d)] for p in leaves for d in documented}
    stale = [" ".join(d) for d, pending in documented.items() if d not in tops and not pending]
    assert not stale, f"docs/reference/cli/ documents commands gpumr does not have: {stale}"


def test_each_command_has_a_page_of_its_own():
    """The command reference is a page per top-level command (``docs/reference/cli/NAME.rst``) and an index that
    lists them all, not one page of every command."""
    from gpumr.cli import build_parser
    tops = sorted({path[0] for path in leaf_commands(build_parser())})
    pages = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(CLI, "*.rst"))} - {"index"}
    assert pages == set(tops), (sorted(pages), tops)
    for name in tops:
        assert re.search(rf"^\.\. gpumr-command:: {re.escape(name)}$", read(CLI, name + ".rst"), re.M), name
    index = read(CLI, "index.rst")
    listed = {n for m in re.finditer(r"^\.\. gpumr-commands:: (.+)$", index, re.M) for n in m.group(1).split()}
    assert listed == set(tops), sorted(set(tops) ^ listed)
    assert not os.path.exists(os.path.join(REF, "cli.rst"))



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
        assert {"--device", "--gpu-slots", "--gpu-memory", "--gpu-owner"} == groups["device choice"]
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
def built(tmp_path_factory):
    """``(folder, what the build printed)``: the documentation built with warnings as errors (as ``make docs``),
    its figures made by gpumr."""
    try:
        import furo  # noqa: F401 (only whether it imports)
        import sphinx  # noqa: F401 (only whether it imports)
    except ImportError as exc:
        missing("the docs build", f"{exc} (pip install '.[docs]')")
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    # A fresh matplotlib cache, as on a new machine: its first font scan logs a line (furo's accessible-pygments
    # sets the root logger to INFO), which the build must not show.
    env = dict(os.environ, MPLCONFIGDIR=str(tmp / "matplotlib"))
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        "-d", str(tmp / "doctrees"), DOCS, str(out)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout + r.stderr


@pytest.fixture(scope="module")
def site(built):
    """The built documentation's folder."""
    return built[0]


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(built):
    site, said = built
    assert said == "", f"the build printed: {said}"
    cli = "".join(p.read_text(encoding="utf-8") for p in sorted((site / "reference" / "cli").glob("*.html")))
    from gpumr.cli import build_parser
    for path in leaf_commands(build_parser()):
        assert f'id="cmd-{"-".join(path)}"' in cli, path
    # gpumr run WORKLOAD's options, from the one parser: the shared ones in the run page, each workload's own on
    # its page.
    from gpumr.launch.parser import run_parser
    from gpumr.workloads import BUILT_IN, find, load
    run, every = ((site / "reference" / "cli" / f"{name}.html").read_text(encoding="utf-8") for name in ("run", "index"))
    for name in BUILT_IN:
        page = (site / "workloads" / f"{name}.html").read_text(encoding="utf-8")
        assert f'id="run-{name}"' in page
        for action in run_parser(load(find(name)))._actions:
            if action.help == argparse.SUPPRESS:  # (mrjob's options: the page says they pass through)
                continue
            for option in set(action.option_strings) - {"-h", "--help"}:
                assert f'<span class="pre">{option}</span>' in page + run + every, (name, option)


def usage_blocks(html):
    """The usage blocks (``gpumr ...`` at the start of a text code block) of a built page, as lines."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(html, "html.parser")
    return [pre.get_text().rstrip("\n").split("\n") for pre in soup.select("div.highlight-text pre")
            if pre.get_text().startswith("gpumr ")]


@pytest.mark.slow
def test_usage_lines_fit_and_align(site):
    """Every usage block of the command reference fits its box and each of its lines after the first starts under
    the first argument (argparse's own wrapping indents under ``usage: PROG``, which the block does not show)."""
    seen, wrong = 0, []
    for page in sorted((site / "reference" / "cli").glob("*.html")) + sorted((site / "workloads").glob("*.html")):
        for lines in usage_blocks(page.read_text(encoding="utf-8")):
            seen += 1
            prog = []
            for word in lines[0].split():
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                prog.append(word)
            prog = " ".join(prog)
            for line in lines:
                if len(line) > MAX_COMMAND and " " in line.strip():
                    wrong.append(f"{page.name}: {len(line)} characters: {line}")
            for line in lines[1:]:
                if not line.startswith(" " * (len(prog) + 1)) or line[len(prog) + 1] == " ":
                    wrong.append(f"{page.name}: not under {prog!r}'s first argument: {line!r}")
    assert seen >= 20, seen
    assert not wrong, "\n".join(wrong)


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


@pytest.fixture(scope="module")
def rendered(site):
    """``{page: {"errors": [...], "height": px}}``: every page as headless Chromium renders it."""
    sys.path.insert(0, os.path.dirname(__file__))
    import browser
    command, why = browser.find()
    if command is None:
        missing("the rendered-page check (.ci/run installs Chromium)", why)
    return browser.inspect_pages(str(site), command)


@pytest.mark.slow
def test_no_page_shows_an_error_in_a_browser(rendered):
    """Every page as headless Chromium renders it: no "ERROR" drawn by a stylesheet, no docutils error node."""
    assert "getting-started/index.html" in rendered and "index.html" in rendered, sorted(rendered)
    bad = {page: seen["errors"] for page, seen in rendered.items() if seen["errors"]}
    assert not bad, f"pages that show an error in a browser: {bad}"


#: The tallest page a reader should meet, in pixels at a 1280-pixel-wide window (about ten screens).
MAX_PAGE_HEIGHT = 8000


@pytest.mark.slow
def test_no_page_is_taller_than_ten_screens(rendered):
    """Every page, the API reference's included (a page per module: a module whose page is taller is split)."""
    heights = {page: seen["height"] for page, seen in rendered.items()}
    assert all(isinstance(h, int) and h > 500 for h in heights.values()), heights
    assert sum(page.startswith("reference/api/") for page in heights) > 100, sorted(heights)
    tall = {page: h for page, h in heights.items() if h > MAX_PAGE_HEIGHT}
    assert not tall, f"pages taller than {MAX_PAGE_HEIGHT} px: {tall}"


# -- the API reference: a page per module ---------------------------------------------------------------------
def installed_modules():
    """Every module of the installed ``gpumr`` and ``seqfile`` (what ``pip install gpumr`` put there), found by
    walking their folders; ``__main__`` aside (importing it runs the command line)."""
    import gpumr
    import seqfile
    out = set()
    for package in (gpumr, seqfile):
        top = os.path.dirname(package.__file__)
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py"))]
            rel = os.path.relpath(folder, top)
            name = ".".join([package.__name__] + ([] if rel == os.curdir else rel.split(os.sep)))
            out |= {name if f == "__init__.py" else f"{name}.{f[:-3]}" for f in files
                    if f.endswith(".py") and f != "__main__.py"}
    return out


def test_api_pages_are_made_for_every_installed_module():
    """The API reference's generator (docs/_ext/gpumr_api.py) finds, in the checkout, every module the installed
    package has, the folders installed under gpumr (``gpumr.jobs``) included."""
    sys.path.insert(0, os.path.join(DOCS, "_ext"))
    import gpumr_api
    installed = installed_modules()
    assert {"gpumr", "gpumr.jobs.face_detect", "gpumr.engines.mrjob.task", "seqfile.reader"} <= installed
    made = set(gpumr_api.modules())
    assert made == installed, f"only installed: {sorted(installed - made)}; only in the docs: {sorted(made - installed)}"


@pytest.mark.slow
def test_api_reference_has_a_page_per_module_each_once(site):
    """Each installed module is documented exactly once in the whole site, on its own page
    (``reference/api/MODULE.html``), and the API index links to every one."""
    from collections import Counter
    api = site / "reference" / "api"
    targets = Counter()
    for page in pages_of_site(site):
        html = (site / page).read_text(encoding="utf-8")
        for name in re.findall(r'<[^>]+ id="module-([\w.]+)"', html):
            targets[name] += 1
            assert page == f"reference/api/{name}.html", (name, page)
    installed = installed_modules()
    assert set(targets) == installed, (sorted(installed - set(targets)), sorted(set(targets) - installed))
    assert not [n for n, count in targets.items() if count != 1], targets
    assert {p.name for p in api.glob("*.html")} == {f"{n}.html" for n in installed} | {"index.html"}
    index = (api / "index.html").read_text(encoding="utf-8")
    unlinked = [n for n in installed if f'href="{n}.html#module-{n}"' not in index]
    assert not unlinked, f"modules the API index does not list: {sorted(unlinked)}"


def pages_of_site(site):
    sys.path.insert(0, os.path.dirname(__file__))
    from browser import pages_of
    return pages_of(str(site))


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
    assert {"contact_sheet", "ct_preview", "blobs", "watershed", "record_path", "architecture", "seqfile_layout",
            "scaling", "breakdown"} <= set(named)
    for name, page in named.items():
        soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
        images = [img["src"] for img in soup.select("figure img") if os.path.basename(img["src"]).startswith(name)]
        assert images, f"{page} shows no image of figure {name}"
        built = site / page
        picture = (built.parent / images[0]).resolve()
        assert picture.stat().st_size > 10_000, (name, picture.stat().st_size)  # a picture, not an empty canvas
        # made at this build, from gpumr's commands and code (not a stale file)
        assert picture.stat().st_mtime >= (site / "index.html").stat().st_mtime - 900, name


# -- one story: the same workloads and engines named everywhere -----------------------------------------------
#: The built pages that name every built-in workload and every engine (each as a literal: ``flink``).
STORY_PAGES = ("index.html", "concepts/index.html", "getting-started/index.html", "how-to/own-workload.html",
               "how-to/index.html", "workloads/index.html", "reference/cli/index.html", "reference/cli/run.html")


def story_names():
    from gpumr import engines
    from gpumr.workloads import BUILT_IN
    return list(BUILT_IN), list(engines.NAMES)


@pytest.mark.slow
def test_every_story_page_names_every_workload_and_engine(site):
    workloads, engines = story_names()
    short = {}
    for page in STORY_PAGES:
        html = (site / page).read_text(encoding="utf-8")
        gone = [n for n in workloads + engines if f'<span class="pre">{n}</span>' not in html]
        if gone:
            short[page] = gone
    assert not short, f"pages that leave out workloads or engines: {short}"


def test_the_readme_names_every_workload_and_engine():
    workloads, engines = story_names()
    readme = read(ROOT, "README.rst")
    assert not [n for n in workloads + engines if f"``{n}``" not in readme]
    assert "two workloads" not in readme.lower() and "Two workloads" not in readme


def test_gpumr_help_names_every_workload_and_engine():
    """``gpumr --help`` and ``gpumr run --help`` tell the same story as the documentation."""
    workloads, engines = story_names()
    for args in (["--help"], ["run", "--help"]):
        r = subprocess.run([sys.executable, "-m", "gpumr", *args], capture_output=True, text=True, timeout=120,
                           cwd=ROOT)
        assert r.returncode == 0, r.stderr
        text = " ".join(r.stdout.split())
        gone = [n for n in workloads + engines if not re.search(rf"\b{n}\b", text)]
        assert not gone, (args, gone, r.stdout)


def test_no_page_says_two_workloads():
    said = [os.path.relpath(p, ROOT) for p in rst_files() + [os.path.join(ROOT, "README.rst")]
            if re.search(r"\b(both|two|either) workloads?\b", read(p), re.I)
            and "changelog" not in os.path.basename(p)]  # (history: it says what was true then)
    assert not said, said


#: Where internal names of the studies gpumr's engines and workloads came from could leak to readers.
def _reader_facing_files():
    for top in ("docs", "gpumr", "bench", "seqfile", "jobs", "conf"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if os.path.splitext(path)[1] in (".rst", ".py", ".sh", ".conf", ".json", ".txt") and \
                    os.sep + "_build" + os.sep not in path and os.sep + "_generated" + os.sep not in path:
                yield path
    yield os.path.join(ROOT, "README.rst")


def test_no_internal_study_names():
    """"seed 004" and its like are names of the project's own notes: a reader is told what the study is."""
    found = [f"{os.path.relpath(p, ROOT)}: {m.group(0)}" for p in _reader_facing_files()
             for m in re.finditer(r"\bseed[ _-]?0\d\d\b", read(p), re.I)]
    assert not found, found


def test_the_architecture_figure_has_every_workload_and_engine():
    """The figure's parts come from the code's tables: a box per built-in workload's package, every engine named
    in the engines' box; and the parts' imports make no cycle (none drawn red, none to explain)."""
    sys.path.insert(0, os.path.join(DOCS, "_ext"))
    import gpumr_figures

    from gpumr import engines
    from gpumr.workloads import BUILT_IN
    parts = gpumr_figures.parts()
    for ref in BUILT_IN.values():
        package = ".".join(ref.split(":")[0].split(".")[:2])
        assert package in parts, package
    assert all(n in parts["gpumr.engines"][1] for n in engines.NAMES), parts["gpumr.engines"]
    edges = gpumr_figures.import_graph(parts)
    assert "gpumr.cli" not in edges["gpumr.engines"]  # (Spark's __main__ block: the command line's layer)

    def reaches(a, b, seen=()):
        return b in edges[a] or any(reaches(c, b, seen + (a,)) for c in edges[a] if c not in seen)
    assert not [p for p in parts if reaches(p, p)]


# -- a page per workload ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_each_workload_has_a_page_with_its_example_output_and_picture(site):
    from bs4 import BeautifulSoup
    workloads, _ = story_names()
    for name in workloads:
        soup = BeautifulSoup((site / "workloads" / f"{name}.html").read_text(encoding="utf-8"), "html.parser")
        console = "\n".join(pre.get_text() for pre in soup.select("div.highlight-console pre"))
        assert f"$ gpumr run {name} " in console, name
        # what the commands printed: the job's summary line and its output's first line(s)
        assert re.search(r"^gpumr: \d+ records?: ", console, re.M), (name, console)
        assert re.search(r'^"[^"]+"\s+\{.*"device": "(cpu|gpu:\d+)"', console, re.M) or name == "blobs", console
        images = [img["src"] for img in soup.select("figure img")]
        assert images, name
        picture = (site / "workloads" / images[0]).resolve()
        assert picture.stat().st_size > 10_000, (name, picture)


# -- results people read ---------------------------------------------------------------------------------------
def test_benchmarks_is_a_short_results_page():
    """Each result of docs/benchmarks.rst gives its baseline, its machine, when and how it was measured, and one
    plot; the method and history are the lab notes' pages, linked from it."""
    text = read(DOCS, "benchmarks.rst")
    assert len(text.split()) < 2500, len(text.split())
    sections = re.split(r"\n[^\n]+\n-{3,}\n", text)[1:]
    assert len(sections) >= 6
    for section in sections:
        assert ":Baseline:" in section and ":Machine:" in section and ":Measured:" in section, section[:200]
        assert len(re.findall(r"^\.\. gpumr-(plot|figure):: ", section, re.M)) == 1, section[:200]
    assert "lab-notes/index" in text
