"""CUDA kernel sources and their compiled fatbins.

Sources are package data (``gpumr.cuda``). ``gpumr build-kernels`` compiles
them with ``nvcc`` into fatbins for the common architectures, so worker
nodes need no ``nvcc``. At run time a fatbin is looked for in
``$GPUMR_KERNEL_DIR``, beside the sources, then in the per-user cache
(keyed by the source's hash); failing all three, the source is compiled for
the device at hand and cached.

``$GPUMR_CUDA_SOURCES`` names a folder whose ``.cu`` files replace the
installed ones (for kernel work, and for tests that give a broken kernel);
``$GPUMR_KERNEL_CACHE`` replaces the per-user cache folder. The host builds
of the kernels for simulated GPUs (:mod:`gpumr.gpu.emulate`) share that cache.
"""

import hashlib
import os
import re
import shutil
import subprocess

from ..errors import GpumrError
from ..io.outputs import FileOutput

KERNELS = ("backproject", "haar")
#: Real architectures in the fatbin (Turing to Blackwell), plus PTX of the newest for later GPUs.
ARCHS = ("75", "80", "86", "89", "90", "100", "120")
#: Extra nvcc flags per kernel: the Haar kernel must round like OpenCV's CPU code (no fused multiply-add);
#: backprojection may fuse (within 1e-5 of the CPU, its self-check proves it), and its host build contracts too.
FLAGS = {"haar": ["-fmad=false"], "backproject": []}
KERNEL_DIR_ENV = "GPUMR_KERNEL_DIR"
SOURCES_ENV = "GPUMR_CUDA_SOURCES"
CACHE_ENV = "GPUMR_KERNEL_CACHE"


def package_path(file):
    """Path of ``file`` among the installed kernel sources (package ``gpumr.cuda``)."""
    import gpumr.cuda
    return os.path.join(os.path.dirname(gpumr.cuda.__file__), file)


def source_path(name):
    """The ``.cu`` source of kernel ``name``: from ``$GPUMR_CUDA_SOURCES`` when set, else the installed one.

    Raises
    ------
    GpumrError
        If that folder has no such file.
    """
    folder = os.environ.get(SOURCES_ENV)
    path = os.path.join(os.path.abspath(folder), f"{name}.cu") if folder else package_path(f"{name}.cu")
    if not os.path.isfile(path):
        where = f"${SOURCES_ENV} ({os.path.dirname(path)})" if folder else os.path.dirname(path)
        raise GpumrError(f"no kernel source {name}.cu in {where}")
    return path


def defines(name):
    """The integer ``#define`` constants of kernel ``name``'s source, e.g. ``{"ZB": 8}``.

    The ``.cu`` file is the one place such constants are stated; the host
    code that launches the kernel reads them from here.
    """
    with open(source_path(name), encoding="utf-8") as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*#define\s+(\w+)\s+(\d+)\s*$", f.read(), re.M)}


def _digest(name):
    with open(source_path(name), "rb") as f:
        return hashlib.sha256(f.read() + " ".join(FLAGS.get(name, [])).encode()).hexdigest()[:16]


def cache_dir():
    """The kernel cache: ``$GPUMR_KERNEL_CACHE``, else the per-user ``~/.cache/gpumr/kernels``."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpumr", "kernels")


def nvcc():
    """Path of ``nvcc``, or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(cand):
            return cand
    return None


def compile_fatbin(name, out_path, archs=ARCHS, ptx=True):
    """Compile kernel ``name`` into a fatbin at ``out_path``, under gpumr's output rule.

    The fatbin appears whole or not at all, and replaces only an earlier
    one that gpumr made (:class:`gpumr.io.outputs.FileOutput`).

    Raises
    ------
    GpumrError
        If ``nvcc`` is missing or fails (its message included), or ``out_path`` may not be written.
    """
    compiler = nvcc()
    if compiler is None:
        raise GpumrError("nvcc not found: install the CUDA toolkit or ship fatbins made by 'gpumr build-kernels'")
    cmd = [compiler, "-fatbin", "-O3", "-std=c++14", *FLAGS.get(name, [])]
    for a in archs:
        cmd.append(f"-gencode=arch=compute_{a},code=sm_{a}")
    if ptx and archs:
        cmd.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    return compile_into(out_path, "gpumr build-kernels", cmd + [source_path(name)],
                        lambda err: f"nvcc failed on {name}.cu: {err.strip()[-2000:]}")


