"""CUDA contexts through PyCUDA, imported only when a GPU is actually used."""

import os

_state = {"cuda": None, "error": None, "contexts": {}}


def driver():
    """The initialised ``pycuda.driver`` module. Raises ``RuntimeError`` if PyCUDA is not installed or the CUDA driver
    cannot be initialised."""
    if _state["cuda"] is None:
        if _state["error"]:
            raise RuntimeError(_state["error"])
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA ordinals in NVML's order
        try:
            import pycuda.driver as cuda
            cuda.init()
        except ImportError:
            _state["error"] = "PyCUDA is not installed: pip install 'gpumr[gpu]' (built against a CUDA toolkit)"
            raise RuntimeError(_state["error"]) from None
        except Exception as exc:  # noqa: BLE001 (any driver error: no CUDA here, said)
            _state["error"] = f"CUDA driver unavailable: {exc}"
            raise RuntimeError(_state["error"]) from None
        _state["cuda"] = cuda
    return _state["cuda"]


def context(ordinal):
    """This process's context on device ``ordinal``, made current. Raises ``RuntimeError`` if it cannot be created
    (busy in exclusive mode, out of memory, no driver)."""
    cuda = driver()
    ctx = _state["contexts"].get(ordinal)
    if ctx is None:
        try:
            ctx = cuda.Device(ordinal).make_context()  # created current
        except cuda.Error as exc:
            raise RuntimeError(f"cannot create a CUDA context on device {ordinal}: {exc}") from None
        _state["contexts"][ordinal] = ctx
        import atexit
        atexit.register(_detach, ordinal)
    else:
        ctx.push()
    return _Pushed(ctx)


class _Pushed:
    """Keeps a context current for a ``with`` block, popping it afterwards."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        return self.ctx

    def __exit__(self, *exc):
        self.ctx.pop()


def has_context(ordinal):
    """Whether this process already holds a context on ``ordinal``."""
    return ordinal in _state["contexts"]


def probe(gpu):
    """Exclusive-mode free check: can this process own a context on ``gpu``?"""
    if has_context(gpu.ordinal):
        return True
    try:
        with context(gpu.ordinal):
            pass
        return True
    except RuntimeError as exc:
        if "PyCUDA is not installed" not in str(exc):
            return False
    try:
        import cupy
        with cupy.cuda.Device(gpu.ordinal):
            cupy.empty(1)  # creating the primary context is the probe
        _state["contexts"][gpu.ordinal] = "cupy"
        return True
    except Exception:  # noqa: BLE001 (any driver error: the GPU is not usable now)
        return False


def _detach(ordinal):
    ctx = _state["contexts"].pop(ordinal, None)
    if ctx not in (None, "cupy"):
        try:
            ctx.detach()
        except Exception:  # noqa: BLE001 (a context the driver already lost)
            pass
