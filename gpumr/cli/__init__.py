"""The ``gpumr`` command: one entry point, one module per group of subcommands.

Errors are one line on stderr (``gpumr: error: ...``) and exit status 1;
``--debug`` shows the traceback instead. Only errors about the user's input
(:class:`gpumr.errors.GpumrError`, a malformed SequenceFile, an operating
system error naming a file) are shown that way: anything else is a bug and
keeps its traceback.
"""

import argparse
import sys

from seqfile import SequenceFileError
from seqfile.codecs import CodecError

from .. import __version__
from ..errors import GpumrError
from . import bundle, ct, devices, faces, kernels, run, seqfiles, spark

#: The modules that add subcommands, in the order ``gpumr --help`` lists them.
GROUPS = (seqfiles, devices, faces, ct, kernels, run, spark, bundle)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (plain text, paragraphs kept)."""


def build_parser():
    """The argument parser of the ``gpumr`` command."""
    p = argparse.ArgumentParser(prog="gpumr", formatter_class=_Formatter,
                                description="Image processing on Hadoop Streaming (mrjob) and Spark that uses "
                                            "a node's GPU whenever it is free.")
    p.add_argument("--version", action="version", version=f"gpumr {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    return p


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"gpumr: warning: {message}", file=sys.stderr)


def main(argv=None):
    """Run the ``gpumr`` command; returns the exit status."""
    import warnings
    warnings.showwarning = _show_warning
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "pass_through", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.rest = extra  # a command that parses its own options (gpumr spark ...) gets them
    try:
        args.func(args)
    except (GpumrError, SequenceFileError, CodecError) as exc:
        if args.debug:
            raise
        print(f"gpumr: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except OSError as exc:
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpumr: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpumr: interrupted", file=sys.stderr)
        return 130
    return 0
