"""What every engine that plans its own tasks shares (Spark, Dask): the launcher's side and the task's side.

The launcher (:func:`prepare`) parses a workload's command line from its
declaration (:mod:`gpumr.core.declare`) and the engine's own options,
checks the output and the options before any task, fetches side files
that name URIs, and plans the tasks' items: SequenceFile byte ranges
(:func:`plan_splits`) or the declaration's slab plan. A task
(:class:`Task`) builds the workload once per process, chooses a device per
record and yields output lines; :func:`write_part` writes them into the
output's hidden stage under the attempt's own name, and the launcher
publishes one attempt per part (:func:`publish`).

The I/O layers are reached through a few functions only, so that each can
be re-pointed at one place: :func:`plan_splits` (listing and cutting the
inputs), :func:`read_records` (one split's records), :func:`open_output`,
:func:`write_part` and :func:`publish` (the output transaction),
:func:`fetch_side_file`.
"""

import argparse
import hashlib
import os
import sys

from .. import limits
from ..core import declare
from ..errors import GpumrError
from ..workloads import get

DEFAULT_SPLIT = 32 * 1024 * 1024
#: Bytes of output lines a task gathers before each write into its part file.
WRITE_CHUNK = 1 << 20
#: Options that only mrjob's runners take.
MRJOB_ONLY = ("--hadoop-splits", "-r", "--runner", "-c", "--conf-path", "--output-dir")


