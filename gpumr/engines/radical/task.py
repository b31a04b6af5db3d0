"""One RADICAL-Pilot task of a gpumr job, in its sandbox: ``python -m gpumr.engines.radical.task CALL RESULT``."""

import json
import os
import pickle
import sys

from ..mapreduce import answer


def _assigned_gpus():
    """The GPUs RP assigned this task (``CUDA_VISIBLE_DEVICES`` with ``RP_GPUS_PER_RANK``), or None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if float(os.environ.get("RP_GPUS_PER_RANK") or 0) <= 0 or not visible.strip():
        return None
    return [int(g) for g in visible.split(",") if g.strip().isdigit()]


def task_main(call, result):
    """One RP task, in its sandbox: run the pickled call; write its value, or its error's one line, as JSON."""
    from ...boundary import install
    install()
    with open(call, "rb") as f:
        phase, function, args, folder = pickle.load(f)
    from ...tasks.runtime import SideFiles
    find = SideFiles(folder or os.environ.get("RP_PILOT_SANDBOX", ""))
    out = answer(phase, function, args, find=find, gpus=_assigned_gpus())
    with open(result + ".part", "w", encoding="utf-8") as f:
        json.dump(out, f)
    os.replace(result + ".part", result)  # (RP stages back only a whole result)
    return 0


if __name__ == "__main__":
    sys.exit(task_main(*sys.argv[1:3]))
