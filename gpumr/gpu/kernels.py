"""CUDA kernel sources and their compiled fatbins.

``gpumr build-kernels`` compiles the sources into fatbins so that worker nodes need no ``nvcc``; at run time a fatbin
is looked for in ``$GPUMR_KERNEL_DIR``, beside the sources, then in the kernel cache, which is trusted under
:mod:`gpumr.trusted`'s rule and whose builds load only where their proof vouches for them (:func:`cached`)."""

import contextlib
import fcntl
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import time

from .. import trusted
from ..errors import GpumrError, printable
from ..io.outputs import FileOutput, Proof, digest, proof_path

#: Real architectures in the fatbin (Turing to Blackwell), plus PTX of the newest for later GPUs.
ARCHS = ("75", "80", "86", "89", "90", "100", "120")
KERNEL_DIR_ENV = "GPUMR_KERNEL_DIR"
SOURCES_ENV = "GPUMR_CUDA_SOURCES"
CACHE_ENV = "GPUMR_KERNEL_CACHE"
#: Seconds a cached build found without its proof waits for it (a builder on this node between the two).
PROOF_WAIT = 2.0
#: Seconds a build waits for another builder in the same cache (:func:`one_builder`) before it builds anyway.
BUILD_WAIT = 300.0


def package_path(file):
    """Path of ``file`` among the installed kernel sources (package ``gpumr.cuda``)."""
    import gpumr.cuda
    return os.path.join(os.path.dirname(gpumr.cuda.__file__), file)


def stem(name):
    """The name a kernel's builds are filed under: ``haar``, or a workload's own ``.cu`` file's stem."""
    return os.path.splitext(os.path.basename(name))[0]


def source_path(name):
    """The ``.cu`` source of kernel ``name``: from ``$GPUMR_CUDA_SOURCES`` when set, else the installed one; a path to
    a ``.cu`` file (a user workload's own kernel) as it is. Raises ``GpumrError`` if that folder has no such file."""
    if name.endswith(".cu"):
        if not os.path.isfile(name):
            raise GpumrError(f"{name}: no such kernel source")
        return os.path.abspath(name)
    folder = os.environ.get(SOURCES_ENV)
    path = os.path.join(os.path.abspath(folder), f"{name}.cu") if folder else package_path(f"{name}.cu")
    if not os.path.isfile(path):
        where = f"${SOURCES_ENV} ({os.path.dirname(path)})" if folder else os.path.dirname(path)
        raise GpumrError(f"no kernel source {name}.cu in {where}")
    return path


def installed():
    """The kernels gpumr ships: the stem of every ``.cu`` file among the installed sources, sorted."""
    folder = os.path.dirname(package_path("__init__.py"))
    return tuple(sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".cu")))


_FLAGS_LINE = re.compile(r"^//\s*nvcc:\s*(.*?)\s*$", re.M)


def declared_flags(name):
    """The extra nvcc flags kernel ``name``'s source declares in a line ``// nvcc: FLAGS (why)`` (none: nvcc's
    defaults).

    Examples
    --------
    >>> declared_flags("haar")
    ['-fmad=false']
    """
    with open(source_path(name), encoding="utf-8") as f:
        found = _FLAGS_LINE.search(f.read())
    words = found.group(1).split() if found else []
    return list(itertools.takewhile(lambda w: w.startswith("-"), words))  # then, in words, why


#: The kernels gpumr ships (:func:`installed`).
KERNELS = installed()
#: Extra nvcc flags of each shipped kernel, as its installed source declares them (:func:`declared_flags`).
FLAGS = {name: declared_flags(package_path(f"{name}.cu")) for name in KERNELS}


def flags(name):
    """The extra nvcc flags of kernel ``name``: a shipped kernel's :data:`FLAGS`, else those its source declares."""
    return FLAGS[name] if name in FLAGS else declared_flags(name)


def defines(name):
    """The integer ``#define`` constants of kernel ``name``'s source, e.g. ``{"ZB": 8}``."""
    with open(source_path(name), encoding="utf-8") as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*#define\s+(\w+)\s+(\d+)\s*$", f.read(), re.M)}


def _digest(name, full=False):
    with open(source_path(name), "rb") as f:
        key = hashlib.sha256(f.read() + " ".join(flags(name)).encode()).hexdigest()
    return key if full else key[:16]


