"""The one task runtime: how every task of every engine runs its records.

A task builds the workload once per process from the job's :class:`Spec`, runs the records of its items
(:mod:`gpumr.tasks.items`) through :class:`gpumr.core.Processor` and writes their lines into the output's stage, so
that every engine gives the same output, counters and messages."""

import argparse
import hashlib
import json
import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass, field

from ..boundary import install
from ..core.counters import BAD, outcome
from ..errors import GpumrError
from ..io.joboutput import line
from ..log import logger, say_once, set_verbosity
from . import output
from .items import Record, Split, describe

log = logger(__name__)

#: Bad records a task names back to the launcher (the summary names the first few of the job).
BAD_NAMED = 5


@dataclass
class Spec:
    """What every task of one job needs, made once by the launcher; JSON, so that any engine can carry it.

    Attributes
    ----------
    workload : list
        The :class:`gpumr.workloads.Ref` fields ``[name, ref, file, how]`` (``file`` None: a task finds a shipped
        module by ``module``).
    options : dict
        Every option's value by ``dest``; a side file's value is its content name.
    side : dict
        ``{content name: size}`` of the files shipped to the tasks.
    module : str or None
        The content name of the user's module, shipped among ``side``.
    stage : str or None
        The output transaction's hidden stage, which tasks write into.
    verbosity : {"quiet", "info", "debug"}
    progress : str or None
        A folder on the launcher's machine where tasks there report progress.
    job : str
        The job's token: attempt names and engine keys start with it.
    owners : list of str
        The sockets of the job's GPU owners on the launcher's machine (:mod:`gpumr.tasks.owner`), where they run."""

    workload: list
    options: dict
    side: dict = field(default_factory=dict)
    module: str = None
    stage: str = None
    verbosity: str = "info"
    progress: str = None
    job: str = field(default_factory=lambda: secrets.token_hex(6))
    owners: list = field(default_factory=list)

    def to_json(self):
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    @property
    def key(self):
        """What identifies the built workload in a process: everything but where output goes."""
        return json.dumps([self.workload, self.module, self.options, self.side], sort_keys=True)


def here(name):
    """Find a shipped file where the launcher left it (engines whose tasks share its filesystem): itself."""
    return name


class SideFiles:
    """How a task finds the side files its engine put on its node: ``find(name)`` is ``name`` in the first of
    ``folders`` that holds it (the first folder where none does, so that the error names where it should be).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
    ...     _ = open(os.path.join(b, "x"), "w").close()
    ...     SideFiles(a, b)("x") == os.path.join(b, "x")
    True
    """

    def __init__(self, *folders):
        self.folders = tuple(f for f in folders if f)

    def __call__(self, name):
        for folder in self.folders:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
        return os.path.join(self.folders[0] if self.folders else "", name)


#: Workloads a process keeps built at once (a worker serving several jobs): the least recently used goes first.
KEEP_BUILT = 2
_BUILT = {}


#: Side files whose content this process checked: ``(path, device, inode, size, mtime, ctime)`` of each, as read.
_CHECKED = set()
_HASH_CHUNK = 4 << 20
#: Reads of a side file whose inode changed while it was read (another job hard-linking the node's copy) before it is
#: refused as changing.
_READS = 3