# -- the calls into the I/O layers ----------------------------------------------------------------------
def splits(files, split_size):
    """``(path, start, end, name)`` byte ranges of at most ``split_size`` covering each file.

    ``files`` are ``(path or URI, size)`` pairs. The number of ranges is
    counted before any is made and refused above :data:`gpumr.limits.MAX_SPLITS`.

    Raises
    ------
    GpumrError
        Naming the split size that keeps the job within the limit.
    """
    from ..sizes import human
    count = sum(max(1, -(-size // split_size)) for _, size in files)
    if len(files) > limits.MAX_SPLITS:
        raise GpumrError(f"{len(files)} input files: each is at least one task, over the limit of "
                         f"{limits.MAX_SPLITS}; pack them into fewer SequenceFiles (gpumr pack --shards N)")
    if count > limits.MAX_SPLITS:
        total = sum(size for _, size in files)
        need = -(-total // max(1, limits.MAX_SPLITS - len(files)) // (1 << 20)) << 20  # enough, in whole MiB
        raise GpumrError(f"--split-size {split_size}: {count} splits of {human(total)} of input, over the limit of "
                         f"{limits.MAX_SPLITS} tasks; use --split-size {need >> 20}MiB or more")
    out = []
    for path, size in files:
        for start in range(0, max(size, 1), split_size):
            out.append((path, start, min(start + split_size, size), path))
    return out


def plan_splits(paths, split_size, engine="this engine"):
    """The splits of the SequenceFiles ``paths`` (files, folders, URIs) name; see :func:`splits`.

    Raises
    ------
    GpumrError
        For a URI that pyarrow cannot serve here (the tasks read byte ranges
        through it; there is no ``hadoop fs`` fallback), and see :func:`splits`.
    """
    from ..io.inputs import expand_sized
    from ..io.remote import locate
    files = [(locate(p).absolute(), size) for p, size in expand_sized(paths)]
    for path, size in files:
        if size is None:
            raise GpumrError(f"{locate(path).shown}: {engine}'s tasks read byte ranges through pyarrow, and "
                             f"{locate(path).unavailable()}")
    return splits(files, split_size)


def read_records(split, max_record_size):
    """What :func:`gpumr.io.records.read_split` yields for one ``(path, start, end, name)`` split."""
    from ..io.records import read_split
    path, start, end, name = split
    return read_split(path, start, end, name, max_record_size=max_record_size)


def open_output(out, made_by, inputs=()):
    """The output transaction of ``out`` (a folder or URI), checked now, before any task.

    ``out`` must be new, empty, or an earlier output of ``made_by`` that
    its proof vouches for, and neither the current folder nor one holding an
    input (:mod:`gpumr.io.outputs`).
    """
    from ..io.outputs import open_output as transaction
    return transaction(out, made_by, folder=True, inputs=inputs)


def stage_of(out):
    """Begin ``out``'s transaction; its hidden stage (a path or URI), which tasks write into."""
    return out.begin()


def write_part(stage, name, lines):
    """Write ``lines`` (str, without newlines) as the file ``name`` in ``stage``; return ``(size, sha256)``.

    ``name`` is the attempt's own (``part-NNNNN.attempt-ID``), so that two
    attempts of one part never write one file; the launcher publishes one.
    """
    from ..io.remote import locate
    h, size, chunk, held = hashlib.sha256(), 0, [], 0
    with locate(stage).child(name).open_output() as f:
        def flush():
            data = b"".join(chunk)
            f.write(data)
            h.update(data)
            chunk.clear()
            return len(data)
        for line in lines:
            chunk.append(line.encode("utf-8") + b"\n")
            held += len(chunk[-1])
            if held >= WRITE_CHUNK:
                size, held = size + flush(), 0
        size += flush()
    return size, h.hexdigest()


def read_part(stage, name):
    """The lines of a file the tasks wrote into ``stage`` (a reduce task reads the map tasks' files)."""
    from ..io.remote import locate
    with locate(stage).child(name).open_input() as f:
        return f.read().decode("utf-8").splitlines()


def publish(out, stage, parts):
    """Mark the stage complete (``_SUCCESS``, written last) and publish ``parts`` ``{name: (staged, size, sha)}``."""
    from ..io.remote import locate
    locate(stage).child("_SUCCESS").write_bytes(b"")
    out.commit(dict(parts, _SUCCESS=("_SUCCESS", 0, hashlib.sha256(b"").hexdigest())))


def fetch_side_file(uri, local):
    """Copy the side file at ``uri`` to ``local`` (the launcher ships local copies)."""
    from ..io.remote import locate
    os.makedirs(os.path.dirname(local), exist_ok=True)
    locate(uri).fetch(local)


# -- the launcher ---------------------------------------------------------------------------------------
def require(output=True, inputs=True):
    """Refuse a command line without an output (``-o``) or without inputs: the one wording of every engine."""
    if not output:
        raise GpumrError("-o OUT is required: the output folder or URI")
    if not inputs:
        raise GpumrError("no input given")


def parser(kind, engine, split_size=True):
    """The argparse parser of ``gpumr run KIND --engine ENGINE``: output, split size or plan, the workload's.

    The engine adds its own options (``--master``, ``--scheduler``) before
    :func:`prepare` adds the declaration's.
    """
    d = get(kind)
    p = argparse.ArgumentParser(prog=f"gpumr run {kind} --engine {engine}", description=d.summary)
    if d.input == "seqfile":
        p.add_argument("inputs", nargs="*", metavar="INPUT", help="SequenceFiles, folders of them, or URIs")
    p.add_argument("-o", "--output", metavar="OUT", help="output folder or URI (s3://, hdfs://, file://) of part-* files")
    if d.input == "seqfile" and split_size:
        p.add_argument("--split-size", default=str(DEFAULT_SPLIT), metavar="SIZE",
                       help=f"bytes of SequenceFile per task (default 32MiB, at least {limits.MIN_SPLIT_SIZE >> 10}KiB)")
    for option in d.launcher_options:
        p.add_argument(option.name, **option.kwargs())
    return p


def prepare(kind, argv, engine, made_by, folder, here=True, add_options=None):
    """Everything the launcher settles before any task: ``o``, a namespace of the options, plus

    ``o.declaration``, ``o.items`` (splits or slab lines), ``o.out`` (the
    output transaction, checked), ``o.side`` (``[(option, local path,
    name)]``: the side files to ship) and ``o.task`` (the options the tasks
    take, side files by name).

    Parameters
    ----------
    kind : str
        The workload's name.
    argv : list of str
    engine : str
        Its name in ``--engine`` (``"dask"``); messages say "the Dask engine".
    made_by : str
        The command an earlier output must be from to be replaced.
    folder : str
        Where side files named by URIs are fetched to.
    here : bool
        The tasks run on this machine: ``--device gpu`` is refused now where there is no GPU.
    add_options : callable, optional
        ``add_options(parser)``: the engine's own options.
    """
    from ..io.remote import locate
    from ..sizes import parse_size
    d = get(kind)
    title = f"the {engine.title()} engine"
    for a in argv:
        if a.partition("=")[0] in MRJOB_ONLY:
            raise GpumrError(f"{a}: an mrjob runner option; {title} does not take it")
    p = parser(kind, engine)
    if add_options:
        add_options(p)
    o = declare.parse(d, argv, p)
    o.declaration = d
    require(o.output)
    if d.input == "seqfile":
        require(inputs=o.inputs)
        try:
            o.split_size = parse_size(o.split_size)
        except ValueError as exc:
            raise GpumrError(f"--split-size: {exc}") from None
        limits.number("--split-size", o.split_size, limits.MIN_SPLIT_SIZE, integer=True)
    d.check_limits(o)  # before the output is checked or anything listed
    inputs = getattr(o, "inputs", [])
    o.out = open_output(o.output, made_by, [*inputs, *(path for _, path in d.side_files(o))])
    for option, value in d.side_files(o):
        loc = locate(value)
        if loc.is_uri:  # file:///PATH: the path; any other URI: a local copy, shipped
            local = loc.local
            if local is None:
                local = os.path.join(folder, option.lstrip("-"), loc.name or "file")
                fetch_side_file(value, local)
            declare.apply(o, {option: local})
    d.check(o)
    o.items = plan_splits(inputs, o.split_size, title) if d.input == "seqfile" else d.plan(o)
    o.side, names = [], set()  # each side file's (option, path, name): shipped files are found by name
    for option, path in sorted(d.side_files(o)):
        name = os.path.basename(path)
        if name in names:
            raise GpumrError(f"{option} {path}: another shipped file has the name {name}")
        names.add(name)
        o.side.append((option, os.path.abspath(path), name))
    o.task = {opt.dest: getattr(o, opt.dest) for opt in d.all_options()}
    o.task.update({option.lstrip("-").replace("-", "_"): name for option, _, name in o.side})
    if o.device == "gpu" and here:
        from ..devices.chooser import require_gpu
        require_gpu()
    return o


def add_up(parts):
    """The sum of the counters of each part (``{counter: n}`` dicts)."""
    counts = {}
    for part in parts:
        for name, n in part.items():
            counts[name] = counts.get(name, 0) + n
    return counts


# -- in the tasks ---------------------------------------------------------------------------------------
# One workload per task process (engines reuse processes across tasks), keyed by its options.
_WORKLOADS = {}
_SAID = set()


def workload(kind, task_options, locate):
    """The workload of ``kind`` for ``task_options`` in this process: built (for CT: projections filtered) once.

    ``locate(name)`` is this process's path of the shipped side file ``name``.
    """
    key = (kind, tuple(sorted((k, repr(v)) for k, v in task_options.items())))
    got = _WORKLOADS.get(key)
    if got is None:
        d = get(kind)
        o = argparse.Namespace(**task_options)
        for opt, _ in d.side_files(o):
            dest = opt.lstrip("-").replace("-", "_")
            setattr(o, dest, locate(getattr(o, dest)))
        got = _WORKLOADS[key] = (o, d.make(o))
    return got


class Task:
    """One task's run over its items: device choice per record, output lines, counters.

    Parameters
    ----------
    kind : str
    task_options : dict
        ``o.task`` from :func:`prepare`.
    locate : callable
        See :func:`workload`.
    gpus : list of int, optional
        The only GPUs this task may use (the engine assigned them), else any free one.

    Attributes
    ----------
    counts : dict
        The gpumr counters, complete once :meth:`lines` is exhausted.
    """

    def __init__(self, kind, task_options, locate, gpus=None):
        from ..boundary import install
        install()  # the workload's warnings (a geometry's field of view) as gpumr's one-line warnings
        self.kind = kind
        self.o, self.workload = workload(kind, task_options, locate)
        self.gpus = gpus
        self.counts = {}

    def count(self, name, n=1):
        self.counts[name] = self.counts.get(name, 0) + n

    @staticmethod
    def log(message):
        """A line to the task's stderr, once per process (a process runs many tasks that say the same)."""
        if message not in _SAID:
            _SAID.add(message)
            print(message, file=sys.stderr, flush=True)

    def lines(self, items):
        """Yield the ``"key"<TAB>json`` line of every output of ``items`` (splits or slab lines), each once."""
        from mrjob.protocol import JSONProtocol

        from ..core import Processor
        from ..devices.chooser import DeviceChooser, describe
        from ..io.records import process
        o = self.o
        chooser = DeviceChooser(o.device, memory=o.gpu_memory, slots=o.gpu_slots, only=self.gpus)
        self.log(f"gpumr: {describe(chooser)}")
        processor = Processor(self.workload, chooser, count=self.count, log=self.log)
        write = JSONProtocol().write
        try:
            for item in items:
                if isinstance(item, str):  # a line of the launcher's plan
                    outputs = processor.feed(item, item)
                else:
                    outputs = process(processor, read_records(item, o.max_record_size))
                for k, v in outputs:
                    yield write(k, v).decode("utf-8")
            for k, v in processor.flush():
                yield write(k, v).decode("utf-8")
        finally:
            chooser.close()
