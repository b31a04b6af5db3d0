"""``gpumr spark WORKLOAD ...``: the older shape of ``gpumr run WORKLOAD ... --engine spark``."""


def cmd(args):
    from .run import cmd as run
    args.rest = [*args.rest, "--engine", "spark"] if args.rest and args.rest[0] not in ("-h", "--help") else args.rest
    run(args)


def register(sub):
    """Add ``spark WORKLOAD`` to the ``gpumr`` parser: an alias of ``run WORKLOAD --engine spark``."""
    s = sub.add_parser("spark", add_help=False, usage="gpumr spark WORKLOAD [INPUT...] -o OUT [--master URL] [options]",
                       help="run a workload as a Spark application (gpumr run WORKLOAD --engine spark)",
                       description="Run a gpumr workload as a Spark application (local-cluster, standalone, YARN); "
                                   "the same as gpumr run WORKLOAD --engine spark.")
    s.set_defaults(func=cmd, pass_through=True)
