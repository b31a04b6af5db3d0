"""``gpumr spark faces|backproject``: the jobs as a Spark application (:mod:`gpumr.engines.spark`)."""

from ..boundary import logger


def _runner(kind):
    def cmd(args):
        from ..core.counters import summary
        from ..engines.spark import quiet_interrupt, run
        try:
            counts, seconds = run(kind, args.rest, debug=args.debug)
        except KeyboardInterrupt:
            quiet_interrupt()  # the boundary's "gpumr: interrupted" is the one line
            raise
        logger(__name__).info(summary(counts, seconds))
    return cmd


def register(sub):
    """Add ``spark faces`` and ``spark backproject`` to the ``gpumr`` parser."""
    s = sub.add_parser("spark", help="run a job as a Spark application",
                       description="Run a gpumr job as a Spark application (local-cluster, standalone, YARN).")
    ss = s.add_subparsers(dest="action", metavar="JOB")
    ss.required = True
    for kind, usage, help in (
            ("faces", "gpumr spark faces INPUT... -o OUT [--master URL] [--split-size SIZE] [face job options]",
             "face detection over SequenceFiles of images"),
            ("backproject", "gpumr spark backproject --projections P [--geometry G] --slab N -o OUT "
                            "[--master URL] [backprojection job options]",
             "FDK reconstruction, one slab of slices per task")):
        # Every option is the engine's or the mrjob job's: main() hands them over unparsed (``--help`` lists them).
        p = ss.add_parser(kind, help=help, usage=usage, add_help=False, description=help)
        p.set_defaults(func=_runner(kind), pass_through=True)
