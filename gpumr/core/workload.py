"""What a workload supplies to the record-processing core."""


class BadRecord(Exception):
    """The record cannot be processed: the reason becomes its ``error`` output."""


class Workload:
    """One function with a CPU and (optionally) a GPU implementation.

    Subclasses implement :meth:`decode`, :meth:`run_cpu` and :meth:`outputs`;
    a GPU-capable one returns an object from :meth:`gpu_backend` whose
    ``run(items, gpu)`` computes the same results for a batch.

    Attributes
    ----------
    name : str
        For log lines.
    gpu_memory : int
        Device memory one GPU batch needs (bytes), told to device choice
        unless :meth:`gpu_memory_for` says more exactly.
    gpu_batch : int
        Records per GPU launch.
    """

    name = "workload"
    gpu_memory = 0
    gpu_batch = 1

    def decode(self, key, value):
        """Turn a record into the implementation's input; raise BadRecord if it cannot be."""
        raise NotImplementedError

    def run_cpu(self, item):
        """The CPU implementation: one input to one result."""
        raise NotImplementedError

    def outputs(self, key, item, result, device):
        """The output records for one record's result.

        Returns
        -------
        list of (str, dict)
            ``(output key, value)``; a value is a JSON object (the core adds
            ``"simulated": true`` on simulated GPUs). Errors are not made
            here: the core turns a :class:`BadRecord` into ``{"error": ...}``.
        """
        raise NotImplementedError

    def gpu_memory_for(self, items):
        """Device memory (bytes) a GPU batch of these decoded items needs: :attr:`gpu_memory` unless overridden."""
        return self.gpu_memory

    def gpu_backend(self, simulated=False):
        """An object with ``run(items, gpu) -> results``, or None when no GPU path is usable here.

        ``simulated``: the GPUs are simulated (their kernels then run on the host,
        :func:`gpumr.gpu.launch.available` says whether they can).
        """
        return None
