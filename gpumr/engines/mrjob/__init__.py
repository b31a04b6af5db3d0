"""mrjob's runners as engines: ``inline``, ``local``, ``hadoop`` (Hadoop Streaming) and ``emr``.

Hadoop: :doc:`/how-to/hadoop`; EMR: :doc:`/how-to/emr`."""

import contextlib
import glob
import gzip
import json
import logging
import os
import shutil
import sys

from ...boundary import UsageError
from ...core.workload import Option
from ...errors import GpumrError, redact, redact_settings
from ...io.remote import locate
from ...log import relay_task_lines, task_error
from ...tasks.items import to_json
from ..base import Engine, Outcome
from ..processes import workers_here
from .configs import emr_options, named_configs
from .messages import Said, emr_lines, framework_error, mrjob_said
from .runner import (
    emr_plan,
    limit_sim_reducers,
    local_scratch,
    make_runner,
    python_bin,
    run_on_threads,
    runner_settings,
    settings,
)
from .switches import FLAGS, VALUED

#: The runners whose tasks run on this machine.
HERE = ("inline", "local")


class Passthrough:
    """mrjob's own options (``-c``, ``--jobconf K=V``, ``--hadoop-streaming-jar J`` ...): declared in gpumr's one
    parser from mrjob's own table of them (:meth:`switches`), handed to mrjob's runner as given, refused by every
    other engine."""

    #: The title of their group in ``gpumr run``'s parser.
    title = "mrjob's runner options"

    def __init__(self, engine):
        self.engine = engine

    def switches(self):
        """mrjob's runner options, ``[(option strings, takes a value)]``, from gpumr's copy of mrjob's table
        (:mod:`gpumr.engines.mrjob.switches`)."""
        return [([s], False) for s in sorted(FLAGS)] + [([s], True) for s in sorted(VALUED)]

    def check(self, extra):
        """mrjob's own options, checked by mrjob's parser before anything is listed or read."""
        if extra:
            _settings(extra)


