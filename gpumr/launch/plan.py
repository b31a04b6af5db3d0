"""The launcher: a command line in, one checked :class:`Plan` out, the same for every engine.

The limits, inputs, output and the workload's own files are checked once per job, before any task starts, and the
plan is all an engine gets."""

import argparse
from dataclasses import dataclass, field

from ..boundary import UsageError
from ..engines.start import Start
from ..errors import GpumrError
from ..io.inputs import expand_sized, require_sequencefiles, splits
from ..io.outputs import open_output
from ..io.remote import locate
from ..log import logger
from ..tasks.items import Record, Split
from ..tasks.runtime import Spec
from .options import check_limits, checked, task_options
from .parser import Parsed, parse_run
from .ship import fetch, named_ahead, ship

#: The command every engine's output is proved to be from: an output of any engine is replaced by any other's.
MADE_BY = "gpumr run"
#: The commands earlier gpumr versions recorded for their engines' outputs (the same outputs).
ALSO_MADE_BY = ("gpumr spark", "gpumr dask")

log = logger(__name__)


@dataclass
class Plan:
    """Everything settled before any task starts; engines read it, none changes it.

    Attributes
    ----------
    ref : gpumr.workloads.Ref
        Where the workload is.
    workload : gpumr.Workload
        An instance, on the launcher's side (its ``check`` and ``plan`` ran).
    options : gpumr.launch.options.Checked
        Every option's value, checked; setting one raises.
    engine : gpumr.engines.base.Engine
    inputs : list of (str, int)
        The input files and their sizes (SequenceFile workloads).
    tasks : list of list
        Each task's items (:mod:`gpumr.tasks.items`).
    out : gpumr.io.outputs._Transaction
        The output, checked, not yet begun.
    side : list of gpumr.launch.ship.SideFile
        The files shipped to every task (the user's module among them).
    spec : gpumr.tasks.runtime.Spec
        What every task gets (its ``stage`` set when the job starts).
    extra : list of str
        Options for the engine's framework as given (mrjob's).
    folder : str
        The job's private folder on this machine.
    start : gpumr.engines.start.Start
        How the job's framework processes start."""

    ref: object
    workload: object
    options: argparse.Namespace
    engine: object
    inputs: list
    tasks: list
    out: object
    side: list
    spec: Spec
    extra: list = field(default_factory=list)
    folder: str = None
    start: object = None

    @property
    def input_bytes(self):
        """Bytes of input the tasks read (None when a size is unknown)."""
        sizes = [size for _, size in self.inputs]
        return None if None in sizes else sum(sizes)

    def describe(self):
        """Lines saying what the job would do (``--dry-run``)."""
        what = (f"{len(self.inputs)} input file(s), {self.input_bytes if self.input_bytes is not None else '?'} bytes"
                if self.workload.input == "seqfile" else "records planned by the workload")
        lines = [f"workload {self.ref.name} ({self.ref.how}): {len(self.tasks)} task(s) over {what}",
                 f"engine {self.engine.name}; output {self.out.shown}; --device {self.options.device}; "
                 f"--reducers {self.options.reducers}"]
        lines += [f"ships {f.option} as {f.name} ({f.size} bytes)" for f in self.side]
        return lines


def verbosity(options):
    """The job's verbosity from ``-q``/``-v`` (and the ``gpumr`` command's own): what its tasks log."""
    if getattr(options, "verbose", False):
        return "debug"
    if getattr(options, "quiet", False):
        return "quiet"
    return "info"


