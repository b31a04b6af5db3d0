"""Which device a record runs on: NVML, the free check, leases, the node's scheduler service.

``nvml`` (what the GPUs are doing), ``free`` (whether one is free for a
task), ``leases`` (node-local lock-file leases), ``paths`` (where node-local
state lives), ``protocol``/``service``/``client`` (the scheduler service),
``chooser`` (the per-record choice the core asks for).
"""
