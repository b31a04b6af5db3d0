"""Every touch of mrjob's private API, in one place: what gpumr reads of a runner's settings and what it changes in
mrjob's simulated runners, and mrjob's option table and runners made without an ``MRJob``."""

import argparse
import functools
import importlib
import inspect
import os
import queue
import sys
import threading

from ..processes import AFTER_SIGNAL, end_processes_in

#: mrjob's switches that are gpumr's own on its command line (``-q``, ``-v``): never handed to mrjob.
OWN_SWITCHES = frozenset(("-q", "--quiet", "-v", "--verbose"))


@functools.lru_cache(maxsize=None)
def option_parser():
    """mrjob's parser of its runners' options (``-c``, ``--no-conf`` and every runner option), made from mrjob's own
    option table without a job; its errors raise ``ValueError``, as an ``MRJob``'s parser's do."""
    from mrjob.options import _add_basic_args, _add_runner_args
    p = argparse.ArgumentParser(prog="mrjob", add_help=False, allow_abbrev=False)
    _add_basic_args(p)
    _add_runner_args(p)

    def error(message):
        raise ValueError(message)

    p.error = error
    return p


def runner_switches():
    """mrjob's runner options as ``[(option strings, takes a value)]``: what gpumr's parser declares for them."""
    return [(strings, a.nargs != 0) for a in option_parser()._actions
            if (strings := [s for s in a.option_strings if s not in OWN_SWITCHES])]


def runner_settings(given, ours=None):
    """mrjob's options ``given`` (strings, as on mrjob's command line) parsed over gpumr's own ``ours``
    (``{dest: value}``), as mrjob reads ``OURS... GIVEN...``: a later value wins, lists and ``--jobconf`` add up.

    Raises
    ------
    ValueError
        mrjob's parser's refusal of ``given``.
    """
    parser = option_parser()
    settings = argparse.Namespace(**{a.dest: a.default for a in parser._actions})
    for dest, value in (ours or {}).items():
        setattr(settings, dest, value)
    return parser.parse_args(list(given), settings) if given else settings


def steps(reducers, cat_reducer):
    """mrjob's description of the job's one step: the task script's mapper, then the identity reducer (the task
    script's, or ``cat`` where the runner runs commands), or none."""
    step = {"type": "streaming", "mapper": {"type": "script"}}
    if reducers:
        step["reducer"] = {"type": "command", "command": "cat"} if cat_reducer else {"type": "script"}
    return [step]


def runner_kwargs(task_args, inputs, output_dir, settings):
    """The keywords ``MRJob.make_runner`` gives a runner's class for the job whose task options are ``task_args``
    (``(switch, value or True)`` of :data:`gpumr.engines.mrjob.task.OPTIONS`, in order), with the runner's
    ``settings`` (:func:`runner_settings`)."""
    from mrjob.conf import combine_dicts, combine_lists
    from mrjob.options import _RUNNER_OPTS
    from mrjob.setup import parse_legacy_hash_path

    from . import task as mrjob_task  # (not at import: python -m gpumr.engines.mrjob.task imports this package)
    kinds = {switch: kind for switch, kind, _ in mrjob_task.OPTIONS}
    extra_args, given = [], dict(task_args)
    for switch, value in task_args:
        extra_args.append(switch)
        if value is not True:
            extra_args.append(parse_legacy_hash_path("file", value) if kinds[switch] == "file" else str(value))
    reducers = int(given.get("--reducers", 1))
    kwargs = {k: getattr(settings, k) for k in _RUNNER_OPTS if hasattr(settings, k)}
    kwargs.update(
        conf_paths=settings.conf_paths, extra_args=extra_args,
        hadoop_input_format=mrjob_task.TEXT_INPUT_FORMAT if given.get("--hadoop-splits") else None,
        hadoop_output_format=None, input_paths=list(inputs), max_output_files=None,
        mr_job_script=inspect.getsourcefile(mrjob_task), output_dir=output_dir, partitioner=None, step_output_dir=None, sort_values=None,
        jobconf=combine_dicts({"mapreduce.job.reduces": str(reducers)}, settings.jobconf),
        libjars=combine_lists([], settings.libjars), upload_archives=combine_lists(settings.upload_archives, []),
        upload_dirs=combine_lists(settings.upload_dirs, []), upload_files=combine_lists(settings.upload_files, []),
        steps=steps(reducers, given.get("--cat-reducer", False)))
    return kwargs


