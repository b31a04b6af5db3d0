"""The mrjob engine: what every gpumr job shares, and running one from Python.

A job (``jobs/``, or :class:`gpumr.engines.mrjob_task.MRWorkload` with
``--workload NAME``) names a declared workload (:mod:`gpumr.workloads`);
:class:`GpumrJob` takes its options, checks and record function from the
declaration and wires them to the record-processing core. Map tasks read
whole SequenceFiles (URIs through :mod:`gpumr.io.remote`, left to the task
by :func:`_read_uris_in_tasks`) or, with ``--hadoop-splits``, Hadoop's
splits; the reducer is the identity. The launcher checks before any task,
shows progress on this machine and ends with one summary line. Running it:
:doc:`/how-to/hadoop`, :doc:`/how-to/emr`, :doc:`/how-to/remote-data`.
"""

import os
import shutil
import sys
import tempfile
import time

from mrjob.fs.base import Filesystem
from mrjob.job import MRJob
from mrjob.protocol import JSONProtocol, RawValueProtocol
from mrjob.step import MRStep

from ..boundary import UsageError, logger, set_verbosity
from ..core import GROUP, Processor
from ..core.counters import summary, total
from ..errors import GpumrError
from ..io.inputs import describe_file, expand_inputs, expand_sized, looks_like_sequencefile
from ..io.records import DEFAULT_MAX_RECORD_SIZE
from ..io.remote import ANY_URI, list_files, locate
from . import progress
from .common import require

TEXT_INPUT_FORMAT = "org.apache.hadoop.mapred.SequenceFileAsTextInputFormat"
#: The switches mrjob gives a job it runs as a task.
_TASK_SWITCHES = frozenset(("--mapper", "--reducer", "--combiner", "--step-num", "--spark"))
#: Runners whose tasks run on this machine, where the launcher can show their progress.
LOCAL_RUNNERS = ("inline", "local")
#: The manifest wrapper's "download" command for a URI (run as ``CMD URI PATH``): an empty file at PATH
#: only; the task reads the URI itself (:meth:`GpumrJob.mapper_raw`).
_LEAVE_TO_TASK = "sh -c ': > \"$2\"' gpumr-reads-uri"


def option_value(args, option):
    """The value of ``option`` in a command line (``--opt V`` or ``--opt=V``), or None."""
    for i, a in enumerate(args):
        if a == option and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(option + "="):
            return a[len(option) + 1:]
    return None


def with_option(args, option, value):
    """``args`` with ``option`` set to ``value`` (replaced where present, else appended)."""
    out, i, done = [], 0, False
    while i < len(args):
        a = args[i]
        if a == option and i + 1 < len(args):
            out += [option, value]
            i, done = i + 2, True
            continue
        if a.startswith(option + "="):
            out.append(f"{option}={value}")
            done = True
        else:
            out.append(a)
        i += 1
    return out if done else out + [option, value]


