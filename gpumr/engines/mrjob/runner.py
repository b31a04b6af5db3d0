"""Every touch of mrjob's private API, in one place: what gpumr reads of a runner's settings and what it changes in
mrjob's simulated runners."""

import argparse
import os
import queue
import threading

from ..processes import AFTER_SIGNAL, end_processes_in


def option_table(job):
    """``{option string: takes a value}`` of every option mrjob's parser of ``job`` knows."""
    flags = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction,
             argparse._AppendConstAction, argparse._CountAction, argparse._HelpAction, argparse._VersionAction)
    return {s: a.nargs != 0 and not isinstance(a, flags) for a in job.arg_parser._actions for s in a.option_strings}


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
    o = runner._opts
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
    groups = [] if o["instance_fleets"] else [
        (g["InstanceRole"], g["InstanceCount"], g["InstanceType"], g.get("Market", "ON_DEMAND"))
        for g in runner._instance_groups()]
    return dict(release=o["release_label"] or f"AMI {o['image_version']}", region=o["region"],
                cluster_id=o["cluster_id"], groups=groups, fleets=o["instance_fleets"], bootstrap=bootstrap,
                uploads=uploads, python=python_bin(runner), tmp=o["cloud_tmp_dir"], logs=o["cloud_log_dir"],
                key_pair=o["ec2_key_pair"], subnet=o["subnet"], zone=o["zone"],
                instance_profile=o["iam_instance_profile"], service_role=o["iam_service_role"])


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
