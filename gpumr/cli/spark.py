"""``gpumr spark faces|backproject``: the older shape of ``gpumr run KIND --engine spark`` (:mod:`gpumr.cli.run`)."""

from ..boundary import logger

from ..workloads import NAMES


def _runner(kind):
    def cmd(args):
        from ..core.counters import summary
        from .run import run
        counts, seconds = run(kind, "spark", args.rest, debug=args.debug)
        logger(__name__).info(summary(counts, seconds))
    return cmd


def register(sub):
    """Add ``spark WORKLOAD`` to the ``gpumr`` parser: an alias of ``run WORKLOAD --engine spark``."""
    s = sub.add_parser("spark", help="run a workload as a Spark application (gpumr run WORKLOAD --engine spark)",
                       description="Run a gpumr workload as a Spark application (local-cluster, standalone, YARN); "
                                   "the same as gpumr run WORKLOAD --engine spark.")
    ss = s.add_subparsers(dest="action", metavar="WORKLOAD")
    ss.required = True
    for kind in NAMES:
        # Every option is the engine's or the workload's: the engine parses them (``--help`` lists them).
        p = ss.add_parser(kind, help=f"gpumr run {kind} --engine spark", add_help=False,
                          usage=f"gpumr spark {kind} [-o OUT] [--master URL] [options] (gpumr spark {kind} --help)")
        p.set_defaults(func=_runner(kind), pass_through=True)
