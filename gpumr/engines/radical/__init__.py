"""The RADICAL-Pilot engine: a job's tasks as RADICAL-Pilot tasks in a pilot, on this machine or an HPC resource.

RADICAL-Pilot's message queues take anyone's connections and gpumr cannot make them ask for the job's secret, so on
a node where another person has processes the job is refused unless the user accepts that (``--allow-open-ports``,
:meth:`gpumr.engines.start.Start.require_private_ports`). How to run it: :doc:`/how-to/radical`."""

import contextlib
import json
import os
import pickle
import time

from ...core.workload import Option
from ...errors import GpumrError
from ...log import logger, relay
from ...signals import Terminated
from ..mapreduce import Pool, PoolEngine
from ..processes import POLL, children_deaf
from ..start import python_argv
from .pilot import LOCAL, import_rp, pilot_failure, pilot_session

log = logger(__name__)
#: How many times a task that ended without a result (killed, its node lost) runs before the job fails.
ATTEMPTS = 3
#: Pilot description attributes ``--pilot KEY=VALUE`` may set (the others have options of their own).
PILOT_KEYS = ("queue", "project", "access_schema", "job_name", "nodes", "memory")
#: What of RADICAL-Pilot takes anyone's connections (said when a shared node refuses the job).
OPEN_PORTS = "RADICAL-Pilot's message queues (ZMQ, on every interface)"
#: The module each RP task runs.
TASK_MODULE = "gpumr.engines.radical.task"


class RadicalEngine(PoolEngine):
    """``--engine radical``."""

    name = "radical"
    help = f"RADICAL-Pilot: a pilot on {LOCAL} (--resource: an HPC site's), one RP task per task"
    options = (
        Option("--resource", f"engine radical: the RP resource the pilot runs on (default {LOCAL}), e.g. "
                             "ornl.frontier (radical-pilot-resources lists them)", default=LOCAL, metavar="NAME"),
        Option("--pilot-cores", "engine radical: the pilot's cores (default: this machine's on local.localhost)",
               type=int, metavar="N", least=1, most=10**7),
        Option("--pilot-gpus", "engine radical: the pilot's GPUs (default 0); with --device gpu each task gets one",
               type=int, default=0, metavar="N", least=0, most=10**6),
        Option("--pilot-runtime", "engine radical: the pilot's wall time (default 60)", type=int, default=60,
               metavar="MINUTES", least=1, most=10**6),
        Option("--pilot-sandbox", "engine radical: where the pilot's sandbox goes (default: the job's own folder on "
                                  "local.localhost, the resource's default elsewhere); on local.localhost a new "
                                  "folder of the job's inside DIR, removed with the job", metavar="DIR"),
        Option("--pilot", f"engine radical: another pilot description attribute ({', '.join(PILOT_KEYS)})",
               action="append", default=[], metavar="KEY=VALUE"),
        Option("--task-python", "engine radical: the Python the tasks run, with gpumr installed (default: this one on "
                                "local.localhost, python3 elsewhere)", metavar="PATH"),
    )

    def check(self, options):
        if options.resource.count(".") != 1 or not all(options.resource.split(".")):
            raise GpumrError(f"--resource {options.resource}: not an RP resource name (SITE.NAME, e.g. {LOCAL})")
        for item in options.pilot:
            key, sep, value = item.partition("=")
            if not sep or key not in PILOT_KEYS or not value:
                raise GpumrError(f"--pilot {item}: give KEY=VALUE, KEY one of {', '.join(PILOT_KEYS)}")
        if options.device == "gpu" and not options.pilot_gpus:
            raise GpumrError("--device gpu with --engine radical needs --pilot-gpus N (the pilot's GPUs)")

    def tasks_here(self, options):
        return options.resource == LOCAL

    def would_run(self, plan):
        return [f"RADICAL-Pilot: a pilot on {plan.options.resource}, one RP task per task; its message queues take "
                "anyone's connections, so a node other people use refuses it without --allow-open-ports"]

    @contextlib.contextmanager
    def session(self, plan, job):
        job.start.require_private_ports(self.name, OPEN_PORTS)
        rp = import_rp()
        with contextlib.ExitStack() as stack:
            tmgr = job.session if job.session is not None else stack.enter_context(
                pilot_session(plan.options, job.start))
            yield RadicalPool(rp, tmgr, plan, job)


