"""Argument types and help formatting shared by the ``gpumr`` subcommands."""

import argparse


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
