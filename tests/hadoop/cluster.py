"""Run gpumr's jobs through mrjob's hadoop runner on a real Hadoop (the local one in ``shared/hadoop``).

A Hadoop is usable when ``hadoop`` is on ``PATH`` and a streaming jar is
named by ``$HADOOP_STREAMING_JAR`` or lies under ``$HADOOP_HOME`` (or beside
``bin/hadoop``); :func:`unavailable` says why not otherwise. ``.ci/run``
sets both up from ``../shared/hadoop``.

Each job runs from a fresh working folder (in local mode Hadoop makes the
distributed cache's links in the current folder) with the ``hadoop`` section
of gpumr's ``conf/mrjob.local.conf``; mrjob's log (the job client's stderr,
where local mode also prints the tasks' stderr) is kept for the test.
"""

import glob
import logging
import os
import shutil
import sys

import gpumr.conf

#: gpumr's mrjob configuration for one machine (its ``hadoop`` section is the one used).
CONF = os.path.join(os.path.dirname(gpumr.conf.__file__), "mrjob.local.conf")


def streaming_jar():
    """The Hadoop Streaming jar: ``$HADOOP_STREAMING_JAR``, else one under ``$HADOOP_HOME`` or beside ``bin/hadoop``."""
    named = os.environ.get("HADOOP_STREAMING_JAR")
    if named:
        return named if os.path.isfile(named) else None
    homes = [os.environ.get("HADOOP_HOME")]
    hadoop = shutil.which("hadoop")
    if hadoop:
        homes.append(os.path.dirname(os.path.dirname(os.path.realpath(hadoop))))
    for home in filter(None, homes):
        jars = sorted(glob.glob(os.path.join(home, "**", "hadoop-streaming*.jar"), recursive=True),
                      key=lambda p: (p.count(os.sep), p))
        if jars:
            return jars[0]
    return None


def _pyspark_jars():
    # The local launcher (shared/hadoop/bin/hadoop) takes Hadoop's jars from pyspark; point it at
    # the test interpreter's, which the tasks' `python3` on PATH may lack.
    if os.environ.get("PYSPARK_JARS"):
        return
    try:
        import pyspark
    except ImportError:
        return
    os.environ["PYSPARK_JARS"] = os.path.join(os.path.dirname(pyspark.__file__), "jars")


def unavailable():
    """Why no Hadoop can run jobs here (a sentence), or None when one can."""
    _pyspark_jars()
    if not shutil.which("hadoop"):
        return "no `hadoop` command on PATH (.ci/run puts ../shared/hadoop/bin there)"
    if not shutil.which("java"):
        return "no `java` on PATH (Hadoop needs Java 17)"
    if not streaming_jar():
        return "no Hadoop Streaming jar: set HADOOP_STREAMING_JAR or HADOOP_HOME"
    return None


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


class JobRun:
    """One finished job: ``counters`` (gpumr's, summed from Hadoop's), ``log`` (text), ``output`` (lines)."""

    def __init__(self, counters, log, output_dir):
        self.counters = counters
        self.log = log
        self.output_dir = output_dir
        self.output = []
        for name in sorted(os.listdir(output_dir)):
            if name.startswith("part-"):
                with open(os.path.join(output_dir, name), encoding="utf-8") as f:
                    self.output += f.read().splitlines()


def run(job_class, args, workdir, name="job", python_bin=sys.executable):
    """Run ``job_class``'s workload with ``args`` (inputs and job options) on ``--engine hadoop``, through the launcher.

    Parameters
    ----------
    job_class : type
        A job class of ``gpumr.jobs`` (its ``WORKLOAD`` is run).
    args : list of str
    workdir : str
        A fresh folder; the job runs from ``workdir/NAME-cwd``, mrjob's
        scratch space is ``workdir/NAME-tmp``, output ``workdir/NAME-out``.
    python_bin : str
        The tasks' Python (default: this one, where gpumr is installed).

    Returns
    -------
    JobRun

    Raises
    ------
    AssertionError
        When the job fails, with the end of its log.
    """
    from gpumr.errors import GpumrError
    from gpumr.launch.job import launch

    cwd = os.path.join(workdir, f"{name}-cwd")
    out = os.path.join(workdir, f"{name}-out")
    os.makedirs(cwd)
    argv = [job_class.WORKLOAD, *args, "-o", out, "--engine", "hadoop", "-c", CONF, "--hadoop-streaming-jar",
            streaming_jar(), "--hadoop-tmp-dir", "file://" + os.path.join(workdir, f"{name}-tmp"), "--python-bin",
            python_bin]
    keep, logger = _Keep(), logging.getLogger("mrjob")
    level, old = logger.level, os.getcwd()
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)  # (mrjob says the streaming command, its -files among it, at DEBUG)
    os.chdir(cwd)
    try:
        try:
            counters = launch(argv).counts
        except GpumrError as exc:
            raise AssertionError(f"{exc}; the log ends:\n" + "\n".join(keep.lines[-60:])) from None
    finally:
        os.chdir(old)
        logger.removeHandler(keep)
        logger.setLevel(level)
    return JobRun(counters, "\n".join(keep.lines), out)
