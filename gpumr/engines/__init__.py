"""Engines: thin shells that feed records to the core and collect its output and counters.

``streaming`` (mrjob: inline, local, Hadoop Streaming, EMR), ``progress``
(what tasks on this machine report while they run).
"""
