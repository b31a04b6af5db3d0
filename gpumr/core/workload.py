"""The public contract of a workload: one function over records, with a CPU and optionally a GPU path.

How to write one: :doc:`/how-to/own-workload`.

Example
-------
>>> import numpy as np
>>> from gpumr import Option, Workload
>>> class Brightness(Workload):
...     name = "brightness"
...     summary = "mean grey level of each image"
...     options = (Option("--scale", type=float, default=1.0, least=0, help="multiplies the mean"),)
...     decode = "gray"
...     def cpu(self, key, image, options):
...         return {"mean": float(image.mean()) * options.scale}
>>> Brightness().cpu("a.png", np.full((2, 2), 10, np.uint8), type("O", (), {"scale": 2.0})())
{'mean': 20.0}
"""

from .. import limits

#: What the engines give ``decode``: a colour image (BGR, uint8, ``[height, width, 3]``), a grey image
#: (uint8, ``[height, width]``) or the record's bytes as they are.
DECODES = ("color", "gray", "raw")
#: The keys the output format itself writes into a value (``error`` on a record that failed, ``lost`` on a stretch
#: of input that could not be read, ``device`` on every result, ``simulated`` on a simulated GPU's): a result that
#: names one is that record's error line, so that a reader's ``"error" in value`` always means a failed record.
RESERVED = ("error", "device", "lost", "simulated")
#: Where a workload's records come from: SequenceFiles given as inputs, or the records its :meth:`Workload.plan` makes.
INPUTS = ("seqfile", "plan")


