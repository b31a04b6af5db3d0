"""The one parser of ``gpumr run WORKLOAD``: the workload's options, the shared ones and every engine's, in groups."""

import argparse
from typing import NamedTuple

from .. import engines
from ..boundary import ArgumentParser as Parser
from ..boundary import UsageError, show_defaults
from .options import DEVICE, JOB, PROCESSES


class Given(argparse.Action):
    """Keeps a framework's own option as given, in ``namespace.DEST`` (a list of strings): the option string, then
    its value (``--opt=VALUE`` where the value starts with ``-``, as the framework's parser reads it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = list(getattr(namespace, self.dest, None) or [])
        if self.nargs == 0:
            given.append(option_string)
        elif values.startswith("-"):
            given.append(f"{option_string}={values}")
        else:
            given += [option_string, values]
        setattr(namespace, self.dest, given)


def _add(group, options):
    for option in options:
        group.add_argument(option.name, **option.kwargs())


def run_parser(cls, prog=None):
    """The parser of ``gpumr run`` for workload class ``cls``."""
    engine_list = engines.all_engines()
    p = Parser(prog=prog or f"gpumr run {cls.name}", description=cls.summary, add_help=True,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="Options not listed here go to mrjob's runner as given (engines inline, local, hadoop, "
                      "emr: -c mrjob.conf, --jobconf, ...).")
    io = p.add_argument_group("inputs and output")
    if cls.input == "seqfile":
        io.add_argument("inputs", nargs="*", metavar="INPUT",
                        help="SequenceFiles, folders of them, or URIs (s3://, hdfs://, file://)")
    else:  # (the workload makes its records: inputs given anyway are refused by name)
        io.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)
    io.add_argument("-o", "--output", metavar="OUT", help="output folder or URI of part-* files (required)")
    io.add_argument("--engine", choices=[e.name for e in engine_list], default="inline",
                    help="where the tasks run (default inline): " + "; ".join(f"{e.name}: {e.help}" for e in engine_list))
    io.add_argument("--dry-run", action="store_true",
                    help="check everything and print the plan (and an mrjob runner's command and settings); run nothing")
    if cls.options:
        _add(p.add_argument_group(f"{cls.name} options"), cls.options)
    _add(p.add_argument_group("device choice"), DEVICE)
    _add(p.add_argument_group("the job"), JOB)
    _add(p.add_argument_group("the frameworks' processes"), PROCESSES)
    seen = set()
    p.passthrough_engines = ()  # the engines that take the framework's own options (mrjob's runners)
    p.engine_options = {}  # an engine's own option's dest -> the engines that take it
    for engine in engine_list:
        if type(engine) in seen:
            continue  # (one class serves several names: mrjob's runners)
        seen.add(type(engine))
        names = [e.name for e in engine_list if type(e) is type(engine)]
        if engine.options:
            _add(p.add_argument_group(f"engine {engine.title}"), engine.options)
        for option in engine.options:
            p.engine_options[option.dest] = (option, names)
        if engine.passthrough is not None:  # (help: the epilog; listed, they would be most of it)
            ours = {s for a in p._actions for s in a.option_strings}
            group = p.add_argument_group(engine.passthrough.title)
            for strings, takes_value in engine.passthrough.switches():
                strings = [s for s in strings if s not in ours]
                if strings:
                    group.add_argument(*strings, action=Given, nargs=None if takes_value else 0, dest="framework_args",
                                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            p.passthrough_engines = names
    for flag, help in (("-q", "warnings and errors only"), ("-v", "debug lines too: each task's start and end; progress lines where stderr is not a terminal"),
                       ("--debug", "show the traceback above an error's line")):
        p.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=help,
                       dest={"-q": "quiet", "-v": "verbose"}.get(flag, "debug"))
    show_defaults(p)
    return p


class Parsed(NamedTuple):
    """``gpumr run``'s command line, parsed once (:func:`parse_run`): what the launcher plans from."""

    argv: list
    ref: object
    cls: type
    parser: Parser
    options: argparse.Namespace


def parse_run(argv):
    """``gpumr run``'s arguments ``argv`` (``WORKLOAD [INPUT...] -o OUT [options]``), parsed once by the workload's
    :func:`run_parser`.

    Examples
    --------
    >>> parse_run(["faces", "in.seq", "-o", "out", "--engine", "local", "--jobconf", "a=b"]).options.engine
    'local'
    """
    from ..workloads import find, load
    if not argv or argv[0].startswith("-"):
        raise UsageError("give the workload first: gpumr run WORKLOAD ... (gpumr run --help lists them)")
    ref = find(argv[0])
    cls = load(ref)
    parser = run_parser(cls, prog=f"gpumr run {argv[0]}")
    return Parsed(list(argv), ref, cls, parser, parser.parse_args(argv[1:]))