class GpumrJob(MRJob):
    """Mapper over records through :class:`gpumr.core.Processor`; identity reducer.

    Subclasses set :attr:`WORKLOAD`; the options, their checks and the
    workload come from its declaration (:mod:`gpumr.core.declare`).
    """

    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol
    #: The declared workload's name (:mod:`gpumr.workloads`); None: given by ``--workload NAME``.
    WORKLOAD = None

    def __init__(self, args=None):
        from ..workloads import get
        self._from_command_line = args is None
        args = list(sys.argv[1:] if args is None else args)
        #: The workload's declaration (:class:`gpumr.core.declare.Declaration`): options, checks, record function.
        self.declaration = get(self.WORKLOAD or option_value(args, "--workload") or "faces")
        if not _TASK_SWITCHES.intersection(a.partition("=")[0] for a in args):
            args = self.prepare_args(args)
        super().__init__(args)

    @property
    def INPUT_KIND(self):
        """"seqfile": records are SequenceFile records; "lines": each input line is a record (a slab plan)."""
        return "seqfile" if self.declaration.input == "seqfile" else "lines"

    def load_args(self, args):
        if self._from_command_line:
            # mrjob makes a bad option raise ValueError when given a list of arguments; from the command
            # line (the list is only the rewritten sys.argv), the error boundary's one line and exit status 1.
            prog = self.arg_parser.prog

            def error(message):
                raise UsageError(f"{message} (see {prog} --help)")
            self.arg_parser.error = error
        super().load_args(args)

    def _usage(self):
        # mrjob's usage line, with what the job does (the declaration's summary).
        inputs = "" if self.INPUT_KIND == "seqfile" else (
            " INPUT: plan files of slab lines \"z0 z1\" (gpumr ct plan; gpumr run makes them itself).")
        return f"%(prog)s [options] INPUT... [--output-dir OUT]\n\n{self.declaration.summary}{inputs}"

    def prepare_args(self, args):
        """Rewrite the launcher's command line before it is parsed (:meth:`Declaration.prepare`).

        Runs only where the job is launched, not in tasks: mrjob passes the
        rewritten values on to the tasks (and ships files named by file options).
        """
        values = {opt.name: option_value(args, opt.name) for opt in self.declaration.options}
        for name, value in self.declaration.prepare(values).items():
            args = with_option(args, name, value)
        return args

    def configure_args(self):
        super().configure_args()
        if self.WORKLOAD is None:
            self.add_passthru_arg("--workload", default="faces", help="the declared workload to run (gpumr run)")
        for opt in self.declaration.all_options():
            if opt.side_file:
                self.add_file_arg(opt.name, **opt.kwargs())
            else:
                self.add_passthru_arg(opt.name, **opt.kwargs())
        if self.INPUT_KIND == "seqfile":
            self.add_passthru_arg("--hadoop-splits", action="store_true",
                                  help="let Hadoop read and split the SequenceFiles (hadoop/emr runners)")

    def make_workload(self):
        """The :class:`gpumr.core.Workload` each task runs (:meth:`Declaration.make`)."""
        return self.declaration.make(self.options)

    # -- the launcher's side ---------------------------------------------
    def check_options(self):
        """Stop before any task starts if an option or input cannot work.

        Raises
        ------
        GpumrError
            Naming the option or input and what is wrong with it.
        """
        self.declaration.check_limits(self.options)  # before anything is listed or read
        local = [p for p in self.options.args if not locate(p).is_uri]
        require(inputs=self.options.args)
        files = expand_inputs(local) if local else []
        uris = [p for p in self.options.args if locate(p).is_uri]
        if uris and self.runs_here:
            expand_inputs(uris)  # listed through gpumr.io.remote (for Hadoop, mrjob lists them with hadoop fs)
        # (With --hadoop-splits, Hadoop reads the files, and says so itself when one is not a SequenceFile.)
        if self.INPUT_KIND == "seqfile" and not self.options.hadoop_splits and local and not any(
                looks_like_sequencefile(f) for f in files):
            shown = ", ".join(f"{f} ({describe_file(f)})" for f in files[:3]) + (" ..." if len(files) > 3 else "")
            raise GpumrError(f"no SequenceFile among the inputs: {shown}; pack files first: "
                             f"gpumr pack {local[0]} -o {local[0].rstrip('/')}.seq")
        out = self.options.output_dir
        if self.runs_here and out and not locate(out).is_uri and os.path.lexists(out) \
                and not (os.path.isdir(out) and not os.path.islink(out) and not os.listdir(out)):
            # mrjob's runners on this machine would write part-NNNNN into it over whatever is there.
            raise GpumrError(f"--output-dir {out}: already exists and is not an empty folder; choose a new folder "
                             "(gpumr never writes over files it did not make; Hadoop refuses an existing output "
                             "folder too)")
        self.declaration.check(self.options)

    @property
    def runs_here(self):
        """Whether the tasks run on this machine: mrjob's inline runner (its default) or its local one."""
        return (self.options.runner or "inline") in LOCAL_RUNNERS

    def check_this_node(self):
        """The checks that need the machine the tasks run on, made here when they run here.

        With the inline and local runners the tasks run on this machine, so
        ``--device gpu`` without a GPU is refused before any task starts;
        elsewhere (Hadoop, EMR) each task refuses it itself, with one line.

        Raises
        ------
        GpumrError
        """
        if self.options.device == "gpu" and self.runs_here:
            from ..devices.chooser import require_gpu
            require_gpu()

    def _input_bytes(self):
        try:
            sizes = [size for _, size in expand_sized(self.options.args)]
        except (GpumrError, OSError):
            return None
        return None if None in sizes else sum(sizes)

    def _check(self):
        """:meth:`check_options` and :meth:`check_this_node`, once per job object (they read the inputs'
        listings, the cascade, the projections: too much to do twice before the same run)."""
        if not getattr(self, "_checked", False):
            self.check_options()
            self.check_this_node()
            self._checked = True

    def make_runner(self):
        """mrjob's runner, after the checks (:meth:`_check`); on this machine, ``--reducers`` is honoured."""
        self._check()
        runner = super().make_runner()
        if self.runs_here and self.options.reducers > 0:
            _limit_sim_reducers(runner, self.options.reducers)
        if self.INPUT_KIND == "seqfile" and not self.options.hadoop_splits:
            _read_uris_in_tasks(runner)
        return runner

    def _runner_kwargs(self):
        kwargs = super()._runner_kwargs()
        folder = getattr(self, "_progress_folder", None)
        if folder:
            kwargs["cmdenv"] = dict(kwargs.get("cmdenv") or {}, **{progress.PROGRESS_ENV: folder})
        return kwargs

    def run_job(self):
        """``python -m gpumr.jobs.X ...``: check, run with progress, print the counters' summary.

        As mrjob's own ``run_job`` (log set-up, a failed step exits 1, output
        to stdout unless ``--output-dir``), plus the checks before any task
        starts, the progress display on this machine and the summary line at
        the end. A refusal, a failed step or a task's error raised in this
        process (the inline runner) goes up to the error boundary
        (:mod:`gpumr.boundary`): one line, exit status 1.
        """
        import codecs

        from mrjob.step import StepFailedException
        set_verbosity(quiet=self.options.quiet, verbose=self.options.verbose)  # mrjob's -q/-v, for gpumr's lines
        self._check()  # (a refusal is the boundary's one line, exit status 1)
        self.set_up_logging(quiet=self.options.quiet, verbose=self.options.verbose,
                            stream=codecs.getwriter("utf_8")(self.stderr))
        if self.runs_here and self.options.device != "cpu":
            from ..gpu.kernels import cache_dir
            cache_dir()  # a kernel cache gpumr may not use is said here, once, before any task (gpumr.trusted)
        self._progress_folder = tempfile.mkdtemp(prefix="gpumr-progress-") if self.runs_here else None
        t0 = time.perf_counter()
        try:
            with self.make_runner() as runner:
                try:
                    if self._progress_folder and not self.options.quiet:
                        with progress.Display(self._progress_folder, self._input_bytes(), label=type(self).__name__):
                            runner.run()
                    else:
                        runner.run()
                except StepFailedException as exc:
                    raise GpumrError(str(exc)) from None
                if self._should_cat_output():
                    for chunk in runner.cat_output():
                        self.stdout.write(chunk)
                    self.stdout.flush()
                counts = total(runner.counters())
        finally:
            if self._progress_folder:
                shutil.rmtree(self._progress_folder, ignore_errors=True)
        logger(__name__).info(summary(counts, time.perf_counter() - t0))

    # -- steps -----------------------------------------------------------
    def steps(self):
        mapper = dict(mapper_init=self.task_init, mapper_final=self.task_final)
        if self.INPUT_KIND == "lines":
            mapper["mapper"] = self.mapper_line
        elif self.options.hadoop_splits:
            mapper["mapper"] = self.mapper_text
        else:
            mapper["mapper_raw"] = self.mapper_raw
        if self.options.reducers == 0:
            return [MRStep(**mapper)]
        return [MRStep(reducer=self.reducer, **mapper)]

    def hadoop_input_format(self):
        if self.INPUT_KIND == "seqfile" and self.options.hadoop_splits:
            return TEXT_INPUT_FORMAT
        return None

    def jobconf(self):
        conf = dict(super().jobconf())
        conf["mapreduce.job.reduces"] = str(self.options.reducers)
        return conf

    def _non_option_kwargs(self):
        # mrjob's sim runners give mapper_raw a local directory as one input;
        # list its SequenceFiles so that each becomes a map task of its own.
        kwargs = super()._non_option_kwargs()
        if self.INPUT_KIND != "seqfile":
            return kwargs
        paths = []
        for p in kwargs["input_paths"]:
            # (A URI folder for Hadoop is listed by mrjob's own `hadoop fs -ls`, one JVM, not one per file.)
            paths += expand_inputs([p]) if (self.runs_here if locate(p).is_uri else os.path.isdir(p)) else [p]
        kwargs["input_paths"] = paths
        return kwargs

    # -- tasks -----------------------------------------------------------
    def task_init(self):
        from ..devices.chooser import DeviceChooser, describe
        workload = self.make_workload()
        # Without --gpu-memory each batch asks for what it needs (the workload's gpu_memory_for).
        self.chooser = DeviceChooser(self.options.device, memory=self.options.gpu_memory, slots=self.options.gpu_slots,
                                     log=self.log)
        self.log(f"gpumr: {describe(self.chooser)}")
        from ..gpu.kernels import describe as kernels
        self.log(f"gpumr: {kernels()}")
        self.progress = progress.TaskProgress()
        self.processor = Processor(workload, self.chooser, log=self.log, count=self.count)

    def count(self, name, n=1):
        """Add to a gpumr counter (Hadoop's counters, and this machine's progress display)."""
        self.increment_counter(GROUP, name, n)
        self.progress.count(name, n)

    def log(self, message):
        """One line to the task's log (stderr; mrjob's stream is binary)."""
        self.stderr.write((message + "\n").encode("utf-8", "replace"))
        self.stderr.flush()

    def task_final(self):
        yield from self.processor.flush()
        self.chooser.close()
        self.progress.close()

    def mapper_raw(self, path, uri):
        """Read a whole SequenceFile here; a stretch that cannot be read becomes an error line.

        ``path`` is mrjob's local copy of input ``uri``, except where the URI
        was left to the task: then ``path`` is the URI itself (inline runner)
        or an empty placeholder (:func:`_read_uris_in_tasks`), and the URI is
        read through :mod:`gpumr.io.remote`. (A real SequenceFile is never
        empty; an empty one read at its URI is reported the same way.)
        """
        from ..io.records import process, read_split, size

        source = path
        if locate(uri).is_uri and (locate(path).is_uri or os.path.getsize(path) == 0):
            source = uri
            why = locate(uri).unavailable()
            self.log(f"gpumr: reading {uri} " + (f"through hadoop fs -copyToLocal ({why})" if why
                                                  else "through pyarrow"))
        done = self.progress.counts["input bytes"]
        cap = getattr(self.options, "max_record_size", None) or DEFAULT_MAX_RECORD_SIZE
        yield from process(self.processor, read_split(source, name=uri, max_record_size=cap),
                           at=lambda offset: self.progress.set_bytes(done + offset))
        self.progress.set_bytes(done + (size(source) or 0))

    def mapper_text(self, _, line):
        """One ``key<TAB>hex bytes`` line from SequenceFileAsTextInputFormat."""
        key, _, hexed = line.partition("\t")
        try:
            value = bytes.fromhex(hexed)
        except ValueError:
            yield self.processor.bad(key, "value is not the hex text SequenceFileAsTextInputFormat gives")
            return
        yield from self.processor.feed(key, value)

    def mapper_line(self, _, line):
        """One text line is one record (its own key, for error reports)."""
        yield from self.processor.feed(line, line)

    def reducer(self, key, values):
        for value in values:
            yield key, value


