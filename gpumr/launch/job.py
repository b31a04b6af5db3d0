"""The one run skeleton: prepare, submit and gather through the engine, end tasks and abort on failure, publish, add
up. Written once, as mrjob keeps ``MRJobRunner.run``; an engine gives only how its tasks are submitted and ended
(:class:`gpumr.engines.base.Engine`)."""

import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from seqfile.atomic import interrupts_held

from ..core.counters import BAD, NAMED, summary
from ..engines.base import Job
from ..engines.processes import AFTER_SIGNAL, end_processes_in
from ..engines.start import Start
from ..io.remote import locate
from ..log import logger, quiet
from ..tasks.progress import Display
from . import owners as gpu_owners

log = logger(__name__)
#: The most bytes of the output the launcher reads to name bad records an engine could not name.
BAD_SCAN_BYTES = 64 << 20


@dataclass
class Result:
    """What a finished job says: its counters, wall time and first bad records; its workload's name and where
    the workload came from (``built in``, a module shipped to the tasks, one installed there)."""

    counts: dict
    seconds: float
    bad: list
    name: str = ""
    how: str = "built in"

    def summary(self):
        """The one summary line (:func:`gpumr.core.counters.summary`)."""
        return summary(self.counts, self.seconds, self.bad)


@contextlib.contextmanager
def job_folder():
    """The job's private folder on this machine (mode 0700), removed whatever happens."""
    folder = None
    try:
        with interrupts_held():
            folder = tempfile.mkdtemp(prefix="gpumr-job-")
        yield folder
    except KeyboardInterrupt:  # (Ctrl-C, and SIGTERM: gpumr.signals.Terminated)
        if folder is not None:
            end_processes_in(folder, timeout=AFTER_SIGNAL, ask=True)
        raise
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def launch(argv, session=None, debug=False, verbosity=None):
    """Plan and run ``gpumr run``'s command line ``argv``; the :class:`Result` (None for ``--dry-run``).

    Parameters
    ----------
    argv : list of str or gpumr.launch.parser.Parsed
        ``WORKLOAD [INPUT...] -o OUT [--engine E] [options]``, or them parsed already (the ``gpumr`` command's).
    session : object, optional
        A running cluster's handle for the engine (a SparkContext, a Dask client): tests share one.
    debug : bool
        ``--debug``: frameworks keep their own log.
    verbosity : str, optional
        ``"quiet"``, ``"info"`` or ``"debug"`` from the ``gpumr`` command's own ``-q``/``-v``."""
    with job_folder() as folder, contextlib.ExitStack() as started:  # (what the engine started, closed first)
        if session is None:
            start_early(getattr(argv, "argv", argv), Start.make(folder, debug), started)
        from .plan import make_plan  # (imported after the early start: it imports numpy)
        plan = make_plan(argv, folder, verbosity, elsewhere=session is not None, started=started, debug=debug)
        return run(plan, session=session, debug=debug)


def start_early(argv, start, started):
    """The engine ``argv`` names exactly (``--engine E``, ``--engine=E``) begins what it can before the launcher
    imports its plan (:meth:`gpumr.engines.base.Engine.start_early`); nothing where it names none, or one that is not
    known (the parser says so next).

    Examples
    --------
    >>> import contextlib
    >>> with contextlib.ExitStack() as started:
    ...     start_early(["faces", "in.seq", "-o", "out", "--engine", "inline"], None, started)  # (nothing to begin)
    """
    from .. import engines
    from ..workloads import BUILT_IN
    named = None
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        if arg == "--engine" and i + 1 < len(argv):
            named = argv[i + 1]
        elif arg.startswith("--engine="):
            named = arg.partition("=")[2]
    if not argv or named not in engines.NAMES:
        return
    module = BUILT_IN[argv[0]].partition(":")[0] if argv[0] in BUILT_IN else None
    engines.get(named).start_early(argv, module, start, started)


def run(plan, session=None, debug=False):
    """Run a checked plan: the skeleton every engine shares (see the module's rule). Returns a :class:`Result`."""
    if plan.options.dry_run:
        for text in plan.describe():
            print(f"gpumr run: {text}")
        for text in plan.engine.would_run(plan):
            print(f"gpumr run: {text}")
        return None
    t0 = time.perf_counter()
    here = plan.engine.tasks_here(plan.options)
    log.debug("%s: %d task(s) on --engine %s, output %s", plan.ref.name, len(plan.tasks), plan.engine.name,
              plan.out.shown)
    progress_folder = None
    if here and not quiet():
        progress_folder = os.path.join(plan.folder, "progress")
        os.mkdir(progress_folder, 0o700)
    shown = (progress_folder is not None or plan.engine.reports_tasks) and not quiet()
    stage = plan.out.begin()
    try:
        plan.spec = dataclasses.replace(plan.spec, stage=str(stage), progress=progress_folder)
        with contextlib.ExitStack() as owned:
            owners = gpu_owners.wanted(plan.workload, plan.options, here and session is None, len(plan.tasks))
            if owners:
                plan.spec = dataclasses.replace(plan.spec, owners=owned.enter_context(
                    gpu_owners.started(plan.spec, plan.start, owners)))
            with Display(progress_folder, plan.input_bytes, label=plan.ref.name, shown=shown) as progress:
                outcome = plan.engine.run(plan, Job(str(stage), plan.folder, progress, session, debug, plan.start))
        locate(stage).child("_SUCCESS").write_bytes(b"")
        parts = dict(outcome.parts, _SUCCESS=("_SUCCESS", 0, hashlib.sha256(b"").hexdigest()))
        bad = outcome.bad if outcome.bad is not None else named_bad(stage, outcome.parts, outcome.counts)
        plan.out.commit(parts)
    except BaseException:
        plan.out.abort()
        raise
    return Result(outcome.counts, time.perf_counter() - t0, bad, plan.ref.name, plan.ref.how)


def named_bad(stage, parts, counts):
    """The first bad records' keys and reasons, read from the staged parts (for engines whose tasks cannot say)."""
    if not counts.get(BAD):
        return []
    from ..io.joboutput import parse
    found, read = [], 0
    for rel, (staged, _, _) in sorted(parts.items()):
        if not rel.startswith("part-"):
            continue
        with locate(stage).child(staged).open_input() as f:
            for raw in f:
                read += len(raw)
                if b'"error": ' in raw:
                    key, value = parse(raw.decode("utf-8"))
                    if "error" in value:
                        found.append((key, value["error"]))
                if len(found) >= NAMED or read > BAD_SCAN_BYTES:
                    return found
    return found


def run_job(job_class, inputs, output_dir, runner="local", extra=(), conf=None):
    """Run the gpumr job class ``job_class`` of ``jobs/`` (``gpumr.jobs.face_detect.MRFaceDetect``...) over ``inputs``
    into ``output_dir`` on the engine ``runner``, with the job's ``extra`` options and mrjob.conf ``conf`` (default
    none), through the one launcher; return the summed gpumr counters and the wall time in seconds."""
    args = [*(["-c", conf] if conf else ["--no-conf"])] if runner in ("inline", "local", "hadoop", "emr") else []
    result = launch([job_class.WORKLOAD, *inputs, "-o", output_dir, "--engine", runner, *args, *extra])
    return result.counts, result.seconds