def _signature(st, path):
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _verified(name, find, size):
    """This node's path of shipped file ``name``, its size and content checked: ``size`` bytes whose SHA-256 its
    content name holds (:func:`gpumr.launch.ship.content_name`); a copy cut short, changed or swapped is never used."""
    path = find(name)
    got = os.path.getsize(path) if os.path.isfile(path) else None
    deadline = time.monotonic() + 30
    while got != size and time.monotonic() < deadline:  # (a copy still arriving: another job shipping it)
        time.sleep(0.2)
        got = os.path.getsize(path) if os.path.isfile(path) else None
    if got != size:
        raise GpumrError(f"the shipped file {name} is {'missing' if got is None else f'{got} bytes'} on this node, "
                         f"not the {size} bytes the launcher shipped")
    if _signature(os.stat(path), path) in _CHECKED:
        return path
    from ..io.remote import locate
    buffer = memoryview(bytearray(_HASH_CHUNK))
    for _ in range(_READS):
        h = hashlib.sha256()
        with locate(path).open_input() as f:  # (a regular file, never waited on)
            before = os.fstat(f.fileno())
            for n in iter(lambda: f.readinto(buffer), 0):
                h.update(buffer[:n])
            after = os.fstat(f.fileno())
        if _signature(before, path) == _signature(after, path):
            break  # (else another job linked or touched it while it was read: read again)
    if _signature(before, path) != _signature(after, path) or not h.hexdigest().startswith(name.partition("-")[0]):
        raise GpumrError(f"the shipped file {name} on this node is not what the launcher shipped (its SHA-256 is not "
                         "the one its name holds): changed since it was shipped")
    _CHECKED.add(_signature(after, path))
    return path


def _unchanged(paths, sizes):
    """Raise unless every checked side file in ``paths`` still holds what was checked (a workload read it meanwhile)."""
    for name, path in paths.items():
        if _signature(os.stat(path), path) not in _CHECKED:
            try:
                _verified(name, lambda _: path, sizes[name])
            except GpumrError:
                raise GpumrError(f"the shipped file {name} changed on this node while the task read it") from None


def built(spec, find=here):
    """``(options, workload)`` for ``spec`` in this process: the options with side files at this node's paths, and the
    workload set up (:meth:`gpumr.Workload.setup`), once per process per spec content and paths of its files (a worker
    serving several jobs keeps the last :data:`KEEP_BUILT`)."""
    from ..workloads import Ref, load
    paths = {name: find(name) for name in spec.side}
    key = json.dumps([spec.key, paths], sort_keys=True)
    got = _BUILT.pop(key, None)
    if got is not None:
        _BUILT[key] = got  # (the most recently used last)
        return got
    ref = Ref(*spec.workload)
    paths = {name: _verified(name, find, size) for name, size in spec.side.items()}
    cls = load(ref, paths[spec.module] if spec.module else None)
    options = argparse.Namespace(**spec.options)
    for opt in cls.options:
        value = getattr(options, opt.dest, None)
        if opt.side_file and value is not None:
            setattr(options, opt.dest, paths[value])
    workload = cls()
    workload.setup(options)
    _unchanged(paths, spec.side)  # (what setup read is what was checked)
    while len(_BUILT) >= KEEP_BUILT:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = (options, workload)
    return options, workload


