"""The record-processing core that every engine and workload shares."""

#: Where each public name lives; imported on first use (:func:`__getattr__`), so that a module taking one light
#: name (an :class:`Option`) does not import the processor and numpy with it.
_WHERE = {"Workload": "workload", "Option": "workload", "BadRecord": "badrecord", "Processor": "processor",
          **{name: "counters" for name in ("GROUP", "ON_CPU", "ON_GPU", "FALLBACKS", "BAD", "CPU_MS", "GPU_MS",
                                           "summary")}}

__all__ = ["Workload", "Option", "BadRecord", "Processor", "GROUP", "ON_CPU", "ON_GPU", "FALLBACKS", "BAD", "CPU_MS",
           "GPU_MS", "summary"]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
