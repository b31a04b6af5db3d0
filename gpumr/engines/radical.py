"""The RADICAL-Pilot engine: a job's tasks as RADICAL-Pilot tasks in a pilot, on this machine or an HPC resource.

Run::

    gpumr run faces frames.seq/ -o out/ --engine radical [--pilot-cores N]
    gpumr run faces /scratch/frames.seq -o /scratch/out --engine radical --resource ornl.frontier \\
        --pilot-cores 512 --pilot-gpus 64 --pilot project=ABC123 --pilot queue=batch

One RP task per task of the plan, each ``python -m gpumr.engines.radical
CALL RESULT``: RP stages the call (pickled by the launcher) into the task's
sandbox and the result (JSON: the launcher never unpickles what a task
wrote) back, so a task needs no filesystem shared with the launcher except
the inputs and the output. A task that ends without a result (killed, its
node lost) runs again, at most :data:`ATTEMPTS` times; its unfinished
attempt is never published. A task's own error ends the job, in one line.
The session's files (client, pilot and task sandboxes) stay in the job's
folder on ``local.localhost`` and go with it; Ctrl-C cancels the tasks and
the pilot, and so does SIGTERM, with shorter waits (a batch system's SIGKILL
follows it). :doc:`/how-to/radical`.
"""

import contextlib
import functools
import json
import os
import pickle
import sys
import time

from ..boundary import Terminated, logger, write_stderr
from ..errors import GpumrError
from .base import Engine
from .mapreduce import answer, map_reduce
from .processes import POLL, children_deaf
from .radical_pilot import LOCAL, import_rp, pilot_failure, pilot_session

log = logger(__name__)
#: How many times a task that ended without a result (killed, its node lost) runs before the job fails.
ATTEMPTS = 3
#: Pilot description attributes ``--pilot KEY=VALUE`` may set (the others have options of their own).
PILOT_KEYS = ("queue", "project", "access_schema", "job_name", "nodes", "memory")


class RadicalEngine(Engine):
    """``--engine radical``."""

    reports_tasks = True  # (map_reduce hears each task end)
    name = "radical"
    help = f"RADICAL-Pilot: a pilot on {LOCAL} (--resource: an HPC site's), one RP task per task"

    def add_options(self, group):
        group.add_argument("--resource", default=LOCAL, metavar="NAME",
                           help=f"engine radical: the RP resource the pilot runs on (default {LOCAL}), e.g. "
                                "ornl.frontier (radical-pilot-resources lists them)")
        group.add_argument("--pilot-cores", type=int, default=None, metavar="N",
                           help="engine radical: the pilot's cores (default: this machine's on local.localhost)")
        group.add_argument("--pilot-gpus", type=int, default=0, metavar="N",
                           help="engine radical: the pilot's GPUs (default 0); with --device gpu each task gets one")
        group.add_argument("--pilot-runtime", type=int, default=60, metavar="MINUTES",
                           help="engine radical: the pilot's wall time (default 60)")
        group.add_argument("--pilot-sandbox", metavar="DIR",
                           help="engine radical: where the pilot's sandbox goes on the resource (default: the "
                                "job's own folder on local.localhost, the resource's default elsewhere)")
        group.add_argument("--pilot", action="append", default=[], metavar="KEY=VALUE",
                           help=f"engine radical: another pilot description attribute ({', '.join(PILOT_KEYS)})")
        group.add_argument("--task-python", metavar="PATH",
                           help="engine radical: the Python the tasks run, with gpumr installed (default: this "
                                "one on local.localhost, python3 elsewhere)")

    def check(self, o):
        from .. import limits
        if o.resource.count(".") != 1 or not all(o.resource.split(".")):
            raise GpumrError(f"--resource {o.resource}: not an RP resource name (SITE.NAME, e.g. {LOCAL})")
        if o.pilot_cores is not None:
            limits.number("--pilot-cores", o.pilot_cores, 1, 10**7, integer=True)
        limits.number("--pilot-gpus", o.pilot_gpus, 0, 10**6, integer=True)
        limits.number("--pilot-runtime", o.pilot_runtime, 1, 10**6, integer=True)
        for item in o.pilot:
            key, sep, value = item.partition("=")
            if not sep or key not in PILOT_KEYS or not value:
                raise GpumrError(f"--pilot {item}: give KEY=VALUE, KEY one of {', '.join(PILOT_KEYS)}")
        if o.device == "gpu" and not o.pilot_gpus:
            raise GpumrError("--device gpu with --engine radical needs --pilot-gpus N (the pilot's GPUs)")

    def tasks_here(self, o):
        return o.resource == LOCAL

    def run(self, plan, job):
        here = self.tasks_here(plan.o)
        rp = import_rp()
        with contextlib.ExitStack() as stack:
            tmgr = job.session if job.session is not None else stack.enter_context(
                pilot_session(plan.o, job.folder, job.debug))
            pilot = tmgr.get_pilots()[0]
            if not here:  # the side files into the pilot's sandbox, where the tasks find them
                pilot.stage_in([{"source": f"file://localhost{s.path}", "target": f"pilot:///{s.name}",
                                 "action": rp.TRANSFER} for s in plan.side])
            calls = os.path.join(job.folder, "calls")
            os.makedirs(calls, exist_ok=True)
            python = plan.o.task_python or (sys.executable if here else "python3")
            started = []

            def submit(phase, function, todo):
                """Submit ``[(i, args, attempt)]``; ``{i: (attempt, task, result path)}``."""
                descriptions = []
                for i, args, attempt in todo:
                    name = f"{phase}-{i:05d}-{attempt}"
                    with open(os.path.join(calls, f"{name}.pickle"), "wb") as f:
                        pickle.dump((phase, function, args, plan.folder if here else None), f)
                    gpus = 1 if phase == "map" and plan.o.device == "gpu" else 0
                    descriptions.append(rp.TaskDescription({
                        "name": f"gpumr-{plan.spec.job}-{name}", "executable": python,
                        "arguments": ["-m", __name__, "call.pickle", "result.json"],
                        "environment": _TASK_ENV, "gpus_per_rank": gpus, "gpu_type": rp.CUDA if gpus else "",
                        "input_staging": [{"source": f"file://localhost{calls}/{name}.pickle",
                                           "target": "task:///call.pickle", "action": rp.TRANSFER}],
                        "output_staging": [{"source": "task:///result.json", "action": rp.TRANSFER,
                                            "target": f"file://localhost{calls}/{name}.json"}]}))
                tasks = tmgr.submit_tasks(descriptions) if descriptions else []
                started.extend(tasks)
                return {i: (attempt, task, os.path.join(calls, f"{phase}-{i:05d}-{attempt}.json"))
                        for (i, _, attempt), task in zip(todo, tasks)}

            def execute(phase, function, calls_):
                pending = submit(phase, function, [(i, args, 1) for i, args in enumerate(calls_)])
                while pending:
                    time.sleep(POLL)
                    if pilot.state in rp.FINAL:
                        raise GpumrError(pilot_failure(pilot, plan.o.resource))
                    for i, (attempt, task, path) in list(pending.items()):
                        if task.state not in rp.FINAL:
                            continue
                        del pending[i]
                        if task.stderr and task.stderr.strip():
                            write_stderr(task.stderr if task.stderr.endswith("\n") else task.stderr + "\n")
                        if task.state != rp.DONE or not os.path.exists(path):
                            why = f"{task.state.lower()}, exit status {task.exit_code}"
                            if attempt >= ATTEMPTS:
                                raise GpumrError(f"a RADICAL-Pilot task ({phase} {i}) ended {attempt} times "
                                                 f"without a result (the last: {why})")
                            log.warning("RADICAL-Pilot task %s %d ended without a result (%s): running it again",
                                        phase, i, why)
                            pending.update(submit(phase, function, [(i, calls_[i], attempt + 1)]))
                            continue
                        with open(path, encoding="utf-8") as f:
                            result = json.load(f)
                        if "error" in result:
                            raise GpumrError(result["error"])
                        yield result["value"]
            try:
                return map_reduce(plan, job, execute)
            except BaseException as exc:
                with children_deaf():
                    _end(tmgr, started, timeout=0 if isinstance(exc, Terminated) else 60)
                raise


