"""``gpumr run WORKLOAD --engine inline|local|hadoop|emr``: a declared workload through mrjob's runners.

The command line is the workload's declaration plus mrjob's own options
(``-c mrjob.conf``, ``--hadoop-streaming-jar``, ``--jobconf``, ...), which
go to mrjob as they are; without ``-c`` mrjob reads its usual config files.
The job is :class:`gpumr.engines.mrjob_task.MRWorkload` (``--workload
NAME``), the same class ``jobs/`` names. For backprojection the command
makes the slab plan (``--slab``) that the mrjob job reads as its input.

Output: mrjob writes the part files into the hidden stage of the output
transaction (:func:`gpumr.engines.common.open_output`), which is
published with ``_SUCCESS`` and the proof once the job succeeded; a URI
output of the inline and local runners is written locally first and
published through the same transaction. ``--dry-run`` resolves the runner
from the options and the config (e.g. ``conf/mrjob.emr.conf``) and prints
the job's command line and the runner's settings, running nothing (EMR
without AWS).
"""

import json
import os
import shutil
import sys
import tempfile
import time

from ..core import declare
from ..core.counters import total
from ..errors import GpumrError
from ..io.remote import locate
from ..workloads import get
from . import common

#: The mrjob runners ``gpumr run`` takes as engines.
ENGINES = ("inline", "local", "hadoop", "emr")
MADE_BY = "gpumr run"
#: Options of ``gpumr run`` that are the command's, not the mrjob job's.
_OWN = ("-o", "--output", "--slab")


def _without(argv, options):
    """``argv`` less ``options`` and their values (``--opt V`` or ``--opt=V``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif a.partition("=")[0] not in options:
            out.append(a)
    return out


def _job(args):
    from .mrjob_task import MRWorkload
    try:
        return MRWorkload(args=args)
    except ValueError as exc:  # mrjob's way of refusing an option given as a list
        raise GpumrError(str(exc)) from None


def _parts(folder):
    """``{name: (name, size, sha256)}`` of the part files mrjob wrote into ``folder`` (a path or URI)."""
    from ..io.outputs import digest
    loc = locate(folder)
    names = [rel for rel, what, _ in loc.entries() if what == "file" and "/" not in rel]
    return {n: (n, *digest(loc.child(n))) for n in sorted(names) if n.startswith("part-")}


def dry_run(job, engine, args, show=print):
    """Print the job's command line and the runner's resolved settings; run nothing."""
    runner = job.make_runner()
    try:
        conf = {k: v for k, v in sorted(runner._opts.items()) if v not in (None, [], {}, ())}
        show(f"gpumr run: would run on {engine}: {sys.executable} -m gpumr.engines.mrjob_task {' '.join(args)}")
        show(json.dumps({"runner": runner.alias, "python_bin": runner._python_bin(), "options": conf},
                        indent=1, sort_keys=True, default=str))
    finally:
        runner.cleanup()


def run(kind, argv, engine="inline", dry_run_only=False, debug=False):
    """Run workload ``kind`` on mrjob runner ``engine``; returns ``(counters, seconds)`` (None with ``dry_run_only``).

    Raises
    ------
    GpumrError
        A bad option or input (before any task), or the failed job, in one line.
    """
    import logging

    from mrjob.step import StepFailedException
    if not debug:
        logging.getLogger("mrjob").setLevel(logging.ERROR)
    d = get(kind)
    p = common.parser(kind, engine, split_size=False)
    p.epilog = (f"mrjob's own options (-c mrjob.conf, --hadoop-streaming-jar, --jobconf, ...) go to its {engine} "
                "runner as given; --dry-run prints the job and the runner's settings and runs nothing")
    o, _ = declare.parse(d, argv, p, known=True)
    common.require(o.output)
    inputs = list(getattr(o, "inputs", []))
    args = ["-r", engine, "--workload", kind, *_without(argv, _OWN)]
    temp = tempfile.mkdtemp(prefix="gpumr-run-")
    out = None
    try:
        d.check(o)  # as on every engine, before the inputs are listed (the job checks its limits again)
        if d.input != "seqfile":  # the command makes the plan the mrjob job reads
            from ..ct.workload import write_plan
            lines = d.plan(o)
            write_plan(temp, lines, min(len(lines), max(2, os.cpu_count() or 1)))
            args.append(temp)
        if dry_run_only:
            dry_run(_job([*args, "--output-dir", o.output]), engine, [*args, "--output-dir", o.output])
            return None
        remote = locate(o.output).local is None  # (file:///PATH is a local folder)
        if engine == "emr" and not remote:
            raise GpumrError(f"-o {o.output}: EMR writes its output to a URI (s3://BUCKET/...), not a local folder")
        out = common.open_output(o.output, MADE_BY, [*inputs, *(path for _, path in d.side_files(o))])
        target = given = None
        if not remote:
            target = out.begin()
            os.rmdir(target)  # mrjob's runners make it (Hadoop refuses one that exists)
            given = locate(target).uri() if engine == "hadoop" else target  # (Hadoop: not its default filesystem)
        elif engine in ("inline", "local"):
            target = os.path.join(temp, "out")  # written here, then published through the transaction
        else:
            target = out.begin()
            locate(target).delete()
        job = _job([*args, "--output-dir", given or target])
        t0 = time.perf_counter()
        with job.make_runner() as runner:
            runner.run()
            counts = total(runner.counters())
        if remote and engine in ("inline", "local"):
            open(os.path.join(target, "_SUCCESS"), "wb").close()
            for name in os.listdir(target):
                if not name.startswith(("part-", "_SUCCESS")):
                    os.unlink(os.path.join(target, name))
            out.put(target)
        else:
            common.publish(out, target, _parts(target))
        return counts, time.perf_counter() - t0
    except StepFailedException as exc:
        raise GpumrError(f"the {engine} job failed: {exc} (mrjob's log above says why)") from exc
    finally:
        if out is not None:
            out.abort()
        shutil.rmtree(temp, ignore_errors=True)
