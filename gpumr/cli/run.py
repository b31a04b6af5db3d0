"""``gpumr run WORKLOAD ... --engine ENGINE``: one command for every workload on every engine.

ENGINE is ``inline`` (the default), ``local``, ``hadoop`` or ``emr`` (mrjob's
runners, :mod:`gpumr.engines.runners`; mrjob's own options and
``-c mrjob.conf`` pass through), ``spark`` (``--master``) or ``dask``
(``--scheduler``). Every engine writes the same output (part files of
``key<TAB>json``, ``_SUCCESS``, the proof) and ends with the same one-line
summary of the counters.
"""

import argparse

from ..boundary import logger
from ..workloads import NAMES

ENGINES = ("inline", "local", "hadoop", "emr", "spark", "dask")


def run(kind, engine, argv, debug=False, dry_run=False):
    """Run workload ``kind`` on ``engine``; ``(counters, seconds)``, or None for a dry run."""
    from ..errors import GpumrError
    if engine in ("spark", "dask") and dry_run:
        raise GpumrError(f"--dry-run: only for mrjob's runners (inline, local, hadoop, emr), not {engine}")
    if engine == "spark":
        from ..engines.spark import quiet_interrupt, run as spark
        try:
            return spark(kind, argv, debug=debug)
        except KeyboardInterrupt:
            quiet_interrupt()  # the boundary's "gpumr: interrupted" is the one line
            raise
    if engine == "dask":
        from ..engines.dask import run as dask
        return dask(kind, argv, debug=debug)
    from ..engines.runners import run as mrjob
    return mrjob(kind, argv, engine, dry_run_only=dry_run, debug=debug)


def _command(kind):
    def cmd(args):
        from ..core.counters import summary
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument("--engine", choices=ENGINES, default="inline")
        p.add_argument("--dry-run", action="store_true")

        def error(message):
            from ..boundary import UsageError
            raise UsageError(message)
        p.error = error
        e, rest = p.parse_known_args(args.rest)
        got = run(kind, e.engine, rest, debug=args.debug, dry_run=e.dry_run)
        if got is not None:
            logger(__name__).info(summary(*got))
    return cmd


def register(sub):
    """Add ``run WORKLOAD`` to the ``gpumr`` parser (each workload's options are parsed by its engine)."""
    s = sub.add_parser("run", help="run a workload on an engine: inline, local, hadoop, emr, spark, dask",
                       description="Run a workload on an engine (gpumr run WORKLOAD --help lists its options).")
    ss = s.add_subparsers(dest="workload", metavar="WORKLOAD")
    ss.required = True
    usage = {"faces": "gpumr run faces INPUT... -o OUT [--engine ENGINE] [options]",
             "backproject": "gpumr run backproject --projections SEQ [--geometry G] [--slab N] -o OUT "
                            "[--engine ENGINE] [options]"}
    for name in NAMES:
        p = ss.add_parser(name, add_help=False, usage=usage.get(name),
                          help=f"{name} on --engine {{{','.join(ENGINES)}}} (default inline); "
                               "--dry-run: print what an mrjob runner would run")
        p.set_defaults(func=_command(name), pass_through=True)