def import_runners():
    """Import mrjob's runner modules (``mrjob.bin``) with pyspark hidden from them.

    They import pyspark, where it is installed, only to find mrjob's own
    Spark runner's ``spark-submit``, which gpumr never uses (its Spark
    engine is its own). A pyspark this process has already imported is
    left as it is; later imports of it are unaffected.
    """
    if "mrjob.bin" not in sys.modules and "pyspark" not in sys.modules:
        sys.modules["pyspark"] = None  # (importing it raises ImportError: mrjob.bin's pyspark is None)
        try:
            importlib.import_module("mrjob.bin")
        finally:
            del sys.modules["pyspark"]


def make_runner(alias, task_args, inputs, output_dir, settings):
    """mrjob's runner ``alias`` for the job, as ``MRJob.make_runner`` makes it (:func:`runner_kwargs`) but with no
    ``MRJob``: the inline runner is :func:`inline_runner`'s."""
    import_runners()
    kwargs = runner_kwargs(task_args, inputs, output_dir, settings)
    if alias == "inline":
        return inline_runner()(task_args, **kwargs)
    from mrjob.runner import _runner_class
    return _runner_class(alias)(**kwargs)


@functools.lru_cache(maxsize=None)
def inline_runner():
    """mrjob's inline runner whose tasks run gpumr's task runtime in this process (made on first use: mrjob's
    runner modules are imported by jobs that run, not by every ``gpumr`` command).

    mrjob's own inline runner builds the job's ``MRJob`` for every task,
    parsing the job's command line again; this one runs each task as the
    task script does (:func:`gpumr.engines.mrjob.task.run_task_with`), over
    the task's files, in its working folder, with its environment and
    standard streams, from the options the launcher gave.
    """
    from mrjob.inline import InlineMRJobRunner
    from mrjob.util import save_current_environment, save_cwd, save_sys_std

    from .task import run_task_with

    class InlineRunner(InlineMRJobRunner):
        def __init__(self, task_args, **kwargs):
            super().__init__(**kwargs)
            self._task_options = task_namespace(task_args)

        def _invoke_task_func(self, task_type, step_num, task_num):
            options = argparse.Namespace(**vars(self._task_options), step_num=step_num,
                                         mapper=task_type == "mapper", reducer=task_type == "reducer")

            def invoke_task(stdin, stdout, stderr, wd, env):
                with save_current_environment(), save_cwd(), save_sys_std():
                    os.environ.update(env)
                    os.chdir(wd)
                    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
                    try:
                        run_task_with(options, stdin, stdout, stderr)
                    except BaseException:
                        self._error_while_reading_from = self._task_input_path(task_type, step_num, task_num)
                        raise
            return invoke_task

    return InlineRunner


def task_namespace(task_args):
    """The task options ``task_args`` (as :func:`runner_kwargs` takes them) as the task script would parse them."""
    from . import task as mrjob_task
    options = argparse.Namespace(**{switch.lstrip("-").replace("-", "_"): kwargs.get("default")
                                    for switch, _, kwargs in mrjob_task.OPTIONS})
    options.cat_reducer = options.hadoop_splits = False
    for switch, value in task_args:
        setattr(options, switch.lstrip("-").replace("-", "_"), value)
    options.reducers = int(options.reducers)
    return options


def settings(runner):
    """The runner's resolved settings that are set (secrets not hidden yet)."""
    return {k: v for k, v in sorted(runner._opts.items()) if v not in (None, [], {}, ())}


