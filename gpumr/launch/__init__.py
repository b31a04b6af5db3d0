"""The launch layer: a command line in, one checked plan out (:mod:`.plan`), run by the one skeleton (:mod:`.job`).

:mod:`.parser` is the one parser of ``gpumr run``, :mod:`.options` the
options every workload takes, :mod:`.ship` the content-addressed side files.
Every entry point that runs a job comes here: ``gpumr run``, ``gpumr spark``,
``python -m gpumr.jobs.X``, spark-submit of :mod:`gpumr.cli.spark_submit`.
"""