class _UriFilesystem(Filesystem):
    """mrjob's view of URIs through :mod:`gpumr.io.remote`, for the inline and local runners (local paths only)."""

    def can_handle_path(self, path):
        return locate(path).is_uri

    def ls(self, path_glob):
        for uri, _ in list_files(path_glob):
            yield uri

    def exists(self, path_glob):
        try:
            return bool(list_files(path_glob))
        except GpumrError:
            return False

    def du(self, path_glob):
        return sum(size or 0 for _, size in list_files(path_glob))


def _read_uris_in_tasks(runner):
    """Make ``runner``'s manifest path hand each input URI to its map task instead of copying it first.

    mrjob's wrapper runs one download command per URI before the task
    (``hadoop fs -copyToLocal``: a JVM per file); it becomes
    :data:`_LEAVE_TO_TASK`, and the task reads the URI (:meth:`GpumrJob.mapper_raw`).
    The inline and local runners also get a filesystem for URIs, for
    mrjob's input checks and the manifest's listing.
    """
    if hasattr(runner, "_manifest_download_commands"):
        runner._manifest_download_commands = lambda: [(ANY_URI, _LEAVE_TO_TASK)]
    if runner.alias in LOCAL_RUNNERS:
        runner.fs.add_fs("gpumr", _UriFilesystem())