def compile_into(path, made_by, cmd, failed, stdin=None, env=None):
    """Run compiler ``cmd`` with ``-o`` naming the temporary file of ``path``, under gpumr's output rule.

    What it builds appears whole at ``path`` or not at all, and replaces
    only an earlier build gpumr made (:class:`gpumr.io.outputs.FileOutput`,
    recorded as ``made_by``). Returns ``path``.

    Raises
    ------
    GpumrError
        ``failed(compiler's stderr)`` when the compiler fails.
    """
    out = FileOutput(path, made_by)
    with out as f:
        f.close()  # the compiler writes the temporary file by name
        proc = subprocess.run(cmd + ["-o", out.tmp], input=stdin, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise GpumrError(failed(proc.stderr))
    return path


def built_meanwhile(path, make):
    """``make()``, or ``path`` when it failed because another task on this node built ``path`` meanwhile."""
    try:
        return make()
    except GpumrError:
        if os.path.isfile(path):  # theirs serves
            return path
        raise


def build(out_dir=None, archs=ARCHS, names=KERNELS):
    """``gpumr build-kernels``: fatbins of every kernel into ``out_dir`` (default: the cache).

    Every destination is checked before the first compilation, so a file
    there that gpumr did not make stops the command before any work.
    """
    from ..io.outputs import check_output
    out_dir = out_dir or cache_dir()
    paths = [os.path.join(out_dir, f"{n}-{_digest(n)}.fatbin") for n in names]
    for path in paths:
        check_output(path, "gpumr build-kernels", folder=False)
    return [compile_fatbin(n, path, archs) for n, path in zip(names, paths)]


def _places(name):
    """Where a fatbin of ``name`` is looked for, in order: (what the place is, folder)."""
    shipped = os.environ.get(KERNEL_DIR_ENV)
    return [(f"${KERNEL_DIR_ENV}", os.path.abspath(shipped) if shipped else None),
            ("beside the sources", os.path.dirname(source_path(name))),
            ("the per-user cache", cache_dir())]


def locate(name):
    """The fatbin of kernel ``name`` that :func:`fatbin` would use now, without compiling.

    Returns
    -------
    (str or None, str)
        Its absolute path (None when no place holds one) and where it was
        found: ``$GPUMR_KERNEL_DIR`` (e.g. a folder shipped through Hadoop's
        distributed cache), ``beside the sources`` or ``the per-user cache``.
    """
    file = f"{name}-{_digest(name)}.fatbin"
    for place, folder in _places(name):
        if folder and os.path.exists(os.path.join(folder, file)):
            return os.path.join(folder, file), place
    return None, "nowhere"


def describe(names=KERNELS):
    """One line saying where each kernel's fatbin comes from, for a task's log.

    A task logs it at start, so that a job's log shows whether the kernels
    shipped with it (``$GPUMR_KERNEL_DIR``) were found on the node, before
    any GPU is used.
    """
    parts = []
    for name in names:
        try:
            path, place = locate(name)
        except GpumrError as exc:  # no such source: the GPU path will say so too
            parts.append(f"{name}: {exc}")
            continue
        parts.append(f"{name} from {place} ({path})" if path else
                     f"{name}: no fatbin for this source (compiled with nvcc on first GPU use)")
    return "kernels: " + "; ".join(parts)


def fatbin(name, arch=None):
    """Path of a fatbin for kernel ``name``, compiling for ``arch`` (e.g. "90") if none exists."""
    path, _ = locate(name)
    if path:
        return path
    path = os.path.join(cache_dir(), f"{name}-{_digest(name)}.fatbin")
    return built_meanwhile(path, lambda: compile_fatbin(name, path, (arch,) if arch else ARCHS))
