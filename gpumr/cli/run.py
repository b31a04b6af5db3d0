"""``gpumr run WORKLOAD [INPUT...] -o OUT --engine ENGINE``: one command for every workload on every engine."""

from ..boundary import UsageError
from ..log import logger


def _general_help():
    from .. import engines, workloads
    built, installed = workloads.BUILT_IN, workloads.installed()
    lines = ["usage: gpumr run WORKLOAD [INPUT...] -o OUT [--engine ENGINE] [options]", "",
             "Run a workload on an engine; gpumr run WORKLOAD --help lists its options.", "", "workloads:"]
    for name in built:
        lines.append(f"  {name:<14}{workloads.load(workloads.find(name)).summary}")
    for name, ref in installed.items():
        lines.append(f"  {name:<14}installed: {ref}")
    lines += ["  MODULE:CLASS  your own gpumr.Workload subclass: an installed MODULE, else MODULE.py here; or name",
              "                the file as FILE.py:CLASS (./MODULE.py:CLASS)", "",
              "engines: " + ", ".join(engines.NAMES)]
    return "\n".join(lines)


def verbosity(args):
    """What the ``gpumr`` command's own ``-q``/``-v`` ask of the job's tasks."""
    return "debug" if getattr(args, "verbose", False) else "quiet" if getattr(args, "quiet", False) else None


def parse_own(namespace, argv):
    """``gpumr run WORKLOAD ...``'s arguments parsed as the ``gpumr`` command's are, by the workload's own parser
    (:func:`gpumr.launch.parser.parse_run`) in place of the ``run`` subcommand's; False (nothing parsed) for help
    and for arguments that do not start with the workload, which :func:`cmd` answers.

    Its ``-q``, ``-v`` and ``--debug`` are the command's too.
    """
    if not argv or argv[0].startswith("-") or "-h" in argv or "--help" in argv:
        return False
    from ..launch.parser import parse_run
    parsed = parse_run(argv)
    for name in ("quiet", "verbose", "debug"):
        if getattr(parsed.options, name, False):
            setattr(namespace, name, True)
    namespace.parsed, namespace.func, namespace.pass_through = parsed, cmd, True
    return True


def cmd(args):
    argv = getattr(args, "parsed", None) or list(args.rest)  # (parsed by the workload's own parser: parse_own)
    if not argv or argv[0] in ("-h", "--help"):
        print(_general_help())
        return
    if isinstance(argv, list) and ("-h" in argv or "--help" in argv):
        from ..launch.parser import run_parser
        from ..workloads import find, load
        print(run_parser(load(find(argv[0])), prog=f"gpumr run {argv[0]}").format_help())
        return
    from ..launch.job import launch
    result = launch(argv, debug=args.debug, verbosity=verbosity(args))
    if result is not None:
        if result.how != "built in":
            logger(__name__).info("workload %s from %s", result.name, result.how)
        logger(__name__).info("%s", result.summary())


def register(sub):
    """Add ``run`` to the ``gpumr`` parser (the launcher parses the rest: :mod:`gpumr.launch.parser`)."""
    from .. import engines
    s = sub.add_parser("run", add_help=False, usage="gpumr run WORKLOAD [INPUT...] -o OUT [--engine ENGINE] [options]",
                       help=f"run a workload on an engine: {', '.join(engines.NAMES)}",
                       description="Run a workload (built in, installed, or MODULE:CLASS of your own) on an engine; "
                                   "gpumr run WORKLOAD --help lists its options.")
    s.set_defaults(func=cmd, pass_through=True)
    s.parse_own = parse_own


def job_argv(workload, argv):
    """``gpumr run``'s command line for mrjob's ``python -m gpumr.jobs.X [-r RUNNER] ... --output-dir OUT``."""
    if "-h" in argv or "--help" in argv:
        return [workload, "--help"]
    out, runner, rest, args = None, "inline", [], list(argv)
    while args:
        a = args.pop(0)
        name, eq, value = a.partition("=")
        if name in ("-r", "--runner", "--output-dir") and not eq:
            if not args:
                raise UsageError(f"{name} needs a value")
            value = args.pop(0)
        if name in ("-r", "--runner"):
            runner = value
        elif name == "--output-dir":
            out = value
        else:
            rest.append(a)
    return [workload, *rest, *(["-o", out] if out is not None else []), "--engine", runner]


def job_main(workload):
    """``python -m gpumr.jobs.X``: the job through the one launcher, inside the error boundary (``--help``: the
    options of ``gpumr run WORKLOAD``, which are the job's)."""
    import sys

    from ..boundary import main
    from . import run_command, safe_import_path
    safe_import_path()
    main(lambda: run_command(job_argv(workload, sys.argv[1:])))
