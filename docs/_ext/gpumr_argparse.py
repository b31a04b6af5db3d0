"""Command-line reference generated from gpumr's own argument parsers.

Two directives, so that no option is ever copied by hand into the docs:

``.. gpumr-command:: PATH``
    The ``gpumr`` subcommand PATH (``pack``, ``ct phantom``, ``scheduler``...)
    as :func:`gpumr.cli.build_parser` defines it: usage, description and every
    argument, and the same for each subcommand below it. ``:pending: TEXT``
    lets a page name a command that this build does not have yet: it renders
    TEXT until the command exists, and the parser's reference after that.

``.. gpumr-job:: MODULE.CLASS``
    An mrjob job class: its usage and the options gpumr adds (the job's
    pass-through and file options, read from the job's own ``arg_parser``),
    then the mrjob options these docs use, with mrjob's own help.

The build also warns about every ``gpumr`` subcommand that no
``gpumr-command`` directive covers, so ``sphinx-build -W`` fails until a new
subcommand is in the reference.
"""

import argparse
import contextlib
import importlib
import os
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

#: The mrjob options the job pages list beside gpumr's own (the rest: mrjob's documentation).
MRJOB_OPTIONS = ("-r", "-c", "--output-dir", "--python-bin", "--cmdenv", "--files", "--archives", "--dirs",
                 "--jobconf", "--setup", "--hadoop-streaming-jar")

#: Underline characters for nesting levels below the directive's own section.
_UNDERLINES = "~^'\""


def _escape(text):
    """``text`` as literal reStructuredText inline content."""
    text = text.replace("\\", "\\\\")
    for ch in "*`|":
        text = text.replace(ch, "\\" + ch)
    return re.sub(r"(\w)_(\W|$)", r"\1\\_\2", text)


def _paragraphs(text):
    """Plain text (argparse's description) as paragraphs: blank lines separate, lines are joined."""
    out = []
    for para in re.split(r"\n\s*\n", (text or "").strip()):
        if para.strip():
            out += [_escape(" ".join(para.split())), ""]
    return out


def _help(action, parser):
    """An action's help with argparse's ``%(default)s``-style fields filled in."""
    text = action.help or ""
    if "%" in text:
        params = dict(vars(action), prog=parser.prog)
        for name in list(params):
            if params[name] is argparse.SUPPRESS:
                del params[name]
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(c) for c in params["choices"])
        text = text % params
    return " ".join(text.split())


def _signature(action):
    """How ``.. option::`` names an action: ``-o OUT, --output OUT`` or ``SRC``."""
    if not action.option_strings:
        name = action.metavar or action.dest
        return name if isinstance(name, str) else " ".join(name)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        metavar = action.dest.upper()
    if action.nargs in ("+", "*"):
        metavar += " ..."
    elif isinstance(action.nargs, int) and action.nargs > 1:
        metavar = " ".join([metavar] * action.nargs)
    return ", ".join(f"{o} {metavar}" for o in action.option_strings)


def _option_lines(actions, parser):
    """``.. option::`` blocks for ``actions`` (help, choices, default)."""
    lines = []
    for a in actions:
        if a.help == argparse.SUPPRESS or isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                                         argparse._SubParsersAction)):
            continue
        lines += [f".. option:: {_signature(a)}", ""]
        body = _help(a, parser)
        lines.append("   " + (_escape(body) if body else "(no description)"))
        if a.choices is not None and not a.option_strings or (a.choices is not None and a.metavar is not None):
            lines.append("   Choices: " + ", ".join(f"``{c}``" for c in a.choices) + ".")
        if a.required and a.option_strings:
            lines.append("   Required.")
        lines.append("")
    return lines