class Option:
    """One command-line option of a workload, with the limit it is checked against once per job.

    Parameters
    ----------
    name : str
        ``--like-this``; its value is ``options.like_this`` in the workload's functions.
    help : str
        One line for ``gpumr run WORKLOAD --help`` and the docs.
    type, default, metavar, choices, action
        As argparse's ``add_argument``.
    least, most : number, optional
        Inclusive limits; ``above``: an exclusive lower limit. A value out of them is refused with one line before any
        task starts.
    integer : bool, optional
        Whole numbers only (default: when ``type`` is ``int``).
    side_file : bool
        The value names a file every task reads (a model, a table): the launcher checks it, ships it to the tasks
        under a name made of its content's hash, and the tasks see that copy's path.

    Examples
    --------
    >>> Option("--ksize", type=int, default=3, least=1, most=31, help="the aperture").dest
    'ksize'
    """

    def __init__(self, name, help="", *, type=None, default=None, metavar=None, choices=None, action=None,
                 least=None, most=None, above=None, integer=None, side_file=False):
        if not name.startswith("--") or len(name) < 3:
            raise ValueError(f"an option's name is --like-this, not {name!r}")
        self.name, self.help, self.type, self.default = name, help, type, default
        self.metavar, self.choices, self.action = metavar, choices, action
        self.least, self.most, self.above = least, most, above
        self.integer = (type is int) if integer is None else integer
        self.side_file = side_file

    @property
    def dest(self):
        """The attribute that holds the value: ``--like-this`` -> ``like_this``."""
        return self.name[2:].replace("-", "_")

    def kwargs(self):
        """The keyword arguments of argparse's ``add_argument`` for this option."""
        kw = dict(default=self.default, help=self.help, dest=self.dest)
        for key in ("type", "metavar", "choices", "action"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw

    def check(self, value):
        """Refuse a value out of the limit: :class:`gpumr.errors.GpumrError` naming the option, in one line."""
        if value is not None and (self.least, self.most, self.above) != (None, None, None):
            return limits.number(self.name, value, self.least, self.most, above=self.above, integer=self.integer)
        return value

    def __repr__(self):
        return f"Option({self.name!r})"


class Workload:
    """A function over records that every engine runs, each record on a free GPU or the CPU.

    Attributes
    ----------
    name : str
        Its name in ``gpumr run NAME`` and in messages.
    summary : str
        One line: what it computes (``gpumr run --help``).
    options : tuple of Option
        Its own options.
    decode : {"color", "gray", "raw"}
        What ``image`` is: BGR uint8, grey uint8, or the record's bytes. Images are decoded by gpumr, their size
        checked from the header first (:attr:`max_pixels`); one that does not decode is an error line naming the
        record.
    input : {"seqfile", "plan"}
        Records are those of the SequenceFiles given as inputs, or the ``(key, value)`` pairs :meth:`plan` makes (no
        inputs are given).
    max_pixels : int
        Images over this many pixels are refused before decoding.
    cpu_records, gpu_records : int
        How many records :meth:`cpu_batch` and :meth:`gpu_batch` take at once.
    gpu_owner : bool
        True for a GPU path whose set-up is heavy (data every record reads, put on the device): where the tasks run
        on the launcher's machine, one process per job sets it up once and runs every task's GPU batches
        (:mod:`gpumr.tasks.owner`); results then travel back to the tasks, so it suits few, large records.

    Notes
    -----
    Each method's ``options`` argument holds the values of the job's options (``--like-this`` as
    ``options.like_this``). gpumr passes it by position, so a workload that names it ``o``, as older ones do, runs
    unchanged."""

    name = None
    summary = ""
    options = ()
    decode = "color"
    input = "seqfile"
    max_pixels = 50_000_000
    cpu_records = 1
    gpu_records = 1
    gpu_owner = False

    # -- once per job, where it is launched ---------------------------------------------------------
    def resolve(self, options):
        """Fill in values that follow from others (a default file beside an input), setting them on ``options``."""

    def check(self, options):
        """Refuse options that cannot work, before any task: raise GpumrError with one line."""

    def plan(self, options):
        """The records of a workload whose :attr:`input` is ``"plan"``: a list of ``(key, value)``, the key a string,
        the value JSON (numbers, strings, lists, dicts), handed to :meth:`load` as it is."""
        raise NotImplementedError(f"{type(self).__name__} takes SequenceFile inputs (input = 'seqfile')")

    def task_threads(self, options):
        """How many cores one task keeps busy on the CPU (default 1)."""
        return 1

    # -- in each task --------------------------------------------------------------------------------
    def setup(self, options):
        """Run once per task process before its first record: load models, tables, compile kernels."""

    def load(self, key, value, options):
        """The record's value as :meth:`cpu` takes it (per :attr:`decode`); a
        :class:`~gpumr.core.badrecord.BadRecord` if it cannot be."""
        if self.decode == "raw":
            return value
        from .images import decode_image
        return decode_image(value, self.decode, self.max_pixels)

    def cpu(self, key, image, options):
        """The result for one record on the CPU: a dict of JSON values (numpy arrays are written as .npy files)."""
        raise NotImplementedError(f"{type(self).__name__} has no cpu()")

    def cpu_batch(self, records, options):
        """Results for ``[(key, image), ...]`` on the CPU, in order (default: :meth:`cpu` on each)."""
        return [self.cpu(key, image, options) for key, image in records]

    #: ``gpu(self, key, image, options, device)``: the result for one record on the GPU ``device``
    #: (:class:`gpumr.tasks.device.Device`); None: the workload has no GPU path.
    gpu = None

    def gpu_batch(self, records, options, device):
        """Results for ``[(key, image), ...]`` on GPU ``device``, in order (default: :meth:`gpu` on each)."""
        return [self.gpu(key, image, options, device) for key, image in records]

    def finish(self, key, result, options):
        """Host work on a result that needs no device, run after a GPU's lease is released (default: the result)."""
        return result

    def has_gpu(self):
        """Whether this workload has a GPU path (:meth:`gpu` or :meth:`gpu_batch` is defined)."""
        return self.gpu is not None or type(self).gpu_batch is not Workload.gpu_batch

    def gpu_ready(self, options, simulated):
        """Why the GPU path cannot run here, or None when it can (e.g. a model its kernel does not take)."""
        return None

    def gpu_memory(self, images, options):
        """Device memory (bytes) a GPU batch of these decoded images needs, told to device choice (default 0)."""
        return 0


def check_class(cls, where):
    """Refuse a class that does not keep the contract; :class:`gpumr.errors.GpumrError` naming ``where``."""
    from ..errors import GpumrError
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise GpumrError(f"{where}: not a subclass of gpumr.Workload")
    if not isinstance(cls.name, str) or not cls.name:
        raise GpumrError(f"{where}: a workload needs a name (name = \"...\")")
    if cls.decode not in DECODES:
        raise GpumrError(f"{where}: decode must be one of {', '.join(DECODES)}, not {cls.decode!r}")
    if cls.input not in INPUTS:
        raise GpumrError(f"{where}: input must be one of {', '.join(INPUTS)}, not {cls.input!r}")
    if cls.cpu is Workload.cpu and cls.cpu_batch is Workload.cpu_batch:
        raise GpumrError(f"{where}: a workload needs cpu(self, key, image, options)")
    for opt in cls.options:
        if not isinstance(opt, Option):
            raise GpumrError(f"{where}: options must be gpumr.Option objects, not {type(opt).__name__}")
    for n in ("cpu_records", "gpu_records"):
        limits.number(f"{where}: {n}", getattr(cls, n), 1, 1 << 20, integer=True)
    return cls