def configured_cache_dir():
    """The kernel cache asked for: ``$GPUMR_KERNEL_CACHE``, else the per-user ``~/.cache/gpumr/kernels``."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpumr", "kernels")


_IN_USE = {}  # configured cache folder -> the folder used: itself, or the private temporary one
_PRIVATE = []  # this process's private temporary cache, once one was needed


def _private():
    if not _PRIVATE:
        _PRIVATE.append(trusted.private_temp_dir("gpumr-kernels-"))
    return _PRIVATE[0]


def cache_dir():
    """The kernel cache in use: :func:`configured_cache_dir`, made if missing, where :mod:`gpumr.trusted` trusts it."""
    configured = configured_cache_dir()
    if configured not in _IN_USE:
        _IN_USE[configured] = trusted.usable_folder(configured, "gpumr's kernel cache", instead=_private,
                                                    shared=bool(os.environ.get(CACHE_ENV)))
    return _IN_USE[configured]


def _proof_of(path, wait=PROOF_WAIT):
    """The proof beside cached build ``path``, or None. A builder on this node publishes the build, then its
    proof: a build found without one is given ``wait`` seconds for it to appear before it counts as unproven."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return Proof.load(proof_path(path))
        except GpumrError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def _vouched(path, made_by):
    """Whether cached build ``path`` may be loaded: a regular file of yours that its proof vouches for. Raises
    ``gpumr.trusted.Untrusted`` when the rule refuses the file itself (another user's, a link, a FIFO ...): it is left
    alone."""
    try:
        os.close(trusted.open_regular(path, what="a cached kernel"))
    except FileNotFoundError:
        return False
    proof = _proof_of(path)
    if proof is not None and proof.output == made_by and proof.vouches("", digest(path)):
        return True
    aside = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.bad")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return False  # another task moved it meanwhile
    why = ("has no proof beside it" if proof is None else
           f"another build's proof ({proof.output}) lies beside it" if proof.output != made_by else
           "does not match its proof (truncated or changed)")
    trusted.warn_once(f"{printable(path)}: a cached kernel that {why}: moved aside as {printable(aside)} and "
                      "built again")
    return False


def cached(file, made_by, make):
    """The path of the cached build ``file``: as found where its proof vouches for it, else built by ``make(path)``.

    Parameters
    ----------
    file : str
        Its name in the cache (holding the hash of what it is built from).
    made_by : str
        What its proof must name: the builder and the full hash of the sources and flags (see :func:`_vouched`).
    make : callable
        ``make(path)`` builds it at ``path`` under the output rule (:func:`compile_into`)."""
    path = os.path.join(cache_dir(), file)
    try:
        if _vouched(path, made_by):
            return path
    except trusted.Untrusted as exc:
        path = os.path.join(_private(), file)
        trusted.warn_once(f"{exc}; building it in a private temporary kernel cache of each process instead, removed "
                          "at its exit")
        if _vouched(path, made_by):
            return path
    with one_builder(os.path.dirname(path)):
        if _vouched(path, made_by):  # built by the task this one waited for
            return path
        return built_meanwhile(path, made_by, lambda: make(path))


