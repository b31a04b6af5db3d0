"""What an engine is: a name, its declared options, where its tasks run, and how it runs a plan's tasks."""

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What a job's tasks produced.

    Attributes
    ----------
    parts : dict
        ``{name in the output: (name in the stage, size, sha256)}``: the part files and arrays to publish (one attempt
        of each).
    counts : dict
        The gpumr counters, summed.
    bad : list of (str, str) or None
        The first bad records' keys and reasons; None where the engine cannot say (the launcher then reads them from
        the output)."""

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
    start : gpumr.engines.start.Start or None
        How the job's framework processes start (folder, import path, environment, logs, secrets): every process an
        engine starts goes through it."""

    stage: str
    folder: str
    progress: object
    session: object = None
    debug: bool = False
    start: object = None


class Engine:
    """One ``--engine``: its declared options, where its tasks run, and how it runs them.

    Attributes
    ----------
    name : str
        Its name in ``--engine``.
    help : str
        One line for ``--engine``'s help.
    title : str
        How ``--help`` heads its options (default ``engine NAME``).
    options : tuple of gpumr.Option
        Its own options, each with its limits (checked once per job, before anything starts).
    reports_tasks : bool
        Whether the launcher hears of each task as it finishes.
    passthrough : object or None
        For an engine that hands its framework's own options on as given (mrjob's ``-c``, ``--jobconf``):
        ``title``, ``switches()`` (declared in the one parser) and ``check(extra)``. Any other engine refuses them."""

    name = "engine"
    help = ""
    title = None
    options = ()
    reports_tasks = False
    passthrough = None

    def __init__(self, name=None):
        self.name = name or self.name
        self.title = self.title or self.name

    def check(self, options):
        """Refuse what only several options together make wrong (one line; reads nothing): none by default."""

    def tasks_here(self, options):
        """Whether the tasks run on this machine (``--device gpu`` is then refused here without a GPU)."""
        return True

    def start_early(self, argv, module, start, started):
        """Begin, before the command line is parsed, what takes longest to start; nothing by default."""

    def start(self, options, workload, start, started):
        """Begin, while the launcher checks the side files, what the job needs before its first task; nothing by
        default. ``start`` is the job's :class:`gpumr.engines.start.Start`; what begins goes to ``started``."""

    def run(self, plan, job):
        """Run the plan's tasks; return an :class:`Outcome`. On any failure, end every task first, then raise."""
        raise NotImplementedError

    def would_run(self, plan):
        """``--dry-run``: lines saying what this engine would start, beside the plan the launcher shows."""
        return []
