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


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(tmp_path):
    try:
        import sphinx  # noqa: F401
        import furo  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the docs must build in CI: {exc} (pip install '.[docs]')")
        pytest.skip(f"{exc} (pip install '.[docs]')")
    out = tmp_path / "html"
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        "-d", str(tmp_path / "doctrees"), DOCS, str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    cli = (out / "reference" / "cli.html").read_text(encoding="utf-8")
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
