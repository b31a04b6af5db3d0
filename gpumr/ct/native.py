"""The CPU backprojector built from C (``gpumr/ct/backproject.c``) by the system compiler, loaded with ctypes."""

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess

import numpy as np

SOURCE = "backproject.c"
FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-pthread", "-fno-math-errno", "-fno-trapping-math",
         "-ffp-contract=fast", "-march=native")
#: False: the numba kernel serves even where a C compiler is found (tests compare the two).
ENABLED = True


def compiler():
    """The C compiler (``$CC``, else ``gcc``, else ``cc``), or None."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _cpu():
    """What identifies this processor's instruction set: the machine and its feature flags."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {' '.join(sorted(flags.split(':', 1)[-1].split()))}"


@functools.lru_cache(maxsize=None)
def _compiler_id(cc):
    proc = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
    return f"{os.path.realpath(shutil.which(cc) or cc)} {proc.stdout.splitlines()[0] if proc.stdout else ''}"


def build():
    """The shared library's path in the kernel cache, built if missing. Raises ``gpumr.errors.GpumrError``: no
    compiler, or it failed (its first error quoted)."""
    from ..errors import GpumrError
    from ..gpu import kernels
    cc = compiler()
    if cc is None:
        raise GpumrError("no C compiler (gcc) to build the CPU backprojector")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), SOURCE)
    with open(source, "rb") as f:
        text = f.read()
    key = hashlib.sha256()
    for part in (text, " ".join(FLAGS).encode(), _compiler_id(cc).encode(), _cpu().encode()):
        key.update(hashlib.sha256(part).digest())
    made_by = f"gpumr (the C CPU backprojector: sha256 {key.hexdigest()})"

    def failed(stderr):
        lines = stderr.splitlines()
        first = next((line for line in lines if "error" in line), lines[0] if lines else "no message")
        return f"{source}: the build with {cc} failed: {first.strip()}"
    return kernels.cached(f"backproject-cpu-{key.hexdigest()[:16]}.so", made_by,
                          lambda path: kernels.compile_into(path, made_by, [cc, *FLAGS, source], failed,
                                                            env=dict(os.environ, LC_ALL="C")))


_loaded = []


def kernel():
    """``run(flat, width, height, row0, cosb, sinb, zs, ys, xs, dso, dsd, cu, cv, inv_du, inv_dv, nv, nu, out,
    threads)``, the C backprojector (the numba kernel's arguments, and the threads), or None where it cannot be built
    here (no compiler, a failed build) or :data:`ENABLED` is False."""
    if _loaded:
        return _loaded[0]
    run = None
    if ENABLED:
        from ..errors import GpumrError
        try:
            lib = ctypes.CDLL(build())
        except (GpumrError, OSError):
            lib = None
        if lib is not None:
            fn = lib.gpumr_backproject
            f32p, i, f = ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_float
            fn.argtypes = [f32p, i, i, i, i, f32p, f32p, f32p, i, f32p, i, f32p, i, f, f, f, f, f, f, i, i, f32p, i]
            fn.restype = ctypes.c_int

            def run(flat, width, height, row0, cosb, sinb, zs, ys, xs, dso, dsd, cu, cv, inv_du, inv_dv, nv, nu,
                    out, threads):
                arrays = [np.ascontiguousarray(a, np.float32) for a in (flat, cosb, sinb, zs, ys, xs)]
                if not (out.flags.c_contiguous and out.dtype == np.float32):
                    raise ValueError("out must be a C-contiguous float32 array")
                ptr = [a.ctypes.data_as(f32p) for a in arrays]
                nzs, ny, nx = out.shape
                if fn(ptr[0], arrays[0].shape[0], int(width), int(height), int(row0), ptr[1], ptr[2], ptr[3], nzs,
                      ptr[4], ny, ptr[5], nx, float(dso), float(dsd), float(cu), float(cv), float(inv_du),
                      float(inv_dv), int(nv), int(nu), out.ctypes.data_as(f32p), int(threads)):
                    raise MemoryError("the CPU backprojector's threads found no memory for a row of voxels")
                return out
    _loaded.append(run)
    return run