def make_plan(argv, folder, verbosity_given=None, elsewhere=False, started=None, debug=False):
    """The checked :class:`Plan` of the command line ``argv`` (``WORKLOAD [INPUT...] -o OUT [options]``). Raises
    ``GpumrError``: one line, before any task: a usage error, an option out of its limit, a missing or unreadable
    input, an output gpumr may not replace, a side file that does not check.

    Parameters
    ----------
    argv : list of str or gpumr.launch.parser.Parsed
        ``gpumr run``'s arguments: the workload (a name or ``MODULE:CLASS``) first; or them parsed already
        (:func:`gpumr.launch.parser.parse_run`).
    folder : str
        The job's private folder (side files' copies, fetched URIs).
    verbosity_given : str, optional
        The ``gpumr`` command's own ``-q``/``-v``, where they were given before ``run``.
    elsewhere : bool
        The tasks run on a cluster the caller handed in (a SparkContext, a Dask client): ``--device gpu`` is then not
        refused for want of a GPU on this machine.
    started : contextlib.ExitStack, optional
        Where the engine's early start goes (:meth:`gpumr.engines.base.Engine.start`: an embedded Dask cluster starts
        while the side files are checked); the caller closes it. None: the engine starts all in its ``run``.
    debug : bool
        ``--debug`` (what the engine starts early keeps its frameworks' log)."""
    from .. import engines
    parsed = argv if isinstance(argv, Parsed) else parse_run(argv)
    argv, ref, cls, parser, options = parsed
    options = argparse.Namespace(**vars(options))  # (this plan's own copy)
    engine = engines.get(options.engine)
    extra = vars(options).pop("framework_args", [])  # the framework's own options, as given (mrjob's)
    for dest, (option, names) in parser.engine_options.items():  # another engine's option, given: refused
        if engine.name not in names and getattr(options, dest) != option.default:
            raise UsageError(f"{option.name}: an option of --engine {', '.join(names)}; --engine "
                             f"{engine.name} does not take it")
    if engine.passthrough is not None:
        engine.passthrough.check(extra)
    elif extra:
        raise UsageError(f"{extra[0].partition('=')[0]}: an option of mrjob's runners (--engine "
                         f"{', '.join(parser.passthrough_engines)}); --engine {engine.name} does not take it")
    workload = cls()
    inputs = list(getattr(options, "inputs", []))
    if cls.input == "seqfile" and not inputs:
        raise GpumrError(f"no input given: gpumr run {argv[0]} INPUT... -o OUT (SequenceFiles: gpumr pack makes them)")
    if cls.input == "plan" and options.inputs:
        raise GpumrError(f"{ref.name} makes its own records: give no inputs ({' '.join(options.inputs)})")
    workload.resolve(options)
    check_limits(cls, options)  # reads no file: first
    for option in engine.options:
        setattr(options, option.dest, option.check(getattr(options, option.dest)))
    engine.check(options)
    if not options.output:
        raise GpumrError("-o OUT is required: the output folder or URI (--output-dir OUT for python -m gpumr.jobs.X)")
    files = []
    if cls.input == "seqfile":
        files = [(locate(f).absolute(), size) for f, size in expand_sized(inputs)]  # (tasks run anywhere)
        require_sequencefiles([f for f, _ in files], inputs[0])
    values = [(opt, getattr(options, opt.dest)) for opt in cls.options
              if opt.side_file and getattr(options, opt.dest, None)]
    out = open_output(options.output, MADE_BY, folder=True, inputs=[*inputs, *(v for _, v in values)],
                      also=ALSO_MADE_BY)
    for opt, value in values:  # a side file at a URI is fetched here first: the checks read it, then it ships
        loc = locate(value)
        if loc.is_uri:
            setattr(options, opt.dest, loc.local or fetch(loc, folder))
    start = Start.make(folder, debug, logs=options.framework_logs, open_ports_ok=options.allow_open_ports)
    if started is not None and not elsewhere and not options.dry_run:
        engine.start(options, workload, start, started)  # (its cluster starts while the side files are read)
    here = {v: locate(v).local for v in [*(getattr(options, opt.dest) for opt, _ in values), ref.file] if v}
    with named_ahead(path for path in here.values() if path) as named:  # (content names made during the checks)
        workload.check(options)  # the files the options name, once per job
        side = [ship(opt.name, getattr(options, opt.dest), folder, named.get(here[getattr(options, opt.dest)]))
                for opt, _ in values]
        shipped = None
        if ref.file is not None:  # a user's module, shipped as a side file too
            shipped = ship("workload", ref.file, folder, named.get(here[ref.file]))
            side.append(shipped)
    names = {f.option: f.name for f in side}
    tasks = ([[Split(path, start, end)] for path, start, end in splits(files, options.split_size)]
             if cls.input == "seqfile" else [[Record(k, v)] for k, v in workload.plan(options)])
    if options.device == "gpu" and engine.tasks_here(options) and not elsewhere:
        from ..devices.chooser import require_gpu
        require_gpu()
    if options.device != "cpu" and engine.tasks_here(options) and not elsewhere and workload.has_gpu():
        from ..gpu.kernels import cache_dir
        cache_dir()  # a kernel cache gpumr may not use is said here, once, before any task (gpumr.trusted)
    for_tasks = {opt.dest: getattr(options, opt.dest, None) for opt in task_options(cls)}
    for_tasks.update({opt.dest: names[opt.name] for opt, _ in values})
    spec = Spec(workload=list(ref._replace(file=None)), module=shipped and shipped.name, options=for_tasks,
                side={f.name: f.size for f in side}, verbosity=verbosity_given or verbosity(options))
    return Plan(ref, workload, checked(options), engine, files, tasks, out, side, spec, extra, folder, start)
