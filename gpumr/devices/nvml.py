"""What NVML says about this node's GPUs, or simulated GPUs."""

import os
from dataclasses import dataclass, field

from ..errors import GpumrError
from ..sizes import parse_size

SIMULATE_ENV = "GPUMR_SIMULATE_GPUS"
#: Most simulated GPUs (a real node has at most a few dozen).
MAX_SIMULATED = 64
DEFAULT, EXCLUSIVE_THREAD, PROHIBITED, EXCLUSIVE_PROCESS = "default", "exclusive_thread", "prohibited", "exclusive_process"
_initialised = set()
_MODES = {0: DEFAULT, 1: EXCLUSIVE_THREAD, 2: PROHIBITED, 3: EXCLUSIVE_PROCESS}


@dataclass
class GPU:
    """One GPU as NVML (or the simulation) reports it now.

    Attributes
    ----------
    index : int
        NVML index.
    processes : list of (int, int)
        Compute processes: ``(pid, used bytes)``."""

    index: int
    name: str
    uuid: str
    compute_mode: str = DEFAULT
    memory_total: int = 0
    memory_free: int = 0
    utilization: int = 0
    processes: list = field(default_factory=list)
    simulated: bool = False
    ordinal: int = 0  # CUDA device ordinal (order among the visible GPUs, by PCI bus id)


@dataclass
class Discovery:
    """The GPUs found, and why there are none when there are none."""

    gpus: list
    reason: str = ""
    simulated: bool = False


def simulated_gpus(spec):
    """GPUs described by a ``GPUMR_SIMULATE_GPUS`` value such as ``"2"`` or ``"2:16GiB"``. Raises ``GpumrError`` if
    the value is not ``N`` or ``N:SIZE``."""
    count, _, mem = str(spec).partition(":")
    try:
        n = int(count)
        total = parse_size(mem) if mem else 16 * 1024**3
    except ValueError:
        raise GpumrError(f"{SIMULATE_ENV}={spec!r}: expected N or N:MEM, e.g. 2:16GiB") from None
    if not 0 <= n <= MAX_SIMULATED:
        raise GpumrError(f"{SIMULATE_ENV}={spec!r}: the count must be from 0 to {MAX_SIMULATED}")
    return [GPU(i, "Simulated GPU", f"SIM-{i}", DEFAULT, total, total, 0, [], True, i) for i in range(n)]


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def _visible(gpus, env):
    """Keep the GPUs that ``CUDA_VISIBLE_DEVICES`` names, in its order."""
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus
    picked = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        match = [g for g in gpus if str(g.index) == item or g.uuid.startswith(item)]
        if not match:
            break  # CUDA stops at the first invalid entry
        picked.append(match[0])
    return picked


def discover(nvml=None, env=None):
    """Query every GPU once.

    Parameters
    ----------
    nvml : module, optional
        The ``pynvml`` module or a stand-in with the same functions (tests).
    env : mapping, optional
        Environment to read ``GPUMR_SIMULATE_GPUS`` and ``CUDA_VISIBLE_DEVICES`` from."""
    env = os.environ if env is None else env
    if nvml is None and env.get(SIMULATE_ENV):
        return Discovery(simulated_gpus(env[SIMULATE_ENV]), simulated=True)
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return Discovery([], "nvidia-ml-py (pynvml) is not installed")
    if id(nvml) not in _initialised:  # once per process: device choice asks for every record
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 (NVMLError_LibraryNotFound, DriverNotLoaded, ...: no NVML, said)
            return Discovery([], f"NVML unavailable: {exc}")
        _initialised.add(id(nvml))
    try:
        gpus = [query(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception as exc:  # noqa: BLE001 (any NVML error: no GPU seen, said)
        return Discovery([], f"NVML query failed: {exc}")
    gpus = _visible(gpus, env)
    for ordinal, gpu in enumerate(gpus):
        gpu.ordinal = ordinal
    return Discovery(gpus, "" if gpus else "no NVIDIA GPU on this node")


def query(nvml, index):
    """The current state of GPU ``index`` through ``nvml``."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    try:
        util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
    except Exception:  # noqa: BLE001 (a GPU that keeps its utilisation to itself)
        util = 0
    procs = [(p.pid, p.usedGpuMemory or 0) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)]
    return GPU(index, _text(nvml.nvmlDeviceGetName(h)), _text(nvml.nvmlDeviceGetUUID(h)),
               _MODES.get(nvml.nvmlDeviceGetComputeMode(h), DEFAULT), mem.total, mem.free, util, procs)
