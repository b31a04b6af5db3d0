"""A workload declared once: its options, the side files it ships, its checks and its record function.

Every engine reads the same :class:`Declaration`: the mrjob job classes
(``jobs/``, :class:`gpumr.engines.streaming.GpumrJob`) add its options to
mrjob's parser, the Spark and Dask engines and ``gpumr run`` to an argparse
parser (:meth:`Declaration.add_to`); all run its :meth:`~Declaration.check`
before any task, and every task builds the record function with
:meth:`~Declaration.make`. An option's message, default and limit are said
here once.

The options every workload shares (device choice, GPU slots and memory,
reducers, the record size cap) are :data:`COMMON` and :data:`SEQFILE`.
"""

import argparse

from .. import limits
from ..errors import GpumrError


class Option:
    """One command-line option of a workload (or of every workload).

    Parameters
    ----------
    name : str
        ``--like-this``; its ``dest`` is ``like_this``.
    help : str
    type, default, metavar, choices, action
        As argparse's ``add_argument`` (and mrjob's ``add_passthru_arg``).
    least, most, above, integer
        The limit (:func:`gpumr.limits.number`), checked by :meth:`check` when the value is set.
    side_file : bool
        The value names a file every task needs: shipped to the tasks (mrjob's
        ``add_file_arg``, Spark's ``addFile``, Dask's upload).
    """

    def __init__(self, name, help, *, type=None, default=None, metavar=None, choices=None, action=None,
                 least=None, most=None, above=None, integer=False, side_file=False):
        self.name, self.help, self.type, self.default = name, help, type, default
        self.metavar, self.choices, self.action = metavar, choices, action
        self.least, self.most, self.above, self.integer = least, most, above, integer
        self.side_file = side_file

    @property
    def dest(self):
        return self.name.lstrip("-").replace("-", "_")

    def kwargs(self):
        """The keyword arguments of argparse's (and mrjob's) ``add_argument`` for this option."""
        kw = dict(default=self.default, help=self.help)
        for key in ("type", "metavar", "choices", "action"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw

    def check(self, value):
        """Refuse a set value outside the limit; GpumrError naming the option."""
        if value is not None and (self.least, self.most, self.above) != (None, None, None):
            limits.number(self.name, value, self.least, self.most, above=self.above, integer=self.integer)


class Declaration:
    """What a workload is, for every engine.

    Subclasses set the attributes and implement :meth:`make`, and may
    extend :meth:`prepare` and :meth:`check`.

    Attributes
    ----------
    name : str
        Its name in ``gpumr run NAME`` (``faces``, ``backproject``).
    summary : str
        One line: what it does (help text, usage lines).
    input : {"seqfile", "slabs"}
        Records are SequenceFile records of the inputs; or lines ``z0 z1`` of a slab plan the launcher makes.
    options : tuple of Option
        The workload's own options (:data:`COMMON` come with every workload).
    """

    name = "workload"
    summary = ""
    input = "seqfile"
    options = ()
    #: Options of the engines that make the records themselves (``input = "slabs"``: the plan).
    launcher_options = ()

    def all_options(self):
        """The workload's options, then the shared ones (:data:`COMMON`, :data:`SEQFILE` for SequenceFile input)."""
        return (*self.options, *COMMON, *(SEQFILE if self.input == "seqfile" else ()))

    def add_to(self, parser):
        """Add every option to an argparse ``parser``."""
        for option in self.all_options():
            parser.add_argument(option.name, **option.kwargs())

    def side_files(self, o):
        """``[(option name, path)]`` of the side-file options set in ``o`` (a namespace of options)."""
        return [(opt.name, getattr(o, opt.dest)) for opt in self.options
                if opt.side_file and getattr(o, opt.dest, None)]

    def prepare(self, values):
        """Values the launcher resolves before the options go to the tasks: ``{option name: new value}``.

        Parameters
        ----------
        values : dict
            ``{option name: value or None}`` as given on the command line.

        Runs only where the job is launched (a bundled cascade's name
        becomes its path, the geometry beside the projections is found);
        never raises: what is wrong is said by :meth:`check`.
        """
        return {}

    def check(self, o):
        """Refuse, before any task, options that are wrong; GpumrError in one line.

        Checks every declared limit (:meth:`check_limits`); subclasses add
        what needs the files (a cascade that loads, projections that read).
        """
        self.check_limits(o)

    def check_limits(self, o):
        """Refuse an option out of its declared limit; GpumrError in one line.

        Reads no file: a launcher calls it first, before it lists the inputs
        or allocates anything, then :meth:`check` once the inputs are known.
        """
        from ..devices.leases import check_slots
        from ..devices.protocol import MAX_MEMORY
        for option in self.all_options():
            option.check(getattr(o, option.dest, None))
        check_slots(o.gpu_slots, "--gpu-slots")
        if o.gpu_memory is not None:
            limits.number("--gpu-memory", o.gpu_memory, 1, MAX_MEMORY, integer=True)

    def plan(self, o):
        """The records the launcher makes (``input = "slabs"``), from the options ``o``."""
        raise NotImplementedError

    def make(self, o):
        """The :class:`gpumr.core.Workload` for options ``o``: built once per task process."""
        raise NotImplementedError


def apply(o, changes):
    """Set ``{option name: value}`` (from :meth:`Declaration.prepare`) on the namespace ``o``; returns ``o``."""
    for name, value in changes.items():
        setattr(o, name.lstrip("-").replace("-", "_"), value)
    return o


def values_of(declaration, o):
    """``{option name: value}`` of ``declaration``'s options in the namespace ``o`` (what :meth:`Declaration.prepare` takes)."""
    return {opt.name: getattr(o, opt.dest, None) for opt in declaration.options}


def parse(declaration, argv, parser, known=False):
    """Parse ``argv`` with ``parser`` (which already has the engine's options) plus the declaration's.

    The launcher's resolutions (:meth:`Declaration.prepare`) are applied;
    nothing is checked yet. A usage error is a :class:`GpumrError` (one line,
    exit status 1 through the error boundary). With ``known``, returns
    ``(options, the arguments not parsed)`` (an mrjob runner's own options).
    """
    declaration.add_to(parser)

    def error(message):
        raise GpumrError(message)
    parser.error = error
    o, rest = parser.parse_known_args(argv) if known else (parser.parse_args(argv), None)
    apply(o, declaration.prepare(values_of(declaration, o)))
    return (o, rest) if known else o


def _device_modes():
    from ..devices.chooser import MODES
    return MODES


def _common():
    from ..io.records import DEFAULT_MAX_RECORD_SIZE, max_record_size_arg
    from ..sizes import size_arg
    common = (
        Option("--device", "auto: per record, a GPU if one is free now, else the CPU (default); "
                           "cpu: never touch CUDA; gpu: wait for a GPU", choices=_device_modes(), default="auto"),
        Option("--gpu-slots", f"tasks that may share one GPU at once (default 1, at most {limits.MAX_GPU_SLOTS})",
               type=int, default=1, metavar="N"),
        Option("--gpu-memory", "device memory a GPU batch needs, e.g. 2GiB (default: the workload's figure for "
                               "each batch)", type=size_arg, default=None, metavar="SIZE"),
        Option("--reducers", "reduce tasks (default 1: one output file, sorted by key); 0: no reduce, output "
                             "not sorted", type=int, default=1, metavar="N", least=0, most=limits.MAX_REDUCERS,
               integer=True),
    )
    seqfile = (
        Option("--max-record-size", "refuse a record, or a block of a block-compressed file, larger than SIZE once "
                                    "decompressed: an error line, not the task's memory (default 256MiB)",
               type=max_record_size_arg, default=DEFAULT_MAX_RECORD_SIZE, metavar="SIZE"),
    )
    return common, seqfile


#: Options of every workload, on every engine.
#: Options of workloads that read SequenceFiles.
COMMON, SEQFILE = _common()

__all__ = ["Option", "Declaration", "COMMON", "SEQFILE", "apply", "values_of", "parse", "argparse"]
