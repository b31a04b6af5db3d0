"""Whether a GPU is free for a task, as far as NVML can tell (leases aside)."""

import os
from dataclasses import dataclass

from ..sizes import human
from . import nvml as _nvml


@dataclass
class Verdict:
    """Whether a task here would get ``gpu`` now, and why not."""

    gpu: object
    free: bool
    reason: str = ""


def check(gpu, memory=0, siblings=(), own_pid=None):
    """The NVML part of the free check for one GPU (leases aside).

    Parameters
    ----------
    gpu : gpumr.devices.nvml.GPU
    memory : int
        Bytes of device memory the task needs.
    siblings : set of int
        Pids of gpumr processes on this node (their contexts are not foreign).
    own_pid : int, optional
        This process's pid (default: ``os.getpid()``)."""
    own_pid = os.getpid() if own_pid is None else own_pid
    if gpu.compute_mode == _nvml.PROHIBITED:
        return Verdict(gpu, False, "compute mode is prohibited")
    if gpu.compute_mode in (_nvml.EXCLUSIVE_PROCESS, _nvml.EXCLUSIVE_THREAD):
        return Verdict(gpu, True, "exclusive mode: free if a context can be created")
    foreign = sorted(p for p, _ in gpu.processes if p != own_pid and p not in siblings)
    if foreign:
        return Verdict(gpu, False, f"busy: compute process(es) of another program: pid {', '.join(map(str, foreign))}")
    if gpu.memory_total < memory:
        return Verdict(gpu, False, f"too small: {human(gpu.memory_total)} in all, a task needs {human(memory)}")
    if gpu.memory_free < memory:
        return Verdict(gpu, False, f"busy: {human(gpu.memory_free)} free, a task needs {human(memory)}")
    return Verdict(gpu, True, "")
