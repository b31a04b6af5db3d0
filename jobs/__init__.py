"""mrjob jobs of gpumr, installed as ``gpumr.jobs``: options and steps only; the work is in :mod:`gpumr.engines.streaming` and the workloads."""
