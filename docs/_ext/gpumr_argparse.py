"""Command-line reference generated from gpumr's own argument parsers.

Two directives, so that no option is ever copied by hand into the docs:

``.. gpumr-command:: PATH``
    The ``gpumr`` subcommand PATH (``pack``, ``ct phantom``, ``scheduler``...)
    as :func:`gpumr.cli.build_parser` defines it: usage, description and every
    argument, and the same for each subcommand below it. ``:pending: TEXT``
    lets a page name a command that this build does not have yet: it renders
    TEXT until the command exists, and the parser's reference after that.

``.. gpumr-run:: WORKLOAD``
    ``gpumr run WORKLOAD``'s options, from the one parser the launcher
    parses with (:func:`gpumr.launch.parser.run_parser`), group by group:
    the workload's own, device choice, the job, and each engine's.

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


def _group_lines(parser, level):
    """One section per argument group of ``parser`` (the one parser of ``gpumr run``): its options."""
    lines = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions or group.title in ("options", "optional arguments", "positional arguments"):
            continue
        title = group.title[:1].upper() + group.title[1:]
        lines += [title, _UNDERLINES[level] * len(title), ""] + _option_lines(actions, parser)
    return lines


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
    lines += _option_lines(actions, parser)
    if parser.get_default("pass_through"):
        lines += ["Each workload's options follow: ``gpumr run WORKLOAD --help`` prints them.", ""]
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


class RunDirective(CommandDirective):
    """``.. gpumr-run:: WORKLOAD``: ``gpumr run WORKLOAD``'s options, from the one parser the launcher parses with."""

    def run(self):
        from gpumr.launch.parser import run_parser
        from gpumr.workloads import find, load
        name = self.arguments[0]
        self.env.note_dependency(__file__)
        parser = run_parser(load(find(name)), prog=f"gpumr run {name}")
        title = f"``gpumr run {name}``"
        lines = [f".. _run-{name}:", "", title, "~" * len(title), ""]
        lines += _paragraphs(parser.description)
        lines += _usage_lines(parser)
        lines += [f".. program:: gpumr run {name}", ""]
        lines += _group_lines(parser, 1)
        lines += _paragraphs(parser.epilog)
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
    app.add_directive("gpumr-command", CommandDirective)
    app.add_directive("gpumr-run", RunDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-check-consistency", _check_coverage)
    return {"version": "1", "parallel_read_safe": False, "env_version": 1}
