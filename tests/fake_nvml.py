"""A stand-in for the ``pynvml`` module, describing GPUs as the test wants them."""

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNVML:
    """Answers the pynvml calls gpumr makes from a list of GPU descriptions.

    Each GPU is a dict: name, uuid, mode (0 default, 2 prohibited, 3 exclusive
    process), total, free, util, procs [(pid, used)].
    """

    def __init__(self, gpus=(), init_error=None):
        self.gpus = [dict(g) for g in gpus]
        self.init_error = init_error

    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetName(self, h):
        return h.get("name", "Fake H100").encode()

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetComputeMode(self, h):
        return h.get("mode", 0)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h.get("total", 80 << 30), free=h.get("free", 80 << 30))

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=h.get("util", 0))

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in h.get("procs", [])]


def gpu(i, **kw):
    """A GPU description with defaults."""
    return dict(dict(uuid=f"GPU-fake-{i}"), **kw)
