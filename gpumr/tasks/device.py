"""The GPU a record batch was given, as a workload's ``gpu``/``gpu_batch`` sees it."""


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
        Simulated (``GPUMR_SIMULATE_GPUS``): kernels run on the host, by the emulating launcher.
    """

    def __init__(self, choice):
        self.gpu = choice.gpu
        self.index = choice.gpu.index
        self.name = choice.device
        self.simulated = bool(choice.gpu.simulated)

    @property
    def launcher(self):
        """The kernel launcher of this GPU (:class:`gpumr.gpu.interface.Launcher`: PyCUDA, CuPy, or the emulation)."""
        from ..gpu.launch import launcher
        return launcher(self.gpu)

    def __repr__(self):
        return f"Device({self.name}{', simulated' if self.simulated else ''})"