def local_scratch(runner):
    """The local folder of the Hadoop runner's scratch space (``hadoop_tmp_dir``) where it is one (``file://``), or
    None (HDFS)."""
    from urllib.parse import urlparse
    uri = runner._opts.get("hadoop_tmp_dir") or ""
    parsed = urlparse(uri)
    return os.path.normpath(parsed.path) if parsed.scheme == "file" and parsed.path.startswith("/") else None


def emr_plan(runner):
    """What an EMR runner would start, read from its resolved settings without calling AWS.

    Returns
    -------
    dict
        ``release``, ``region``, ``cluster_id`` (a running cluster to use, or None), ``groups`` (``[(role, count,
        type, market)]``; empty with instance fleets), ``fleets``, ``bootstrap`` (each command as the nodes run it),
        ``uploads`` (the local files the bootstrap names), ``python``, ``tmp``, ``logs``, ``key_pair``, ``subnet``,
        ``zone``, ``instance_profile``, ``service_role``."""
    options = runner._opts
    bootstrap, uploads = [], []
    for cmd in runner._bootstrap:
        words = []
        for part in cmd:
            if isinstance(part, dict):
                uploads.append(part["path"])
                words.append(part.get("name") or os.path.basename(part["path"]))
            else:
                words.append(part)
        bootstrap.append("".join(words).strip())
    groups = [] if options["instance_fleets"] else [
        (g["InstanceRole"], g["InstanceCount"], g["InstanceType"], g.get("Market", "ON_DEMAND"))
        for g in runner._instance_groups()]
    return dict(release=options["release_label"] or f"AMI {options['image_version']}", region=options["region"],
                cluster_id=options["cluster_id"], groups=groups, fleets=options["instance_fleets"], bootstrap=bootstrap,
                uploads=uploads, python=python_bin(runner), tmp=options["cloud_tmp_dir"], logs=options["cloud_log_dir"],
                key_pair=options["ec2_key_pair"], subnet=options["subnet"], zone=options["zone"],
                instance_profile=options["iam_instance_profile"], service_role=options["iam_service_role"])


def python_bin(runner):
    """The Python command the runner's tasks run (None for the inline runner, which runs them in this one)."""
    python = getattr(runner, "_python_bin", None)
    return python() if python else None


def run_on_threads(runner, folder):
    """Make the local runner wait on its tasks' processes from threads of this process (:func:`on_threads`)."""
    runner._run_multiple = lambda calls, num_processes=None: on_threads(
        calls, runner._opts["num_cores"] or os.cpu_count() or 1, folder)


def on_threads(calls, n, folder):
    """Run the no-argument ``calls``, each a task that waits on a process it starts working in ``folder``, at most
    ``n`` at a time on daemon threads of this process; the first error, or an interrupt, starts no more of them, ends
    the processes in ``folder`` (:func:`end_processes_in`) and is raised.

    Examples
    --------
    >>> import tempfile
    >>> done = []
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     on_threads([lambda i=i: done.append(i) for i in range(5)], 2, folder)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
    """
    calls, todo, ended = list(calls), queue.SimpleQueue(), queue.SimpleQueue()
    for call in calls:
        todo.put(call)
    stop = threading.Event()

    def work():
        while not stop.is_set():
            try:
                call = todo.get_nowait()
            except queue.Empty:
                return
            try:
                call()
                ended.put(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller)
                stop.set()  # (before the next get: this thread starts no more either)
                ended.put(exc)
    try:
        for i in range(max(1, min(n, len(calls)))):
            threading.Thread(target=work, name=f"gpumr-task-{i}", daemon=True).start()
        for _ in calls:
            error = ended.get()  # (a signal is raised here)
            if error is not None:
                raise error
    except BaseException:
        stop.set()
        end_processes_in(folder, timeout=AFTER_SIGNAL, ask=True)
        raise


def limit_sim_reducers(runner, n):
    """Make an inline/local runner run at most ``n`` reduce tasks, as Hadoop would run exactly ``n``."""
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
