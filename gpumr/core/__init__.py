"""The record-processing core that every engine and workload shares.

One record flows: (key, bytes) -> decode -> choose device -> CPU or GPU
implementation of the same function -> result or error -> output records.
A workload (:class:`Workload`, the public contract) supplies decode and the
implementations; the :class:`Processor` supplies device choice, GPU
batches, falling back to the CPU when the GPU fails, and the counters.
The core imports nothing above :mod:`gpumr.io` (a test holds the rule).
"""

from .counters import BAD, CPU_MS, FALLBACKS, GPU_MS, GROUP, ON_CPU, ON_GPU, summary
from .processor import Processor
from .workload import BadRecord, Option, Workload

__all__ = ["Workload", "Option", "BadRecord", "Processor", "GROUP", "ON_CPU", "ON_GPU", "FALLBACKS", "BAD", "CPU_MS",
           "GPU_MS", "summary"]