@contextlib.contextmanager
def one_builder(folder, wait=BUILD_WAIT):
    """Hold the build lock of cache ``folder`` for the ``with`` block: one builder at a time on this node."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        fd = None
    try:
        deadline = time.monotonic() + wait
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            except OSError:  # no locks on this file system
                break
        yield
    finally:
        if fd is not None:
            os.close(fd)  # (closing the only descriptor drops the lock)


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
    """Compile kernel ``name`` into a fatbin at ``out_path``, under gpumr's output rule. Raises ``GpumrError`` if
    ``nvcc`` is missing or fails (its message included), or ``out_path`` may not be written."""
    compiler = nvcc()
    if compiler is None:
        raise GpumrError("nvcc not found: install the CUDA toolkit or ship fatbins made by 'gpumr build-kernels'")
    cmd = [compiler, "-fatbin", "-O3", "-std=c++14", *flags(name)]
    for a in archs:
        cmd.append(f"-gencode=arch=compute_{a},code=sm_{a}")
    if ptx and archs:
        cmd.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    return compile_into(out_path, _made_by(name), cmd + [source_path(name)],
                        lambda err: f"nvcc failed on {name}.cu: {err.strip()[-2000:]}")


def _made_by(name):
    """What the proof of a fatbin of ``name`` names: the command and the hash of its source and flags."""
    return f"gpumr build-kernels ({name}.cu and flags: sha256 {_digest(name, full=True)})"


def compile_into(path, made_by, cmd, failed, stdin=None, env=None):
    """Run compiler ``cmd`` with ``-o`` naming the temporary file of ``path``, under gpumr's output rule. Raises
    ``GpumrError``: ``failed(compiler's stderr)`` when the compiler fails."""
    out = FileOutput(path, made_by)
    with out as f:
        f.close()  # the compiler writes the temporary file by name
        proc = subprocess.run(cmd + ["-o", out.tmp], input=stdin, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise GpumrError(failed(proc.stderr))
    return path


def built_meanwhile(path, made_by, make):
    """``make()``, or ``path`` when it failed because another task on this node built ``path`` meanwhile."""
    try:
        return make()
    except GpumrError:
        try:
            if _vouched(path, made_by):
                return path
        except trusted.Untrusted:
            pass
        raise


def build(out_dir=None, archs=ARCHS, names=KERNELS):
    """``gpumr build-kernels``: fatbins of every kernel into ``out_dir`` (default: the cache)."""
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
    """The fatbin of kernel ``name`` that :func:`image` would load now, without compiling: where it is, for people.

    Returns
    -------
    (str or None, str)
        Its absolute path (None when no place holds one) and where it was found: ``$GPUMR_KERNEL_DIR`` (e.g. a folder
        shipped through Hadoop's distributed cache), ``beside the sources`` or ``the per-user cache``. A folder named
        through a link is given by the path it was opened at (:func:`gpumr.trusted.open_folder`), never through the
        link; load it with :func:`image` (or by :func:`fatbin`'s path), not by this one."""
    file = f"{stem(name)}-{_digest(name)}.fatbin"
    for place, folder in _places(name):
        if folder and _usable(name, os.path.join(folder, file), place):
            return os.path.join(_opened(folder, place) if place != "the per-user cache" else folder, file), place
    return None, "nowhere"


def _usable(name, path, place):
    """Whether fatbin ``path`` of kernel ``name`` may be loaded."""
    try:
        if place == "the per-user cache":
            return _vouched(path, _made_by(name))
        # Hadoop's distributed cache shows a shipped archive as a link in the task's working folder
        # (``kernels -> .../filecache/.../fatbins.tar.gz``): the folder it names is opened once, judged, and
        # its files read relative to it (:func:`image`).
        fd = _folder_fd(os.path.dirname(path), place)
        os.close(trusted.open_regular(os.path.basename(path), dir_fd=fd, what="a kernel fatbin"))
        return True
    except FileNotFoundError:
        return False
    except trusted.Untrusted as exc:
        if place != "the per-user cache":
            trusted.warn_once(f"{exc}; not loaded")
        return False


def describe(names=KERNELS):
    """One line saying where each kernel's fatbin comes from, for a task's log."""
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


#: The largest fatbin read (OpenCV-sized kernels' fatbins for every architecture are well under this).
MAX_FATBIN_BYTES = 256 << 20
_FOLDERS = {}  # a kernel folder -> (its descriptor, the path it was opened at), opened once per process


def _folder_fd(folder, place):
    """The descriptor of a folder fatbins are loaded from: a shipped one (``$GPUMR_KERNEL_DIR``) opened and judged by
    the trusted-paths rule (:func:`gpumr.trusted.open_folder`); the installed sources' as it is (gpumr's own install).
    """
    if folder not in _FOLDERS:
        if place == f"${KERNEL_DIR_ENV}":
            _FOLDERS[folder] = trusted.open_folder(folder, "kernels to load", shared=True)
        else:
            _FOLDERS[folder] = (os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), folder)
    return _FOLDERS[folder][0]


def _opened(folder, place):
    """The path the kernel folder ``folder`` was opened at (no link in it)."""
    _folder_fd(folder, place)
    return _FOLDERS[folder][1]


def image(name, arch=None):
    """The bytes of the fatbin of kernel ``name`` to load: from ``$GPUMR_KERNEL_DIR`` or beside the sources, read
    relative to the folder opened once (a link to it followed once, never again); else the per-user cache's (compiled
    for ``arch`` first where none is there). Raises ``gpumr.trusted.Untrusted`` where the rule refuses the shipped
    folder or the file in it."""
    file = f"{stem(name)}-{_digest(name)}.fatbin"
    for place, folder in _places(name)[:2]:
        if not folder:
            continue
        try:
            return trusted.read_at(_folder_fd(folder, place), file, MAX_FATBIN_BYTES, what="a kernel fatbin")
        except FileNotFoundError:
            continue
        except trusted.Untrusted as exc:
            trusted.warn_once(f"{exc}; not loaded")
    path = fatbin(name, arch)
    return trusted.read_regular(path, MAX_FATBIN_BYTES, what="a kernel fatbin")


def fatbin(name, arch=None):
    """A path this process may load the fatbin of kernel ``name`` by, compiling for ``arch`` (e.g. "90") if none
    exists.

    Examples
    --------
    >>> fatbin("haar").endswith(".fatbin")  # doctest: +SKIP
    True
    """
    file = f"{stem(name)}-{_digest(name)}.fatbin"
    path, place = locate(name)
    if path and place != "the per-user cache":
        folder = dict(_places(name))[place]
        return f"/proc/self/fd/{_folder_fd(folder, place)}/{file}"
    if path:
        return path
    return cached(file, _made_by(name), lambda path: compile_fatbin(name, path, (arch,) if arch else ARCHS))