class MRJobEngine(Engine):
    """``--engine inline|local|hadoop|emr``: one of mrjob's runners."""

    HELP = {"inline": "mrjob's inline runner: every task in this process (the default)",
            "local": "mrjob's local runner: a process per task, on every core of this machine",
            "hadoop": "Hadoop Streaming through mrjob (hadoop on PATH)",
            "emr": "Amazon EMR through mrjob: gpumr's packaged config (GPU nodes; --device cpu: CPU nodes) unless "
                   "-c FILE; inputs and output at s3://; --dry-run shows the cluster"}
    title = "inline, local, hadoop, emr (mrjob's runners; its own options pass through)"
    options = (
        Option("--hadoop-splits", "engines hadoop, emr: Hadoop's own SequenceFile input format reads and splits the "
                                  "inputs (data locality), instead of gpumr's split reader",
               action="store_true", default=False),
    )

    def __init__(self, name):
        super().__init__(name)
        self.help = self.HELP[name]
        self.passthrough = Passthrough(self)

    def check(self, options):
        import importlib.util
        if self.name == "emr" and importlib.util.find_spec("boto3") is None:  # (mrjob's EMR runner calls AWS with it)
            raise GpumrError("--engine emr needs boto3: pip install 'gpumr[emr]'")
        if options.hadoop_splits and self.name not in ("hadoop", "emr"):
            raise GpumrError(f"--hadoop-splits: only for --engine hadoop or emr, not {self.name}")

    def _check_here(self, options):
        """What this machine must have for the runner (after the job's own checks, before anything starts)."""
        if self.name == "emr" and locate(options.output).local is not None:
            raise GpumrError(f"-o {options.output}: EMR writes its output to a URI (s3://BUCKET/...), not a local "
                             "folder")
        local = [i for i in getattr(options, "inputs", []) if locate(i).local is not None]
        if self.name == "emr" and local:
            raise GpumrError(f"{local[0]}: a local input; EMR's nodes read their inputs from S3 (gpumr pack -o "
                             "s3://BUCKET/... puts them there)")
        if self.name == "hadoop" and not (shutil.which("hadoop") or os.environ.get("HADOOP_HOME")):
            raise GpumrError("--engine hadoop: no hadoop command on PATH and no $HADOOP_HOME: install Hadoop's client "
                             "and put its bin/ on PATH (or --engine local runs the job on this machine)")

    def tasks_here(self, options):
        return self.name in HERE

    # -- the job's files and arguments -----------------------------------------------------------
    def _task_files(self, plan, folder):
        """Write the plan's tasks as gzipped task files (a map task each) in ``folder``; their paths."""
        if plan.options.hadoop_splits:
            return [path for path, _ in plan.inputs]
        n = len(plan.tasks)
        if self.name in HERE:
            n = min(n, workers_here(plan.options, plan.workload))
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, f"tasks-{f:05d}.gz") for f in range(max(1, n))]
        for f, path in enumerate(paths):  # (the plan's tasks dealt in turn)
            with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
                out.writelines(to_json(item) + "\n" for items in plan.tasks[f::len(paths)] for item in items)
        return paths

    def _config(self, plan):
        """``(mrjob's config options, the configs they name)``: the job's own (``-c``), else for EMR gpumr's
        packaged config (:func:`gpumr.engines.mrjob.configs.emr_options`)."""
        if self.name != "emr" or (named_configs(plan.extra) and "--no-conf" not in plan.extra):
            return [], named_configs(plan.extra)
        if "--no-conf" in plan.extra:
            raise GpumrError("--no-conf: EMR's nodes need a config whose bootstrap installs gpumr: leave it out "
                             "(gpumr's packaged config is used), or give -c FILE (gpumr conf mrjob.emr.conf -o emr.conf "
                             "--package WHEEL writes one to edit)")
        return emr_options(plan.folder, plan.options.device)

    def _runner(self, plan, output_dir, config=()):
        """mrjob's runner for the job (:func:`gpumr.engines.mrjob.runner.make_runner`), its spec and task files
        written into the job's folder first; mrjob's options ``config`` and the job's own (``plan.extra``) over
        gpumr's settings of the runner."""
        spec_path, inputs = os.path.join(plan.folder, "gpumr-spec.json"), self._task_files(plan, plan.folder + "/tasks")
        with open(spec_path, "w", encoding="utf-8") as f:
            f.write(plan.spec.to_json())
        task_args = [("--gpumr-spec", spec_path), ("--reducers", str(plan.options.reducers))]
        task_args += [("--hadoop-splits", True)] if plan.options.hadoop_splits else []
        task_args += [("--cat-reducer", True)] if self.name != "inline" else []  # (the inline runner runs no commands)
        ours = dict(local_tmp_dir=os.path.join(plan.folder, "mrjob"),
                    bootstrap_mrjob=False)  # (tasks run a Python with gpumr, so mrjob: no zip of it, no lock in /tmp)
        if self.name == "hadoop":
            ours["cleanup_on_failure"] = ["ALL"]  # (a failed job leaves no scratch)
        # Tasks on this machine read the side files where the launcher keeps them (mrjob copied each into its
        # cache, time and as much disk again); elsewhere they are shipped, named by content already.
        if self.name in HERE:
            task_args.append(("--gpumr-side-dir", plan.folder))
        else:
            ours["upload_files"] = [side.path for side in plan.side]
        return make_runner(self.name, task_args, inputs, output_dir, _settings([*config, *plan.extra], ours))

    def would_run(self, plan):
        self._check_here(plan.options)
        config, used = self._config(plan)
        runner = self._runner(plan, str(plan.out.loc), config)
        try:
            shown = settings(runner)
            if shown.get("release_label"):
                shown.pop("image_version", None)  # (mrjob's default, which a release label overrides)
            lines = [f"mrjob's {self.name} runner would run: {sys.executable} -m gpumr.engines.mrjob.task "
                     f"--mapper ... with {len(plan.tasks)} task(s)"]
            if self.name == "emr":
                lines += emr_lines(emr_plan(runner), plan, used)
            return lines + ["mrjob's settings (secrets hidden): " + json.dumps(
                {"runner": runner.alias, "python_bin": python_bin(runner) or [sys.executable],
                 "options": redact_settings(shown)}, sort_keys=True, default=str)]
        finally:
            runner.cleanup()

    # -- the run ---------------------------------------------------------------------------------
    def run(self, plan, job):
        from mrjob.step import StepFailedException

        from ...core.counters import total
        from ...tasks.output import finished_arrays, staged_parts
        self._check_here(plan.options)
        stage = locate(job.stage)
        local_out = self.name in HERE and stage.local is None  # a URI output of a runner on this machine
        output_dir = (os.path.join(plan.folder, "job-out") if local_out
                      else str(stage.child("job")) if stage.local is None
                      else (stage.child("job").uri() if self.name == "hadoop" else stage.child("job").local))
        said = Said()
        try:
            with mrjob_said(said, job.debug, self.name):
                runner = self._runner(plan, output_dir, self._config(plan)[0])
                scratch = local_scratch(runner) if self.name == "hadoop" else None
                made = scratch is not None and not os.path.lexists(scratch)
                try:
                    if self.name in HERE and plan.options.reducers > 0:
                        limit_sim_reducers(runner, plan.options.reducers)
                    if self.name == "local":  # (its tasks' processes waited on from threads, not from a forked Pool)
                        run_on_threads(runner, os.path.join(plan.folder, "mrjob"))
                    with _processes_started(self.name, job.start):
                        runner.run()
                    counts = total(runner.counters())
                finally:
                    try:  # (mrjob keeps each task's stderr in a file of its scratch folder, which cleanup removes)
                        if self.name in HERE:
                            relay_task_lines(sorted(glob.glob(os.path.join(plan.folder, "mrjob", "**", "stderr"),
                                                              recursive=True)))
                    finally:
                        runner.cleanup()
                        if made:  # the scratch folder mrjob made for this job's own one, left empty: removed
                            with contextlib.suppress(OSError):
                                os.rmdir(scratch)
        except StepFailedException as exc:
            why = task_error(said) or redact(str(exc).splitlines()[0])
            raise GpumrError(f"a task of the {self.name} job failed: {why}") from exc
        except OSError as exc:
            if self.name != "hadoop":
                raise
            raise framework_error(self.name, exc) from None
        except GpumrError:
            raise
        except Exception as exc:
            raise framework_error(self.name, exc) from exc
        # Hadoop's report of the job's counters (gpumr's among Hadoop's own), as mrjob shows it, where a Hadoop
        # user looks for it; on the runners of this machine with -v
        for report in said.counters:
            logging.getLogger("gpumr.engines.mrjob").log(logging.DEBUG if self.name in HERE else logging.INFO,
                                                         "%s", report)
        if local_out:  # the runner wrote here: into the stage, then published with the rest
            for name in os.listdir(output_dir):
                if name.startswith("part-"):
                    stage.child(f"job/{name}").upload(os.path.join(output_dir, name))
        return Outcome({**staged_parts(stage.child("job")), **finished_arrays(stage)}, counts)


def _settings(given, ours=None):
    """mrjob's runner settings: gpumr's ``ours`` with mrjob's options ``given`` over them
    (:func:`gpumr.engines.mrjob.runner.runner_settings`); mrjob's refusal of an option, one line."""
    log = logging.getLogger("mrjob")
    if log.level == logging.NOTSET:  # (mrjob's chatter, "No configs specified ...": its errors only)
        log.setLevel(logging.ERROR)
    try:
        return runner_settings(given, ours)
    except ValueError as exc:  # mrjob's way of refusing an option given as a list
        raise UsageError(f"{redact(str(exc))} (see gpumr run WORKLOAD --help; other options go to mrjob's runner)") \
            from None


def _processes_started(name, start):
    """The block in which mrjob's runner ``name`` starts its processes: the local, Hadoop and EMR runners' commands
    (task processes, ``hadoop``) start with the job's allowed environment (:class:`gpumr.engines.start.Start`), in the
    working folders mrjob makes in the job's folder; the inline runner starts none."""
    if name == "inline" or start is None:
        return contextlib.nullcontext()
    return start.inherited(chdir=False)


def engine(name):
    return MRJobEngine(name)

