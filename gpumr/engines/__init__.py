"""Engines: thin shells that feed records to the core and collect its output and counters.

``common`` (what the engines that plan their own tasks share: options from the
declaration, split planning, the split reader, the output transaction, the task),
``streaming`` and ``runners`` (mrjob: inline, local, Hadoop Streaming, EMR),
``spark``, ``dask``, ``progress`` (what tasks on this machine report while they run).
"""