class Task:
    """One task's run over its items: device choice per record, output values, counters.

    Parameters
    ----------
    spec : Spec
    find : callable
        ``find(name)``: this node's path of the shipped file ``name``.
    gpus : list of int, optional
        The only GPUs this task may use (the engine assigned them), else any free one.
    attempt : str, optional
        This attempt's name (its files in the stage); a new one by default.
    count : callable, optional
        Also told each counter change (mrjob's counters).

    Attributes
    ----------
    counts : dict
        The gpumr counters, complete once the items are done.
    bad : list of (str, str)
        The first :data:`BAD_NAMED` bad records' keys and reasons.
    arrays : gpumr.tasks.output.Arrays"""

    def __init__(self, spec, find=here, gpus=None, attempt=None, count=None):
        install()
        set_verbosity(quiet=spec.verbosity == "quiet", verbose=spec.verbosity == "debug")
        self.spec = spec
        self.options, self.workload = built(spec, find)
        self.gpus = gpus
        self.attempt = attempt or f"{spec.job}-{secrets.token_hex(6)}"
        self.counts, self.bad = {}, []
        self._tell = count
        self.arrays = output.Arrays(spec.stage, self.attempt)
        from .progress import TaskProgress
        self.progress = TaskProgress(spec.progress)

    def count(self, name, n=1):
        self.counts[name] = self.counts.get(name, 0) + n
        self.progress.count(name, n)
        if self._tell is not None:
            self._tell(name, n)

    def _line(self, key, value):
        """The output line of one record's output value (:meth:`gpumr.core.Processor.process`), counted; a result
        that cannot be written (not JSON, its arrays not writable) is that record's error line."""
        if "error" not in value:
            try:
                value = self.arrays.encode(key, value)
                if value["device"] != "cpu" and self._simulated:
                    value = {**value, "simulated": True}
                text = line(key, value)
            except (TypeError, ValueError) as exc:
                value = {"error": f"the result is not JSON: {exc}"}
            except Exception as exc:  # noqa: BLE001 (one record's arrays not written must not end the task)
                from ..core.processor import reason_of
                value = {"error": f"its arrays were not written: {reason_of(exc)}"}
            else:
                self.count(outcome(value))
                return text
        self.count(BAD)
        if len(self.bad) < BAD_NAMED:
            self.bad.append((key, value["error"]))
        return line(key, value)

    def _processor_for(self, chooser):
        from ..core import Processor
        from .owned import OwnedChooser
        if isinstance(chooser, OwnedChooser):  # (the owner set the GPU path up: every GPU batch goes there)
            from .owned import Owned
            say_once(log, f"{self.workload.name}: GPU batches run in the job's GPU owner, on "
                          f"gpu:{chooser.client.gpu.index}", logging.DEBUG)
            self._simulated = chooser.simulated
            return Processor(Owned(Said(self.workload), chooser, self.arrays), self.options, chooser,
                             lambda choice: choice, self.count)
        device_for, why = None, chooser.why_cpu_only
        if chooser.has_gpus and self.workload.has_gpu():
            why = self.workload.gpu_ready(self.options, chooser.simulated)
            if why is None:
                from ..gpu.kernels import describe as kernels
                from .device import Device
                device_for = Device
                say_once(log, kernels(), logging.INFO)  # (where each kernel comes from)
                if chooser.simulated:
                    say_once(log, f"{self.workload.name}: GPUs are simulated; their CUDA kernels run on the host",
                             logging.INFO)
        elif chooser.has_gpus:
            why = f"{self.workload.name} has no GPU path"
        if device_for is None:
            say_once(log, f"{self.workload.name}: every record runs on the CPU ({why})", logging.DEBUG)
        self._simulated = chooser.simulated
        return Processor(Said(self.workload), self.options, chooser, device_for, self.count)

    def open(self):
        """Start: device choice set up for this task (a connection to the scheduler service, leases, or to the job's
        GPU owner)."""
        from ..devices.chooser import DeviceChooser, describe
        options = self.options
        self._chooser = DeviceChooser(options.device, memory=options.gpu_memory, slots=options.gpu_slots,
                                      only=self.gpus)
        say_once(log, describe(self._chooser), logging.DEBUG)
        if self.spec.owners and self._chooser.has_gpus and self.workload.gpu_owner and self.gpus is None:
            from .owned import OwnedChooser, connect
            client = connect(self.spec.owners, self.attempt)
            if client is not None:
                self._chooser = OwnedChooser(client, self._chooser)
        self._processor = self._processor_for(self._chooser)

    def feed(self, item):
        """Yield the output lines of one item (a split's records, or one record) that are ready."""
        from ..io.records import process, read_split
        if isinstance(item, Record):
            yield from self._lines(self._processor.feed(item.key, item.value))
        elif isinstance(item, Split):
            done = self.progress.counts["input bytes"]
            records = read_split(item.path, item.start, item.end, item.path,
                                 max_record_size=self.options.max_record_size)
            yield from self._lines(process(self._processor, records,
                                           at=lambda at: self.progress.set_bytes(done + at - item.start)))
            if item.end is not None:
                self.progress.set_bytes(done + item.end - item.start)
        else:
            raise GpumrError(f"a task item of unknown kind {type(item).__name__}")

    def refuse(self, key, reason):
        """The error line of a record that cannot be given to the workload (counted as bad)."""
        return self._line(*self._processor.bad(key, reason))

    def close(self):
        """Yield the lines of the records still waiting, then end the task's device choice and progress."""
        try:
            yield from self._lines(self._processor.flush())
            self.arrays.close()
        finally:
            self._chooser.close()
            self.progress.close()

    def lines(self, items):
        """Yield the output line (:func:`gpumr.io.joboutput.line`) of every record of ``items`` (splits or
        records), each exactly once."""
        self.open()
        ended = False
        try:
            for item in items:
                yield from self.feed(item)
            ended = True
            yield from self.close()
        finally:
            if not ended:
                self._chooser.close()
                self.progress.close()

    def _lines(self, outputs):
        """The output line of each of the processor's outputs."""
        for key, value in outputs:
            yield self._line(key, value)