class RadicalPool(Pool):
    """A job's tasks as RP tasks of one pilot: calls staged in, results (JSON) staged back."""

    engine = "radical"

    def __init__(self, rp, tmgr, plan, job):
        self.rp, self.tmgr, self.plan = rp, tmgr, plan
        self.here = plan.engine.tasks_here(plan.options)
        self.pilot = tmgr.get_pilots()[0]
        if not self.here:  # the side files into the pilot's sandbox, where the tasks find them
            self.pilot.stage_in([{"source": f"file://localhost{s.path}", "target": f"pilot:///{s.name}",
                                  "action": rp.TRANSFER} for s in plan.side])
        self.calls = os.path.join(job.folder, "calls")
        os.makedirs(self.calls, mode=0o700, exist_ok=True)
        python = plan.options.task_python or (None if self.here else "python3")
        self.argv = python_argv(TASK_MODULE) if python is None else [python, "-m", TASK_MODULE]
        self.started = []

    def submit(self, phase, function, todo):
        """Submit ``[(i, args, attempt)]``; ``{i: (attempt, task, result path)}``."""
        rp, plan, descriptions = self.rp, self.plan, []
        for i, args, attempt in todo:
            name = f"{phase}-{i:05d}-{attempt}"
            with open(os.path.join(self.calls, f"{name}.pickle"), "wb") as f:
                pickle.dump((phase, function, args, plan.folder if self.here else None), f)
            gpus = 1 if phase == "map" and plan.options.device == "gpu" else 0
            descriptions.append(rp.TaskDescription({
                "name": f"gpumr-{plan.spec.job}-{name}", "executable": self.argv[0],
                "arguments": [*self.argv[1:], "call.pickle", "result.json"],
                "environment": _task_env(), "gpus_per_rank": gpus, "gpu_type": rp.CUDA if gpus else "",
                "input_staging": [{"source": f"file://localhost{self.calls}/{name}.pickle",
                                   "target": "task:///call.pickle", "action": rp.TRANSFER}],
                "output_staging": [{"source": "task:///result.json", "action": rp.TRANSFER,
                                    "target": f"file://localhost{self.calls}/{name}.json"}]}))
        tasks = self.tmgr.submit_tasks(descriptions) if descriptions else []
        self.started.extend(tasks)
        return {i: (attempt, task, os.path.join(self.calls, f"{phase}-{i:05d}-{attempt}.json"))
                for (i, _, attempt), task in zip(todo, tasks)}

    def execute(self, phase, function, calls):
        rp, pending = self.rp, self.submit(phase, function, [(i, args, 1) for i, args in enumerate(calls)])
        while pending:
            time.sleep(POLL)
            if self.pilot.state in rp.FINAL:
                raise GpumrError(pilot_failure(self.pilot, self.plan.options.resource))
            for i, (attempt, task, path) in list(pending.items()):
                if task.state not in rp.FINAL:
                    continue
                del pending[i]
                if task.stderr and task.stderr.strip():
                    relay(task.stderr)
                if task.state != rp.DONE or not os.path.exists(path):
                    why = f"{task.state.lower()}, exit status {task.exit_code}"
                    if attempt >= ATTEMPTS:
                        raise GpumrError(f"a RADICAL-Pilot task ({phase} {i}) ended {attempt} times "
                                         f"without a result (the last: {why})")
                    log.warning("RADICAL-Pilot task %s %d ended without a result (%s): running it again",
                                phase, i, why)
                    pending.update(self.submit(phase, function, [(i, calls[i], attempt + 1)]))
                    continue
                with open(path, encoding="utf-8") as f:
                    result = json.load(f)
                if "error" in result:
                    raise GpumrError(result["error"])
                yield result["value"]

    def end(self, exc):
        """Cancel every task the job started and wait until each is final, at most 60 seconds; after SIGTERM no wait:
        sent to the process group (a terminal, SLURM's scancel), it has ended RP's own processes, which would never
        say a task ended, and a batch system's SIGKILL follows soon. The session's close then ends whatever is left
        (:func:`gpumr.engines.radical.pilot.pilot_session`)."""
        rp, timeout = self.rp, 0 if isinstance(exc, Terminated) else 60
        live = [t.uid for t in self.started if t.state not in rp.FINAL]
        with children_deaf():
            if live:
                self.tmgr.cancel_tasks(live)
                if timeout:
                    self.tmgr.wait_tasks(live, timeout=timeout)


def _task_env():
    """The environment RP adds to each task's (the session's processes have theirs): the user's own home, the
    import path without the current folder."""
    return {"HOME": os.path.expanduser("~"), "PYTHONSAFEPATH": "1"}


def engine(name):
    return RadicalEngine(name)