@contextlib.contextmanager
def _columns(n=100):
    """argparse wraps usage lines at ``$COLUMNS``: a fixed width gives the same page on every machine."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _wrap(line, width=90):
    """A usage line written by hand (not wrapped by argparse) cut before ``[`` groups to ``width``."""
    if len(line) <= width:
        return [line]
    indent = " " * (line.index(" ") + 1)
    out, current = [], ""
    for piece in re.split(r" (?=\[)", line):
        if current and len(current) + 1 + len(piece) > width:
            out.append(current)
            current = indent + piece
        else:
            current = f"{current} {piece}" if current else piece
    return out + [current]


def _usage_lines(parser):
    with _columns():
        usage = parser.format_usage().strip()
    # mrjob's usage text goes on with the job's description (shown above it): keep the usage lines.
    usage = re.sub(r"^usage:\s*", "", usage).split("\n\n")[0]
    lines = [w for line in usage.splitlines() for w in _wrap(line)]
    return [".. code-block:: text", ""] + ["   " + line for line in lines] + [""]


def subparsers(parser):
    """The ``{name: parser}`` of ``parser``'s subcommands (empty for a leaf)."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def command_paths(parser, path=()):
    """Every leaf subcommand of ``parser`` as a tuple of names, in the parser's order."""
    subs = subparsers(parser)
    if not subs:
        return [path] if path else []
    out = []
    for name, sub in subs.items():
        out += command_paths(sub, path + (name,))
    return out


def find_command(parser, path):
    """The parser of subcommand ``path`` (a tuple of names), or None."""
    for name in path:
        parser = subparsers(parser).get(name)
        if parser is None:
            return None
    return parser


def _load(spec):
    """``module:attr`` or ``module.attr`` -> the object."""
    module, _, attr = spec.replace(":", ".").rpartition(".")
    return getattr(importlib.import_module(module), attr)


def run_parser(kind, engine=None):
    """The options of ``gpumr run KIND`` (or, with ``engine``, one engine's) from the parsers the engines use.

    :func:`gpumr.engines.common.parser` plus the workload's declaration, as
    every engine parses them; then ``--engine`` and ``--dry-run``
    (:mod:`gpumr.cli.run`) and each engine's own options (Spark's
    ``--master``, Dask's ``--scheduler`` and ``--workers``), each saying which
    engines take it. ``engine`` (``"spark"``) keeps only that engine's.
    """
    from gpumr.cli.run import ENGINES
    from gpumr.engines import common, dask, spark
    from gpumr.engines.runners import ENGINES as MRJOB
    from gpumr.workloads import get

    p = common.parser(kind, engine or "ENGINE")
    p.prog = f"gpumr run {kind}" if engine is None else f"gpumr {engine} {kind}"
    only = {}

    def add(engines, add_options):
        before = {a.dest for a in p._actions}
        add_options(p)
        for a in p._actions:
            if a.dest not in before:
                only[a.dest] = engines

    if engine is None:
        p.add_argument("--engine", choices=ENGINES, default="inline",
                       help="where the job runs (default inline): " + ", ".join(ENGINES))
        p.add_argument("--dry-run", action="store_true",
                       help="print the mrjob job's command line and its runner's settings, resolved from the "
                            "options and the config, and run nothing")
        only["dry_run"] = MRJOB
        if any(a.dest == "split_size" for a in p._actions):
            only["split_size"] = ("spark", "dask")
    if engine in (None, "spark"):
        add(("spark",), spark._master_option)
    if engine in (None, "dask"):
        add(("dask",), dask._options)
    get(kind).add_to(p)
    if engine is None:
        for a in p._actions:
            if a.dest in only and a.help:
                a.help = f"{a.help} (engines: {', '.join(only[a.dest])})"
    return p


def _command_lines(app, parser, path, level):
    """One section per command: title, description, usage, options; then its subcommands."""
    name = "gpumr " + " ".join(path)
    title = f"``{name}``"
    lines = [f".. _cmd-{'-'.join(path)}:", "", title, _UNDERLINES[level] * len(title), ""]
    lines += _paragraphs(parser.description)
    subs = subparsers(parser)
    if subs:
        lines += [f"``{name}`` has {len(subs)} subcommands: "
                  + ", ".join(f":ref:`{n} <cmd-{'-'.join(path + (n,))}>`" for n in subs) + ".", ""]
        for sub_name, sub in subs.items():
            lines += _command_lines(app, sub, path + (sub_name,), level + 1)
        return lines
    lines += _usage_lines(parser)
    lines += [f".. program:: {name}", ""]
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    pass_through = parser.get_default("pass_through")
    extra = app.config.gpumr_pass_through.get(" ".join(path))
    if pass_through and extra:
        module, func, *args = extra
        engine = getattr(importlib.import_module(module), func)(*args)
        actions = [a for a in engine._actions if a.dest != "help"]
        lines += _option_lines(actions, engine)
        job = app.config.gpumr_pass_through_jobs.get(" ".join(path))
        if job:
            lines += ["Every other option goes to mrjob's runner as given (engines inline, local, hadoop, emr; "
                      f"e.g. ``-c mrjob.conf``, ``--jobconf``): see :ref:`job-{job}`.", ""]
    else:
        lines += _option_lines(actions, parser)
    return lines


class CommandDirective(SphinxDirective):
    """``.. gpumr-command:: PATH``: a subcommand's reference from :func:`gpumr.cli.build_parser`."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"pending": directives.unchanged}

    def run(self):
        path = tuple(self.arguments[0].split())
        parser = find_command(_load(self.config.gpumr_parser)(), path)
        self.env.note_dependency(__file__)
        if parser is None:
            if "pending" in self.options:
                title = f"``gpumr {' '.join(path)}``"
                lines = [f".. _cmd-{'-'.join(path)}:", "", title, "~" * len(title), "",
                         ".. note::", "", "   " + self.options["pending"], ""]
            else:
                logger.warning("gpumr-command: gpumr has no subcommand %r", " ".join(path),
                               location=self.get_location())
                return []
        else:
            lines = _command_lines(self.env.app, parser, path, 0)
        _store(self.env, "commands").add(path)
        return self._parse(lines)

    def _parse(self, lines):
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), node)
        return node.children


class JobDirective(CommandDirective):
    """``.. gpumr-job:: MODULE.CLASS``: an mrjob job's options, from the job class's own parser."""

    option_spec = {"module": directives.unchanged}

    def run(self):
        cls = _load(self.arguments[0])
        self.env.note_dependency(__file__)
        module = self.options.get("module") or cls.__module__
        job = cls(args=[])
        parser = job.arg_parser
        prog = f"python -m {module}"
        parser.prog = prog
        short = module.rpartition(".")[2]
        title = f"``{prog}``"
        lines = [f".. _job-{short}:", "", title, "~" * len(title), ""]
        lines += _paragraphs((cls.__doc__ or "").strip().split("\n\n")[0])
        lines += _usage_lines(parser)
        lines += [f".. program:: {prog}", ""]
        own = job._passthru_arg_dests | job._file_arg_dests
        gpumr_actions = [a for a in parser._actions if a.dest in own]
        lines += ["gpumr's options", "^" * 15, ""] + _option_lines(gpumr_actions, parser)
        by_name = {o: a for a in parser._actions for o in a.option_strings}
        mrjob_actions = []
        for name in MRJOB_OPTIONS:
            a = by_name.get(name)
            if a is not None and a not in mrjob_actions:
                mrjob_actions.append(a)
        lines += ["mrjob's options used in these pages", "^" * 35, "",
                  "Every other mrjob option works as mrjob documents it (``" + prog + " --help -r emr``, "
                  "or mrjob's own documentation).", ""]
        lines += _option_lines(mrjob_actions, parser)
        _store(self.env, "jobs").add(self.arguments[0])
        return self._parse(lines)


def _store(env, kind):
    """The set of ``kind`` (commands, jobs) that the page being read documents."""
    return env.domaindata.setdefault("gpumr_argparse", {}).setdefault(kind, {}).setdefault(env.docname, set())


def _purge(app, env, docname):
    # A page read again adds its commands again.
    for kind in env.domaindata.get("gpumr_argparse", {}).values():
        kind.pop(docname, None)


def _check_coverage(app, env):
    """Warn about every ``gpumr`` subcommand that no ``gpumr-command`` directive covers."""
    if app.config.gpumr_parser is None:
        return
    documented = set().union(*env.domaindata.get("gpumr_argparse", {}).get("commands", {}).values())
    parser = _load(app.config.gpumr_parser)()
    for path in command_paths(parser):
        if not any(path[:len(d)] == d for d in documented):
            logger.warning("gpumr-command: 'gpumr %s' is not in the command reference "
                           "(add '.. gpumr-command:: %s' to %s)", " ".join(path), " ".join(path),
                           app.config.gpumr_reference_page)


def setup(app):
    app.add_config_value("gpumr_parser", None, "env")
    app.add_config_value("gpumr_reference_page", "reference/cli", "env")
    app.add_config_value("gpumr_pass_through", {}, "env")
    app.add_config_value("gpumr_pass_through_jobs", {}, "env")
    app.add_directive("gpumr-command", CommandDirective)
    app.add_directive("gpumr-job", JobDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-check-consistency", _check_coverage)
    return {"version": "1", "parallel_read_safe": False, "env_version": 1}
