"""The ``gpumr`` command: one entry point, one module per group of subcommands."""

import argparse
import sys

from .. import __version__
from ..boundary import debug_wanted, end_without_collecting, guard, show_defaults
from ..log import set_verbosity
from . import bundle, conf, ct, devices, faces, kernels, run, seqfiles, spark, troubleshooting
from .args import Parser, add_common

#: The modules that add subcommands, in the order ``gpumr --help`` lists them.
GROUPS = (seqfiles, devices, faces, ct, kernels, run, spark, bundle, conf, troubleshooting)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (plain text, paragraphs kept)."""


def _description():
    """What ``gpumr --help`` says gpumr is: the workloads and engines named from their own tables."""
    from .. import engines, workloads
    return ("Image processing over Hadoop SequenceFiles, each record on a free GPU or the CPU.\n\n"
            f"Workloads: {', '.join(workloads.NAMES)}, or your own (gpumr run --help).\n"
            f"Engines: {', '.join(engines.NAMES)}.\n\n"
            "An error's line ends with (see: gpumr help TOPIC) where there is more to say.")


class _Commands(argparse._SubParsersAction):
    """The ``gpumr`` command's subcommands: one whose parser has ``parse_own(namespace, args)`` (``gpumr run``:
    the workload's own parser) parses its arguments itself where it takes them, in place of its subparser."""

    def __call__(self, parser, namespace, values, option_string=None):
        own = getattr(self._name_parser_map.get(values[0]), "parse_own", None)
        if own is not None and own(namespace, values[1:]):
            setattr(namespace, self.dest, values[0])
            return
        super().__call__(parser, namespace, values, option_string)


class _Top(Parser):
    """The ``gpumr`` parser: its description (:func:`_description`) made only when help is shown, so that a
    command's start does not import the workloads."""

    def format_help(self):
        self.description = _description()
        return super().format_help()


def build_parser():
    """The argument parser of the ``gpumr`` command."""
    p = _Top(prog="gpumr", formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=f"gpumr {__version__}")
    p.register("action", "parsers", _Commands)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    add_common(p)
    show_defaults(p)
    return p


def _run(argv):
    parser = build_parser()  # (inside the boundary: a Ctrl-C while the commands are registered is one line too)
    args, extra = parser.parse_known_args(argv)
    set_verbosity(quiet=args.quiet, verbose=args.verbose)
    if extra and not getattr(args, "pass_through", False):
        _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    args.rest = extra  # a command that parses its own options (gpumr spark ...) gets them
    args.func(args)


def _chosen(parser, args):
    """The parser of the subcommand ``args`` ran (``gpumr ct plan``'s for ``ct plan``): its options, its errors."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else ()):
            return parser
        parser = subs[0].choices[name]


def main(argv=None):
    """Run the ``gpumr`` command; returns the exit status (0, 1 or 130: :mod:`gpumr.errors`)."""
    if argv is None:
        end_without_collecting()
        safe_import_path()
    argv = list(sys.argv[1:] if argv is None else argv)
    # (--debug is read before parsing, so that an error in parsing shows its traceback too.)
    return guard(_run, argv, debug=debug_wanted(argv))


def safe_import_path():
    """Run as a program, gpumr imports nothing from the current folder (``python -m gpumr`` puts it first on
    ``sys.path``): a ``yaml.py`` there would stand in for a library, in this process and in every framework process
    that takes its import path (:func:`gpumr.engines.start.safe_sys_path`)."""
    from ..engines.start import safe_sys_path
    sys.path[:] = safe_sys_path()


def run_command(argv):
    """``gpumr run ARGV``: the exit status (for entry points that are ``gpumr run`` under another name)."""
    return main(["run", *argv])
