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
    the workload's own, device choice, the job, and each engine's
    (``:only: own``: the workload's alone, for its page; ``:only: shared``:
    the rest, which every workload has).

``.. gpumr-commands:: NAME...``
    A list of top-level commands, each linked to its reference, with the
    line ``gpumr --help`` gives it (the command reference's index).

Usage lines are wrapped here, between whole items, to the width a code
block shows (argparse's own wrapping indents under ``usage:``).

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
def _columns(n):
    """argparse wraps usage lines at ``$COLUMNS``: set it for the length of the block."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


#: The widest usage line a code block shows whole at furo's desktop width (tests/test_docs.py: MAX_COMMAND).
USAGE_WIDTH = 88


def _items(text):
    """``text`` cut at its spaces outside brackets: ``[--voxels N [N ...]]`` and ``(a | b)`` stay whole."""
    items, depth, current = [], 0, ""
    for ch in text:
        depth += (ch in "[(") - (ch in "])")
        if ch == " " and depth == 0:
            if current:
                items.append(current)
            current = ""
        else:
            current += ch
    return items + ([current] if current else [])


def usage_lines(parser, width=USAGE_WIDTH):
    """``parser``'s usage as lines of at most ``width`` characters (where an item allows), each line after the
    first indented under the first argument, broken only between whole items.

    argparse's own wrapping indents under ``usage: PROG``, which the block does not show; so the usage is
    taken on one line and wrapped here.
    """
    with _columns(100000):
        usage = parser.format_usage().strip()
    # mrjob's usage text goes on with the job's description (shown above it): keep the usage itself.
    usage = " ".join(re.sub(r"^usage:\s*", "", usage).split("\n\n")[0].split())
    prog = parser.prog if usage.startswith(parser.prog + " ") else usage.split(" ")[0]
    indent = " " * (len(prog) + 1)
    lines, current = [], prog
    for item in _items(usage[len(prog):]):
        if len(current) + 1 + len(item) > width and current.strip() != prog and current.strip():
            lines.append(current)
            current = indent + item
        else:
            current = f"{current} {item}"
    return lines + [current]


def _usage_lines(parser):
    return [".. code-block:: text", ""] + ["   " + line for line in usage_lines(parser)] + [""]


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


def _own_group(parser, workload):
    """The title of the group that holds ``workload``'s own options in ``gpumr run``'s parser."""
    return f"{workload} options"


def _group_lines(parser, level, keep=lambda title: True):
    """One section per argument group of ``parser`` (the one parser of ``gpumr run``) that ``keep`` takes."""
    lines = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        if not actions or group.title in ("options", "optional arguments", "positional arguments") or \
                not keep(group.title):
            continue
        title = group.title[:1].upper() + group.title[1:]
        lines += [title, _UNDERLINES[level] * len(title), ""] + _option_lines(actions, parser)
    return lines


def _command_lines(app, parser, path, level, title=True):
    """One section per command: title (unless the page gives it), description, usage, options; then its
    subcommands."""
    name = "gpumr " + " ".join(path)
    heading = f"``{name}``"
    lines = [f".. _cmd-{'-'.join(path)}:", "", heading, _UNDERLINES[level] * len(heading), ""] if title else []
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
    """``.. gpumr-command:: PATH``: a subcommand's reference from :func:`gpumr.cli.build_parser`.

    ``:notitle:``: the page gives the title (and its label ``cmd-PATH``); the reference follows it.
    """

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"pending": directives.unchanged, "notitle": directives.flag}

    def run(self):
        path = tuple(self.arguments[0].split())
        parser = find_command(_load(self.config.gpumr_parser)(), path)
        self.env.note_dependency(__file__)
        if parser is None:
            if "pending" in self.options:
                title = f"``gpumr {' '.join(path)}``"
                lines = [f".. _cmd-{'-'.join(path)}:", "", title, _UNDERLINES[0] * len(title), "",
                         ".. note::", "", "   " + self.options["pending"], ""]
            else:
                logger.warning("gpumr-command: gpumr has no subcommand %r", " ".join(path),
                               location=self.get_location())
                return []
        else:
            lines = _command_lines(self.env.app, parser, path, 0, "notitle" not in self.options)
        _store(self.env, "commands").add(path)
        return self._parse(lines)

    def _parse(self, lines):
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), node)
        return node.children


def _choose(argument):
    return directives.choice(argument, ("own", "shared"))


class RunDirective(CommandDirective):
    """``.. gpumr-run:: WORKLOAD``: ``gpumr run WORKLOAD``'s options, from the one parser the launcher parses with.

    ``:only: own`` shows the workload's own options alone, under its page's heading (labelled ``run-NAME``);
    ``:only: shared`` every other group (the same for every workload: inputs and output, device choice, the
    job, each engine's).
    """

    option_spec = {"only": _choose}

    def run(self):
        from gpumr.launch.parser import run_parser
        from gpumr.workloads import find, load
        name = self.arguments[0]
        only = self.options.get("only")
        self.env.note_dependency(__file__)
        parser = run_parser(load(find(name)), prog=f"gpumr run {name}")
        own = _own_group(parser, name)
        if only == "own":  # (under the page's own heading)
            lines = [f"The options of the ``{name}`` workload; every other option of ``gpumr run {name}`` "
                     "(inputs and output, device choice, the job, each engine's) is in :ref:`run-options`.", "",
                     f".. program:: gpumr run {name}", ""]
            lines += _option_lines(next(g for g in parser._action_groups if g.title == own)._group_actions, parser)
            return self._parse(lines)
        if only == "shared":
            lines = [f".. program:: gpumr run {name}", ""] + _group_lines(parser, 0, lambda t: t != own)
            return self._parse(lines + _paragraphs(parser.epilog))
        title = f"``gpumr run {name}``"
        lines = [f".. _run-{name}:", "", title, "~" * len(title), ""]
        lines += _paragraphs(parser.description)
        lines += _usage_lines(parser)
        lines += [f".. program:: gpumr run {name}", ""]
        lines += _group_lines(parser, 1)
        lines += _paragraphs(parser.epilog)
        return self._parse(lines)


class CommandsDirective(CommandDirective):
    """``.. gpumr-commands:: NAME...``: a list of top-level commands, each linked to its reference with the
    one-line help ``gpumr --help`` gives it."""

    option_spec = {}

    def run(self):
        parser = _load(self.config.gpumr_parser)()
        helps = {}
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                helps = {c.dest: c.help for c in a._choices_actions}
        lines = []
        for name in self.arguments[0].split():
            if name not in helps:
                logger.warning("gpumr-commands: gpumr has no command %r", name, location=self.get_location())
                continue
            lines.append(f"* :ref:`gpumr {name} <cmd-{name}>`: {_escape(' '.join(helps[name].split()))}")
        return self._parse(lines + [""])


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
    app.add_directive("gpumr-commands", CommandsDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-check-consistency", _check_coverage)
    return {"version": "1", "parallel_read_safe": False, "env_version": 1}
