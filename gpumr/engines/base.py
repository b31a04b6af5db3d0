"""What an engine is: its options, and how it submits a job's tasks, gathers what they return and ends them.

The launcher (:mod:`gpumr.launch`) hands an engine a checked
:class:`~gpumr.launch.plan.Plan` and a :class:`Job` (the stage to write
into, the progress display, the job's private folder); the engine returns
an :class:`Outcome` or raises, having ended every task it started. The run
skeleton does the rest: publishing, the summary, the exit status.
"""

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What a job's tasks produced.

    Attributes
    ----------
    parts : dict
        ``{name in the output: (name in the stage, size, sha256)}``: the
        part files and arrays to publish (one attempt of each).
    counts : dict
        The gpumr counters, summed.
    bad : list of (str, str) or None
        The first bad records' keys and reasons; None where the engine
        cannot say (the launcher then reads them from the output).
    """

    parts: dict
    counts: dict
    bad: list = field(default=None)


@dataclass
class Job:
    """What the run skeleton gives an engine along with the plan.

    Attributes
    ----------
    stage : str
        The output's hidden stage (a path or URI); tasks write only here.
    folder : str
        The job's private folder on this machine (removed after the job).
    progress : gpumr.tasks.progress.Display
        Tell it each finished task (``progress.done(counts, bytes)``).
    session : object or None
        A cluster handle the caller passed in (a SparkContext, a Dask client), used instead of making one.
    debug : bool
        ``--debug``: keep the framework's own log.
    """

    stage: str
    folder: str
    progress: object
    session: object = None
    debug: bool = False


class Engine:
    """One ``--engine``: its options and how its tasks are submitted and ended.

    Attributes
    ----------
    name : str
        Its name in ``--engine``.
    help : str
        One line for ``--engine``'s help.
    """

    name = "engine"
    help = ""
    #: Whether the launcher hears of each task as it finishes (:meth:`gpumr.tasks.progress.Display.done`).
    reports_tasks = False

    def __init__(self, name=None):
        self.name = name or self.name

    def group_title(self):
        """How ``--help`` heads this engine's options."""
        return self.name

    def add_options(self, group):
        """Add this engine's own options to ``group`` (an argparse argument group)."""

    def check(self, o):
        """Refuse this engine's own options out of their limits (one line; reads nothing)."""

    def split_args(self, argv, ours):
        """``(argv for gpumr's parser, argv for the engine's framework)``: the framework's own options and their
        values taken out (none by default). ``ours``: the option strings gpumr's parser knows, which stay its."""
        return list(argv), []

    def check_extra(self, extra):
        """Refuse options the one parser does not know (``extra``); an engine that passes them on checks them here."""
        from ..boundary import UsageError
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see gpumr run WORKLOAD --help)")

    def start_early(self, argv, module, started):
        """Begin, before the workload's class is loaded and the command line parsed, what :meth:`start` begins
        first and what takes longest (a fork server's imports); nothing by default.

        Called only where ``argv`` (``gpumr run``'s arguments) names this
        engine exactly (``--engine NAME`` or ``--engine=NAME``) and the
        tasks run where the launcher starts them; ``module`` is a built-in
        workload's module (None for another). What this starts goes to
        ``started``, as for :meth:`start`, which takes it over: a command
        line refused later leaves nothing running.
        """

    def start(self, o, workload, folder, started, debug=False):
        """Begin, while the launcher reads and checks the side files, what the job will need before its first task
        (an embedded cluster's start); nothing by default.

        What this starts is handed to ``started`` (a :class:`contextlib.ExitStack` the launcher closes once the job
        has ended, or failed before running), so that a plan refused after this call leaves nothing running.
        :meth:`run` takes over what this started. ``folder`` is the job's private folder; ``debug``: ``--debug``.
        """

    def tasks_here(self, o):
        """Whether the tasks run on this machine (``--device gpu`` is then refused here without a GPU)."""
        return True

    def run(self, plan, job):
        """Run the plan's tasks; return an :class:`Outcome`. On any failure, end every task first, then raise."""
        raise NotImplementedError

    def dry_run(self, plan, show):
        """``--dry-run``: ``show(line)`` what this engine would run, beside the plan the launcher shows."""