class Said:
    """The workload as a task's processor runs it: each record's decode and computation inside
    :func:`gpumr.tasks.stderr.captured`, so what a library writes to fd 2 meanwhile is the record's."""

    def __init__(self, workload):
        self.workload = workload

    def __getattr__(self, name):
        return getattr(self.workload, name)

    def load(self, key, value, options):
        return self._run([key], lambda: self.workload.load(key, value, options))

    def cpu_batch(self, records, options):
        return self._run([k for k, _ in records], lambda: list(self.workload.cpu_batch(records, options)))

    def gpu_batch(self, records, options, device):
        return self._run([k for k, _ in records], lambda: list(self.workload.gpu_batch(records, options, device)))

    def finish(self, key, result, options):
        from ..core.workload import Workload
        if type(self.workload).finish is Workload.finish:  # (the contract's own: the result as it is)
            return result
        return self._run([key], lambda: self.workload.finish(key, result, options))

    @staticmethod
    def _run(keys, call):
        from ..core.badrecord import BadRecord
        from .stderr import captured
        text = []
        try:
            with captured() as text:
                result = call()
        except BadRecord as exc:
            if text and text[0] and len(keys) == 1:
                raise BadRecord(f"{exc} ({text[0]})") from None
            _said(keys, text)
            raise
        except BaseException:
            _said(keys, text)
            raise
        _said(keys, text)
        return result


def _said(keys, text):
    """A debug line naming the records ``keys`` with what was written to fd 2 while they ran, if anything was."""
    if text and text[0]:
        shown = ", ".join(map(repr, keys[:3])) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        log.debug("record%s %s: written to stderr while it ran: %s", "s" if len(keys) > 1 else "", shown, text[0])


def map_task(spec, index, items, sort, find=here, gpus=None):
    """Run one task over ``items``; write its lines into the stage as this attempt's file; return what the launcher
    needs: the file (``name``, ``size``, ``sha``), its key ``sample`` (sorted runs), ``counts``, ``bad``, ``arrays``."""
    t0 = time.perf_counter()
    task = Task(spec, find, gpus)
    log.debug("task %d started: %s", index, describe(items))
    lines = task.lines(items)
    if sort:
        lines = sorted(lines)
    name = f"{'map' if sort else 'part'}-{index:05d}.attempt-{task.attempt}"
    size, sha, sample = output.write_lines(spec.stage, name, lines, output.SAMPLES if sort else 0)
    log.debug("task %d done in %.1f s: %s", index, time.perf_counter() - t0, task.counts)
    return {"index": index, "name": name, "size": size, "sha": sha, "sample": sample, "counts": task.counts,
            "bad": task.bad}


def reduce_task(spec, index, runs, low, high):
    """Merge the sorted runs ``[(name, sample)]`` over keys in ``[low, high)`` into part ``index``'s attempt file."""
    install()
    set_verbosity(quiet=spec.verbosity == "quiet", verbose=spec.verbosity == "debug")
    name = f"part-{index:05d}.attempt-{spec.job}-{secrets.token_hex(6)}"
    size, sha, _ = output.write_lines(spec.stage, name, output.merge(spec.stage, runs, low, high))
    return {"index": index, "name": name, "size": size, "sha": sha}


