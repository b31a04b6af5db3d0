"""The task script mrjob's runners start for every task of a gpumr job (``python task.py --step-num=0 --mapper``)."""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run as a script: this folder's modules (job.py, runner.py) must not hide other packages

from gpumr.boundary import ArgumentParser
from gpumr.log import logger
from gpumr.tasks.items import Record, from_json

#: Hadoop's input format that gives a SequenceFile's records as ``key<TAB>hex bytes`` lines.
TEXT_INPUT_FORMAT = "org.apache.hadoop.mapred.SequenceFileAsTextInputFormat"
#: The switches mrjob gives the script it runs as a task.
TASK_SWITCHES = frozenset(("--mapper", "--reducer", "--combiner", "--step-num", "--spark"))
#: The job's own options, each ``(switch, "file" or "passthru", argparse keywords)``, declared once. mrjob's runner
#: (:func:`gpumr.engines.mrjob.runner.runner_kwargs`) ships the file and gives them to every task, which reads them here (:func:`task_options`). They are ``--gpumr-spec`` (a file), ``--reducers``,
#: ``--cat-reducer``, ``--hadoop-splits`` and ``--gpumr-side-dir``.
#:
#: :meta hide-value:
OPTIONS = (
    ("--gpumr-spec", "file", dict(help="the job's task spec (written by gpumr run's launcher)")),
    ("--reducers", "passthru", dict(type=int, default=1, help="reduce tasks (0: none)")),
    ("--cat-reducer", "passthru", dict(action="store_true", help="reduce with cat, not Python (the launcher's "
                                                                  "choice where the runner runs commands)")),
    ("--hadoop-splits", "passthru", dict(action="store_true", help="Hadoop's SequenceFile input format reads the "
                                                                    "inputs (hadoop and emr)")),
    ("--gpumr-side-dir", "passthru", dict(help="the folder that holds the job's side files, where tasks run on the "
                                               "launcher's machine (inline and local): else they are shipped with "
                                               "the job")),
)
log = logger("gpumr.tasks")


def counter_line(group, name, amount):
    """The stderr line of Hadoop Streaming that adds ``amount`` to counter ``name`` of ``group``.

    Examples
    --------
    >>> counter_line("gpumr", "records on CPU", 3)
    b'reporter:counter:gpumr,records on CPU,3\\n'
    """
    return f"reporter:counter:{group.replace(',', ';')},{name.replace(',', ';')},{int(amount)}\n".encode()


def text_of(line):
    """An input line as mrjob's ``RawValueProtocol`` reads it: its line end cut, UTF-8, else Latin-1.

    Examples
    --------
    >>> text_of(b'["record", "a", "1 2"]\\r\\n'), text_of(b"caf\\xe9\\n")
    ('["record", "a", "1 2"]', 'café')
    """
    line = line.rstrip(b"\r\n")
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("latin-1")


class MapTask:
    """One map task of a gpumr job under mrjob's runners: the task runtime over the task's input lines.

    Parameters
    ----------
    options : argparse.Namespace
        The job's options (:data:`OPTIONS`, by ``dest``).
    count : callable
        ``count(name, n)``: adds to a gpumr counter (mrjob's ``increment_counter``, or :func:`counter_line` on
        stderr)."""

    def __init__(self, options, count):
        from gpumr.core.counters import GROUP
        from gpumr.tasks.runtime import SideFiles, Spec, Task
        with open(options.gpumr_spec, encoding="utf-8") as f:
            spec = Spec.from_json(f.read())
        # the side files: in the launcher's folder (inline, local), else shipped into the task's working folder
        folder = options.gpumr_side_dir or os.path.dirname(os.path.abspath(options.gpumr_spec))
        self.hadoop_splits = options.hadoop_splits
        self.task = Task(spec, find=SideFiles(folder), count=lambda name, n: count(GROUP, name, n))
        self.task.open()
        log.debug("task %s started", self.task.attempt)

    def map(self, line):
        """The output lines (``json(key)<TAB>json(value)``) of one input line: a task file's item (JSON: a split or a
        record) or, with ``--hadoop-splits``, a ``key<TAB>hex bytes`` line of Hadoop's SequenceFileAsTextInputFormat."""
        if not self.hadoop_splits:
            yield from self.task.feed(from_json(line))
            return
        key, _, hexed = line.partition("\t")
        try:
            value = bytes.fromhex(hexed)
        except ValueError:
            yield self.task.refuse(key, "value is not the hex text SequenceFileAsTextInputFormat gives")
            return
        yield from self.task.feed(Record(key, value))

    def close(self):
        """The output lines of the records still waiting (the task's arrays then listed for the launcher)."""
        yield from self.task.close()
        log.debug("task %s done: %s", self.task.attempt, self.task.counts)


def task_options(argv):
    """The switches and options mrjob gives a task (``--step-num=0 --mapper`` and :data:`OPTIONS`), parsed. Raises
    ``gpumr.boundary.UsageError`` for anything else (gpumr's one step has no combiner and no Spark part)."""
    p = ArgumentParser(prog="gpumr.engines.mrjob.task")
    p.add_argument("--step-num", type=int, default=0, choices=[0])
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--mapper", action="store_true")
    kind.add_argument("--reducer", action="store_true")
    for switch, _, kwargs in OPTIONS:
        p.add_argument(switch, **{k: v for k, v in kwargs.items() if k != "help"})
    return p.parse_args(argv)


def run_task(argv, stdin, stdout, stderr):
    """Run one task as mrjob's runners start it: ``argv`` (its switches), lines from ``stdin`` to ``stdout``
    (binary streams), counters on ``stderr``."""
    run_task_with(task_options(argv), stdin, stdout, stderr)


def run_task_with(options, stdin, stdout, stderr):
    """Run one task whose switches are parsed (:func:`task_options`): the task script's, and each task of the
    inline runner, in the launcher's process (:func:`gpumr.engines.mrjob.runner.inline_runner`)."""
    def write(lines):  # (mrjob's RawProtocol writes a key<TAB>value line as it read it: UTF-8, the line itself)
        for text in lines:
            stdout.write(text.encode("utf-8") + b"\n")

    if options.reducer:  # the identity (the launcher asks for cat instead where the runner runs it)
        write(text_of(line) for line in stdin)
    else:
        def count(group, name, n):
            stderr.write(counter_line(group, name, n))
            stderr.flush()

        task = MapTask(options, count)
        for line in stdin:
            write(task.map(text_of(line)))
        write(task.close())
    stdout.flush()


def main():
    """The script mrjob starts for each task; started otherwise, one line saying what to run instead."""
    from gpumr.errors import GpumrError
    if not TASK_SWITCHES.intersection(a.partition("=")[0] for a in sys.argv[1:]):
        raise GpumrError("this is the task script mrjob's runners start; run the job with: gpumr run WORKLOAD "
                         "INPUT... -o OUT --engine inline|local|hadoop|emr")
    run_task(sys.argv[1:], sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer)


if __name__ == "__main__":
    from gpumr.boundary import main as _guarded
    _guarded(main)
