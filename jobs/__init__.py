"""mrjob jobs of gpumr, installed as ``gpumr.jobs``: options and steps only; the launcher (:mod:`gpumr.launch`) runs them; the work is in the task runtime and the workloads."""
