"""The record-processing core that every engine and workload shares.

One record flows: (key, bytes) -> decode -> choose device -> CPU or GPU
implementation of the same function -> result or error -> output records.
A workload (:class:`Workload`, the public contract) supplies decode and the
implementations; the :class:`Processor` supplies device choice, GPU
batches, falling back to the CPU when the GPU fails, and the counters.
The core imports nothing above :mod:`gpumr.io` (a test holds the rule).
"""

#: Where each public name lives; imported on first use (:func:`__getattr__`), so that a module taking one light
#: name (an :class:`Option`) does not import the processor and numpy with it.
_WHERE = {"Workload": "workload", "Option": "workload", "BadRecord": "workload", "Processor": "processor",
          **{name: "counters" for name in ("GROUP", "ON_CPU", "ON_GPU", "FALLBACKS", "BAD", "CPU_MS", "GPU_MS",
                                           "summary")}}

__all__ = ["Workload", "Option", "BadRecord", "Processor", "GROUP", "ON_CPU", "ON_GPU", "FALLBACKS", "BAD", "CPU_MS",
           "GPU_MS", "summary"]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
