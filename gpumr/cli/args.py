"""Argument parsing shared by the ``gpumr`` subcommands: the parser class, argument types, common options."""

import argparse

from ..boundary import ArgumentParser, UsageError


class Parser(ArgumentParser):
    """The ``gpumr`` command's parser (:class:`gpumr.boundary.ArgumentParser`): its one-line errors name the
    subcommand (``ct plan: ...``), whose parsers are of this class too."""

    def error(self, message):
        where = self.prog.partition(" ")[2]  # "gpumr ct plan" -> "ct plan"
        raise UsageError(f"{where + ': ' if where else ''}{self.suggest(message)} (see {self.prog} --help)")


def positive(text):
    """``argparse`` type: an integer of at least 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer: {text!r}")
    return n


def command(sub, name, help, func, description=None):
    """Add subcommand ``name`` to ``sub`` (an argparse subparsers object); returns its parser."""
    p = sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def add_common(parser):
    """Give ``parser`` and every subcommand under it ``-q``, ``-v`` and ``--debug`` (where it has none of its own)."""
    _add_common(parser, top=True)


def _add_common(parser, top):
    default = False if top else argparse.SUPPRESS
    have = {s for a in parser._actions for s in a.option_strings}
    if not top:  # a subcommand's own -q or -v: "not given" by default too, or it would undo `gpumr -q COMMAND`
        for action in parser._actions:
            if action.dest in ("quiet", "verbose", "debug") and action.option_strings:
                action.default = argparse.SUPPRESS
    if "-q" not in have and "--quiet" not in have:
        parser.add_argument("-q", "--quiet", action="store_true", default=default,
                            help="warnings and errors only (no information or progress lines)")
    if "-v" not in have and "--verbose" not in have:
        parser.add_argument("-v", "--verbose", action="store_true", default=default,
                            help="debug lines too (a job's: each task's start and end; progress lines where stderr "
                                 "is not a terminal)")
    if "--debug" not in have:
        parser.add_argument("--debug", action="store_true", default=default,
                            help="show the traceback above an error's line")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # (aliases name one parser twice)
                _add_common(sub, top=False)
