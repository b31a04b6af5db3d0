"""A pytest plugin (``-p gpu_mutant``): the GPU drivers with one wait left out, named by ``$GPUMR_MUTANT``.

``bench/gpu_mutations.py`` runs the driving tests with it once per wait of
the drivers; the mutant module is executed over the installed one before
any test module imports it (and the drivers after a mutated
:mod:`gpumr.gpu.trust` are executed again, so that they bind its code).
"""

import importlib
import os
import sys


def pytest_configure(config):
    spec = os.environ.get("GPUMR_MUTANT")
    if not spec:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import gpu_mutations
    name, line, kind = spec.rsplit(":", 2)
    module = importlib.import_module(name)
    exec(gpu_mutations.mutant(name, int(line), kind), module.__dict__)
    for driver in gpu_mutations.DRIVERS:
        if driver != name and driver in sys.modules:
            importlib.reload(sys.modules[driver])
