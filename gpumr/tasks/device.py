"""The GPU a record batch was given, as a workload's ``gpu``/``gpu_batch`` sees it."""

import os


class Device:
    """The leased GPU a workload's GPU path runs on, while the lease is held.

    Parameters
    ----------
    choice : gpumr.devices.chooser.Choice
        The device choice that leased it.

    Attributes
    ----------
    gpu : gpumr.devices.nvml.GPU
        The GPU as NVML (or the simulation) describes it.
    index : int
        Its index on the node.
    name : str
        ``gpu:N``, as output lines say it.
    simulated : bool
        Simulated (``GPUMR_SIMULATE_GPUS``): kernels run on the host, by the emulating launcher."""

    def __init__(self, choice):
        self.gpu = choice.gpu
        self.index = choice.gpu.index
        self.name = choice.device
        self.simulated = bool(choice.gpu.simulated)

    def module(self, source):
        """A workload's own CUDA C kernels, compiled for this GPU (nvcc, cached) or, on a simulated GPU, for the host:
        its functions by ``launcher.function(module, NAME)``.

        Examples
        --------
        In a workload's ``gpu_batch``::

            m = device.module(SHARPEN_CU)   # a string of CUDA C in the module
            fn = device.launcher.function(m, "sharpen")"""
        if "__global__" in source:  # the text itself: filed in the kernel cache under its hash
            import hashlib

            from seqfile.atomic import write_bytes

            from ..gpu.kernels import cache_dir
            path = os.path.join(cache_dir(), f"src-{hashlib.sha256(source.encode()).hexdigest()[:16]}.cu")
            if not os.path.exists(path):
                write_bytes(path, source.encode())
            source = path
        return self.launcher.module(source)

    @property
    def launcher(self):
        """The kernel launcher of this GPU (:class:`gpumr.gpu.interface.Launcher`: PyCUDA, CuPy, or the emulation)."""
        from ..gpu.launch import launcher
        return launcher(self.gpu)

    def __repr__(self):
        return f"Device({self.name}{', simulated' if self.simulated else ''})"