# -- the launcher's side ----------------------------------------------------------------------------
#: The task's own environment, where the session's processes have theirs
#: (:func:`gpumr.engines.radical_pilot.pilot_session`).
_TASK_ENV = {"HOME": os.path.expanduser("~"), **{k: os.environ[k] for k in ("TMPDIR",) if k in os.environ}}


def _end(tmgr, tasks, timeout):
    """Cancel every task the job started and wait until each is final, at most ``timeout`` seconds (0: no wait).

    The session's close then ends whatever is left (:func:`gpumr.engines.radical_pilot.pilot_session`).
    After SIGTERM there is no wait: sent to the process group (a terminal,
    SLURM's scancel), it has ended RP's own processes, which would never say a
    task ended (the wait took its 5 s, every time); and a batch system's SIGKILL
    follows soon (SLURM's KillWait: 30 s by default).
    """
    import radical.pilot as rp
    live = [t.uid for t in tasks if t.state not in rp.FINAL]
    with contextlib.suppress(Exception):  # a session that died meanwhile runs no task
        if live:
            tmgr.cancel_tasks(live)
            if timeout:
                tmgr.wait_tasks(live, timeout=timeout)


# -- in a task --------------------------------------------------------------------------------------
def _assigned_gpus():
    """The GPUs RP assigned this task (``CUDA_VISIBLE_DEVICES`` with ``RP_GPUS_PER_RANK``), or None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if float(os.environ.get("RP_GPUS_PER_RANK") or 0) <= 0 or not visible.strip():
        return None
    return [int(g) for g in visible.split(",") if g.strip().isdigit()]


def task_main(call, result):
    """One RP task, in its sandbox: run the pickled call; write its value, or its error's one line, as JSON."""
    from ..boundary import install
    install()
    with open(call, "rb") as f:
        phase, function, args, folder = pickle.load(f)
    find = functools.partial(os.path.join, folder or os.environ.get("RP_PILOT_SANDBOX", ""))
    out = answer(phase, function, args, find=find, gpus=_assigned_gpus())
    with open(result + ".part", "w", encoding="utf-8") as f:
        json.dump(out, f)
    os.replace(result + ".part", result)  # (RP stages back only a whole result)
    return 0


def engine(name):
    return RadicalEngine(name)


if __name__ == "__main__":
    sys.exit(task_main(*sys.argv[1:3]))