def _limit_sim_reducers(runner, n):
    """Make an inline/local runner run at most ``n`` reduce tasks, as Hadoop would run exactly ``n``.

    mrjob's simulated runners ignore ``mapreduce.job.reduces`` and cut the
    sorted reducer input into about twice as many pieces as there are cores.
    This replaces that cut, for this runner only, by one into at most ``n``
    pieces of near-equal bytes that never part the records of one key.
    """
    def split_reducer_input(step_num):
        path = runner._sorted_reducer_input_path(step_num)
        budget = os.path.getsize(path) / n
        files = runner._yield_split_fileobjs("reducer", step_num)
        tasks, used, last_key, dest = 0, 0, None, None
        with open(path, "rb") as src:
            for line in src:
                key = line.split(b"\t", 1)[0]
                if dest is None or (used >= budget * tasks and key != last_key and tasks < n):
                    if dest is not None:
                        dest.close()
                    dest = next(files)
                    tasks += 1
                dest.write(line)
                used += len(line)
                last_key = key
        if dest is None:  # empty input: one empty task, as mrjob does
            next(files).close()
            return 1
        dest.close()
        return tasks

    runner._split_reducer_input = split_reducer_input


def run_job(job_class, inputs, output_dir, runner="local", extra=(), conf=None):
    """Run a gpumr job through mrjob from Python.

    Parameters
    ----------
    job_class : type
        A :class:`GpumrJob` subclass, e.g. ``gpumr.jobs.face_detect.MRFaceDetect``.
    inputs : list of str
    output_dir : str
    runner : str
        mrjob runner alias: inline, local, hadoop, emr.
    extra : list of str
        More command-line options of the job.
    conf : str, optional
        An mrjob.conf to use (default: none).

    Returns
    -------
    (dict, float)
        The summed gpumr counters and the wall time in seconds.
    """
    import logging
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # no "No configs specified" chatter
    args = ["-r", runner, *(["-c", conf] if conf else ["--no-conf"]), *inputs, "--output-dir", output_dir,
            *extra]
    job = job_class(args=args)
    t0 = time.perf_counter()
    with job.make_runner() as r:
        r.run()
        counters = r.counters()
    return total(counters), time.perf_counter() - t0
