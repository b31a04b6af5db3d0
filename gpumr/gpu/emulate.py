"""gpumr's CUDA kernels executed on the host: the launcher of simulated GPUs.

The way ``nvcc -deviceemu`` once ran kernels on the host: each ``cuda/NAME.cu``
is compiled as C++ by the system compiler (``$CXX``, else ``g++``) against
``cuda/host_emulation.cuh``, which restates what the kernels use of CUDA
(indices, vector types, qualifiers, ``__ldg``, atomics, constant memory,
min/max). A launch runs its blocks on a pool of host threads and the threads
of a block one after another. The build has no fast maths, and no
floating-point contraction for a kernel nvcc builds with ``-fmad=false``
(``-ffp-contract=off``); one nvcc may fuse is built with contraction on
(:func:`host_flags`), so that each kernel's float arithmetic is what it states.

The source is scanned first: a CUDA feature the header does not restate
(dynamic shared memory, warp votes, textures, ...) is refused by name (and
the header poisons those names too). A source with block barriers, shared
memory or warp shuffles is built so that each block's threads run as fibers
that meet at them (:func:`uses_fibers`); a barrier or shuffle used wrongly
(threads at different barriers, a shuffle reading a lane not taking part)
fails the launch with :class:`LaunchError`. A generated wrapper per
``extern "C" __global__`` kernel unpacks the argument array by the kernel's
own parameter types and runs the grid; ``__constant__`` symbols are reached
through generated accessors. Builds are cached in :func:`kernels.cache_dir`,
keyed by the hash of the source as read, header, wrappers, flags and compiler,
and loaded only where their proof vouches for them (:func:`kernels.cached`).

At each launch the argument checks a driver makes are made: the argument
count, a numpy scalar of the exact type for each scalar parameter, a device
array for each pointer (a bare integer address is refused, as PyCUDA refuses
it; so is a host array) whose dtype matches the pointee where that is an
arithmetic type, the grid and block limits, and the constant memory size.
Device memory is host memory from ``malloc``, counted against the simulated
device's size (``GPUMR_SIMULATE_GPUS=N:MEM``): beyond it an allocation raises
:class:`DeviceOutOfMemory`. With ``GPUMR_EMULATE_ASAN=1`` the kernels are
built with AddressSanitizer (the process must run with gcc's ``libasan``
preloaded), whose redzones then guard every device allocation.
"""

import collections
import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import threading
import weakref

import numpy as np

from ..errors import GpumrError
from . import kernels
from .interface import Launcher, check_copy, check_view

HEADER = "host_emulation.cuh"
FLAGS = ("-O2", "-std=c++17", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-Wno-unknown-pragmas")
SANITIZE_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g")
SANITIZE_ENV = "GPUMR_EMULATE_ASAN"
#: CUDA's limits: constant memory, threads per block, block and grid dimensions.
CONSTANT_MEMORY = 64 * 1024
MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2 ** 31 - 1, 65535, 65535)

#: What the header does not restate: (pattern, what it is; ``{}`` is the text found).
UNSUPPORTED = tuple((re.compile(p), what) for p, what in (
    (r"#\s*include\s*[<\"](?:cuda|cooperative_groups|curand|cub/|thrust/|mma|sm_|device_)[^>\"\n]*[>\"]",
     "CUDA's headers ({})"),
    (r"\bextern\s+__shared__\b", "dynamic shared memory (extern __shared__)"),
    (r"\b__syncthreads_\w+", "counting block barriers ({})"),
    (r"\b__shfl(?:_up|_down|_xor)?\b", "warp shuffles without a mask ({})"),
    (r"\b__(?:ballot|any|all|activemask|match_\w+|reduce_\w+)(?:_sync)?\b", "warp votes ({})"),
    (r"\b(?:tex|surf)(?:1D|2D|3D|Cubemap)\w*|\b(?:texture|surface)\s*<|\bcuda(?:Texture|Surface)Object_t\b",
     "textures and surfaces ({})"),
    (r"<<<", "launches from a kernel (dynamic parallelism)"),
    (r"\bcooperative_groups\b|\bthis_grid\b", "cooperative groups"),
    (r"\b(?:asm|__asm__)\b", "inline PTX ({})"),
    (r"\b__(?!ldg\b|threadfence\b|launch_bounds__|attribute__|align__|builtin_|syncthreads\b|syncwarp\b|"
     r"shfl(?:_up|_down|_xor)?_sync\b)[a-z]\w*(?=\s*\()",
     "the device intrinsic {}"),
))
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
_CONSTANT = re.compile(r"__constant__[^;=]*?(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=[^;]*)?;")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class DeviceOutOfMemory(MemoryError):
    """An allocation does not fit the simulated device's memory."""


class LaunchError(RuntimeError):
    """A launch a driver would refuse (grid or block beyond CUDA's limits)."""


def compiler():
    """The C++ compiler the kernels are built with (``$CXX``, else ``g++``), or None."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def available():
    """``(True, compiler)`` when the kernels can be built for the host here, else ``(False, why)``."""
    cxx = compiler()
    if cxx:
        return True, cxx
    return False, "no C++ compiler (g++) to run the CUDA kernels on the host for simulated GPUs"


def host_flags(name):
    """Host compiler flags that make kernel ``name``'s float rounding follow its nvcc flags.

    ``-fmad=false`` (:func:`kernels.flags`) keeps :data:`FLAGS`' ``-ffp-contract=off``; a kernel nvcc may
    contract into fused multiply-adds is built with contraction on (and FMA instructions) here too.
    """
    with open(kernels.source_path(name), encoding="utf-8") as f:
        fibers = ("-DGPUMR_FIBERS",) if uses_fibers(f.read()) else ()
    if "-fmad=false" in kernels.flags(name):
        return fibers
    return fibers + (("-ffp-contract=fast", "-mfma") if _x86() else ("-ffp-contract=fast",))


_FIBERS = re.compile(r"\b(?:__shared__|__syncthreads|__syncwarp|__shfl(?:_up|_down|_xor)?_sync|warpSize)\b")


def uses_fibers(text):
    """Whether source ``text`` uses block barriers, shared memory or warp shuffles: then its host build runs
    each block's threads as fibers that meet at them (``-DGPUMR_FIBERS`` in ``host_emulation.cuh``)."""
    return bool(_FIBERS.search(_COMMENT.sub(_blank, text)))


def _x86():
    import platform
    return platform.machine() in ("x86_64", "AMD64", "i686")


def _blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def scan(path, text):
    """The ``extern "C" __global__`` kernels and ``__constant__`` symbols of source ``text`` (from ``path``).

    Raises
    ------
    GpumrError
        Naming the file, the line and the CUDA feature, if the source uses
        one that the host emulation does not restate.
    """
    code = _COMMENT.sub(_blank, text)
    for pattern, what in UNSUPPORTED:
        found = pattern.search(code)
        if found:
            line = code.count("\n", 0, found.start()) + 1
            raise GpumrError(f"{path}:{line}: uses {what.format(found.group(0).strip())}, which the host "
                             "emulation of CUDA does not restate (simulated GPUs cannot run this kernel)")
    return _KERNEL.findall(code), _CONSTANT.findall(code)


@functools.lru_cache(maxsize=None)
def _compiler_id(cxx):
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise GpumrError(f"C++ compiler {cxx}: {exc}") from None
    return f"{os.path.realpath(shutil.which(cxx) or cxx)} {proc.stdout.splitlines()[0] if proc.stdout else ''}"


def _unit(path, text, names, constants):
    """What is compiled: the source as read (diagnostics name its file and lines), then a wrapper per kernel."""
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    return "\n".join([f'#line 1 "{quoted}"', text, '#line 1 "<gpumr wrappers>"'] +
                      [f"GPUMR_KERNEL({n})" for n in names] + [f"GPUMR_CONSTANT({c})" for c in constants]) + "\n"


def build(name, sanitize=False):
    """The host build of kernel ``name``: ``(shared library path, kernel names, constant names)``.

    Compiled on first use and cached, written under gpumr's output rule
    (:class:`gpumr.io.outputs.FileOutput`: whole or not at all); of tasks
    starting at once, one builds and the others use its build
    (:func:`gpumr.gpu.kernels.cached`).

    Raises
    ------
    GpumrError
        If the source uses what the emulation does not restate, or the
        compiler fails (its first error quoted), or there is no compiler.
    """
    source = kernels.source_path(name)
    with open(source, encoding="utf-8") as f:
        text = f.read()
    names, constants = scan(source, text)
    ok, cxx = available()
    if not ok:
        raise GpumrError(cxx)
    header = kernels.package_path(HEADER)
    with open(header, "rb") as f:
        header_bytes = f.read()
    flags = FLAGS + host_flags(name) + (SANITIZE_FLAGS if sanitize else ())
    unit = _unit(source, text, names, constants)
    key = hashlib.sha256()
    for part in (unit.encode(), header_bytes, " ".join(flags).encode(), _compiler_id(cxx).encode()):
        key.update(hashlib.sha256(part).digest())
    def failed(stderr):
        lines = stderr.splitlines()
        first = next((line for line in lines if "error" in line), lines[0] if lines else "no message")
        return f"{source}: the host build with {cxx} failed: {first.strip()}"
    cmd = [cxx, *flags, "-iquote", os.path.dirname(source), "-include", header, "-x", "c++", "-"]
    made_by = f"gpumr (host build of a CUDA kernel for simulated GPUs: sha256 {key.hexdigest()})"
    path = kernels.cached(f"{kernels.stem(name)}-{key.hexdigest()[:16]}-host{'-asan' if sanitize else ''}.so", made_by,
                          lambda path: kernels.compile_into(path, made_by, cmd, failed, stdin=unit,
                                                            env=dict(os.environ, LC_ALL="C")))
    return path, names, constants


def _asan_loaded():
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return "libasan" in f.read()


_libc = ctypes.CDLL(None)  # malloc as the process has it: AddressSanitizer's when libasan is preloaded
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

#: Scalar parameter kinds (``i4``: 4-byte signed integer ...) -> (numpy type, ctypes type).
_SCALARS = {"i1": (np.int8, ctypes.c_int8), "i2": (np.int16, ctypes.c_int16), "i4": (np.int32, ctypes.c_int32),
            "i8": (np.int64, ctypes.c_int64), "u1": (np.uint8, ctypes.c_uint8), "u2": (np.uint16, ctypes.c_uint16),
            "u4": (np.uint32, ctypes.c_uint32), "u8": (np.uint64, ctypes.c_uint64),
            "f4": (np.float32, ctypes.c_float), "f8": (np.float64, ctypes.c_double)}


class Allocation:
    """One block of emulated device memory; given back when nothing refers to it any more."""

    def __init__(self, launcher, nbytes):
        self.nbytes = nbytes
        launcher._reserve(nbytes)
        self.ptr = _libc.malloc(max(nbytes, 1))
        if not self.ptr:
            launcher._release(nbytes)
            raise DeviceOutOfMemory(f"simulated GPU {launcher.ordinal}: the host has no {nbytes} bytes to give")
        self.launcher = launcher
        weakref.finalize(self, Allocation._free, launcher, self.ptr, nbytes)

    @staticmethod
    def _free(launcher, ptr, nbytes):
        _libc.free(ptr)
        launcher._release(nbytes)


class DeviceArray:
    """A C-ordered array in emulated device memory, or a slice of one along its first axis."""

    def __init__(self, allocation, offset, shape, dtype):
        self.allocation = allocation
        self.offset = offset
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize

    @property
    def ptr(self):
        """The address of the first element."""
        return self.allocation.ptr + self.offset

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.step not in (None, 1) or not self.shape:
            raise TypeError("an emulated device array is sliced along its first axis only, with step 1")
        start, stop, _ = key.indices(self.shape[0])
        stop = max(start, stop)
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        return DeviceArray(self.allocation, self.offset + start * row, (stop - start,) + self.shape[1:], self.dtype)


def _param(text):
    """``"pf4"`` -> (True, "f4"): whether the parameter is a pointer, and its (pointee's) kind and size."""
    return (True, text[1:]) if text.startswith("p") else (False, text)


def _describe(kind):
    names = {"i": "signed", "u": "unsigned", "f": "floating", "s": "struct", "v": "void"}
    return f"{kind[1:]}-byte {names[kind[0]]}"


class Kernel:
    """One ``extern "C" __global__`` function, called as PyCUDA's: ``fn(*args, grid=..., block=...)``."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        lib = module.lib
        describe = getattr(lib, f"gpumr_params_{name}")
        describe.restype = ctypes.c_char_p
        text = describe().decode()
        self.params = [_param(p) for p in text.split(",")] if text else []
        self._run = getattr(lib, f"gpumr_launch_{name}")
        self._run.restype = ctypes.c_int

    def __call__(self, *args, grid=(1, 1), block=None):
        if block is None:
            raise ValueError("must specify block size")
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: takes {len(self.params)} arguments, {len(args)} given")
        values = [self._value(i, arg, param) for i, (arg, param) in enumerate(zip(args, self.params))]
        grid3, block3 = _dims(self.name, grid, block)
        argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        if self._run(argv, (ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3), self.module.launcher.threads):
            why = self.module.lib.gpumr_launch_error
            why.restype = ctypes.c_char_p
            raise LaunchError(f"{self.name}: {why().decode(errors='replace')}")

    def _value(self, i, arg, param):
        pointer, kind = param
        where = f"{self.name}: parameter #{i} (0-based)"
        if pointer:
            return ctypes.c_void_p(self._pointer(i, arg, kind))
        if kind.startswith("s"):
            if isinstance(arg, np.void) and arg.dtype.itemsize == int(kind[1:]):
                return ctypes.create_string_buffer(arg.tobytes(), arg.dtype.itemsize)
            raise TypeError(f"{where} is a {kind[1:]}-byte struct: pass a numpy void scalar of that size")
        want, ctype = _SCALARS[kind]
        if not isinstance(arg, np.generic):
            raise TypeError(f"{self.name}: invalid type on parameter #{i} (0-based): {type(arg).__name__} where the "
                            f"kernel takes a {_describe(kind)} scalar (a numpy scalar of that type is needed)")
        if arg.dtype != np.dtype(want):
            raise TypeError(f"{where} is a {_describe(kind)} scalar ({np.dtype(want).name}); got {arg.dtype.name}")
        return ctype(arg.item())

    def _pointer(self, i, arg, kind):
        where = f"{self.name}: parameter #{i} (0-based)"
        if isinstance(arg, DeviceArray):
            if arg.allocation.launcher is not self.module.launcher:
                raise TypeError(f"{where}: an array of another device")
            k, size = kind[0], int(kind[1:])
            if k in "iuf" and (arg.dtype.kind.replace("b", "u") != k or arg.dtype.itemsize != size):
                raise TypeError(f"{where} points to {_describe(kind)} elements; got a {arg.dtype.name} array")
            if k == "s" and arg.nbytes % size:
                raise TypeError(f"{where} points to {size}-byte elements; got {arg.nbytes} bytes")
            return arg.ptr
        if isinstance(arg, np.ndarray):
            raise TypeError(f"{where} is a pointer: got a host numpy array (a device array is needed)")
        raise TypeError(f"{self.name}: invalid type on parameter #{i} (0-based): {type(arg).__name__} where the "
                        "kernel takes a pointer (a device array is needed; PyCUDA refuses a bare address too)")


def _dims(name, grid, block):
    """Grid and block as three dimensions each, checked against CUDA's limits."""
    grid3 = tuple(int(v) for v in grid) + (1,) * (3 - len(grid))
    block3 = tuple(int(v) for v in block) + (1,) * (3 - len(block))
    if len(grid3) != 3 or len(block3) != 3:
        raise LaunchError(f"{name}: grid and block have at most three dimensions")
    threads = block3[0] * block3[1] * block3[2]
    if min(block3) < 1 or any(b > m for b, m in zip(block3, MAX_BLOCK)) or threads > MAX_BLOCK_THREADS:
        raise LaunchError(f"{name}: block {block3} is beyond CUDA's limits ({MAX_BLOCK}, "
                          f"{MAX_BLOCK_THREADS} threads in all)")
    if min(grid3) < 1 or any(g > m for g, m in zip(grid3, MAX_GRID)):
        raise LaunchError(f"{name}: grid {grid3} is beyond CUDA's limits {MAX_GRID}")
    return grid3, block3


_LOADED = iter(range(1 << 62))  # (each copy's name is new in this process: the loader matches names first)


def _load_own_copy(path, keep=False):
    """Load a copy of host build ``path`` that only one :class:`Module` loads; the copy is removed once loaded.

    The loader maps a file once per process however often it is opened, and
    its globals (the kernels' ``__constant__`` symbols) with it; a module of
    its own copy has constant memory of its own, as each module loaded on a
    GPU has. A loaded library needs no name on disk, so nothing stays behind
    even in a process that never exits cleanly (a killed worker), except
    with ``keep`` (AddressSanitizer's reports read the file for symbols: it
    stays in a private folder removed at exit).
    """
    import tempfile

    from ..trusted import private_temp_dir
    folder = private_temp_dir("gpumr-modules-") if keep else tempfile.mkdtemp(prefix="gpumr-modules-")
    own = os.path.join(folder, f"{next(_LOADED)}-{os.path.basename(path)}")
    try:
        shutil.copyfile(path, own)
        return ctypes.CDLL(own)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


class Module:
    """The host build of one kernel source, loaded: a copy of its own, so its constant memory is its own."""

    def __init__(self, launcher, name, path, names, constants):
        self.launcher = launcher
        self.name = name
        self.lib = _load_own_copy(path, keep=launcher.sanitize)
        self.kernels = set(names)
        self.constants = {}
        for c in constants:
            get = getattr(self.lib, f"gpumr_constant_{c}")
            get.restype = ctypes.c_void_p
            size = ctypes.c_ulonglong()
            self.constants[c] = (get(ctypes.byref(size)), size.value)
        total = sum(size for _, size in self.constants.values())
        if total > CONSTANT_MEMORY:
            raise GpumrError(f"{name}.cu: its __constant__ symbols take {total} bytes, more than the "
                             f"{CONSTANT_MEMORY} bytes of constant memory")

    def get_function(self, name):
        if name not in self.kernels:
            raise GpumrError(f"{self.name}.cu has no extern \"C\" __global__ function {name}")
        return Kernel(self, name)

    def get_global(self, name):
        """``(address, size)`` of ``__constant__`` symbol ``name``, as PyCUDA's."""
        if name not in self.constants:
            raise GpumrError(f"{self.name}.cu has no __constant__ symbol {name}")
        return self.constants[name]


class EmulatedLauncher(Launcher):
    """The launcher of a simulated GPU: the kernels built for and run on the host.

    Parameters
    ----------
    ordinal : int
    memory : int
        The simulated device's memory (bytes); allocations beyond it raise
        :class:`DeviceOutOfMemory`.
    sanitize : bool, optional
        Build with AddressSanitizer (default: ``$GPUMR_EMULATE_ASAN`` is ``1``).

    Attributes
    ----------
    used, peak : int
        Bytes of device memory allocated now, and at most so far (see :meth:`reset_peak`).
    calls : collections.Counter
        The driver calls made through this launcher, by the interface's method name (``launch``,
        ``to_device``, ``pinned``, ``synchronize`` ...): what a driver would be asked to do, counted
        so that tests can hold a driver's calls per unit of work (see :attr:`syncs`).
    """

    #: The calls after which the host waits for the device: a synchronisation, waiting for a copy, a
    #: blocking copy back (PyCUDA's ``get``), and a blocking copy to the device (``to_gpu`` from pageable
    #: memory, ordered after every launch queued on the default stream).
    SYNCS = ("synchronize", "wait", "to_host", "to_device")

    name = "emulated"
    out_of_memory = DeviceOutOfMemory

    def __init__(self, ordinal, memory, sanitize=None):
        self.ordinal = ordinal
        self.memory = int(memory)
        self.sanitize = os.environ.get(SANITIZE_ENV) == "1" if sanitize is None else sanitize
        if self.sanitize and not _asan_loaded():
            raise GpumrError(f"{SANITIZE_ENV}=1: the AddressSanitizer build needs gcc's libasan loaded first: run "
                             "with LD_PRELOAD=$(gcc -print-file-name=libasan.so)")
        self.threads = len(os.sched_getaffinity(0))
        self.used = self.peak = 0
        self._lock = threading.Lock()
        self.calls = collections.Counter()

    @property
    def syncs(self):
        """Host synchronisations so far: the :attr:`calls` named in :data:`SYNCS`."""
        return sum(self.calls[name] for name in self.SYNCS)

    def _count(self, name):
        with self._lock:
            self.calls[name] += 1

    def _reserve(self, nbytes):
        with self._lock:
            if self.used + nbytes > self.memory:
                raise DeviceOutOfMemory(f"out of memory on simulated GPU {self.ordinal}: {nbytes} bytes asked, "
                                        f"{self.memory - self.used} of {self.memory} free")
            self.used += nbytes
            self.peak = max(self.peak, self.used)

    def _release(self, nbytes):
        with self._lock:
            self.used -= nbytes

    def reset_peak(self):
        """Start measuring the peak of device memory from what is allocated now."""
        with self._lock:
            self.peak = self.used

    def module(self, name):
        self._count('module')
        return Module(self, name, *build(name, self.sanitize))

    def _array(self, shape, dtype):
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return DeviceArray(Allocation(self, nbytes), 0, shape, dtype)

    def to_device(self, host):
        self._count('to_device')
        data = np.ascontiguousarray(host)
        dev = self._array(data.shape, data.dtype)
        ctypes.memmove(dev.ptr, data.ctypes.data, data.nbytes)
        return dev

    def zeros(self, shape, dtype):
        self._count('zeros')
        dev = self._array(shape, dtype)
        ctypes.memset(dev.ptr, 0, dev.nbytes)
        return dev

    def to_host(self, dev):
        self._count('to_host')
        out = np.empty(dev.shape, dev.dtype)
        ctypes.memmove(out.ctypes.data, dev.ptr, dev.nbytes)
        return out

    def copy_to_symbol(self, ptr, data):
        self._count('set_constant')
        ctypes.memmove(ptr, data.ctypes.data, data.nbytes)

    def synchronize(self):
        """Nothing to wait for: an emulated launch returns when its grid has run."""
        self._count('synchronize')

    #: The simulated device's waves: SMs, and blocks of up to 256 threads per SM (what drivers size launches by).
    SMS, BLOCKS_PER_SM = 4, 6

    def resident_blocks(self, fn, threads):
        return self.SMS * self.BLOCKS_PER_SM * max(1, 256 // max(threads, 1))

    def empty(self, shape, dtype):
        self._count('empty')
        return self._array(shape, dtype)

    def zero_async(self, dev, stream):
        self._count('zero_async')
        ctypes.memset(dev.ptr, 0, dev.nbytes)

    def view(self, dev, offset, count, dtype):
        check_view(dev.nbytes, offset, count, dtype)
        return DeviceArray(dev.allocation, dev.offset + offset, (count,), dtype)

    def to_device_async(self, host, dev, stream):
        self._count("to_device_async")
        check_copy(host, dev)
        ctypes.memmove(dev.ptr, host.ctypes.data, host.nbytes)

    def to_host_async(self, dev, host, stream, after=None):
        self._count('to_host_async')
        if host.nbytes != dev.nbytes:
            raise ValueError(f"copy of {dev.nbytes} bytes into a host array of {host.nbytes}")
        ctypes.memmove(host.ctypes.data, dev.ptr, dev.nbytes)
        return None

    def wait(self, token):
        self._count("wait")

    def pinned(self, shape, dtype):
        self._count("pinned")
        return np.empty(shape, dtype)

    def stream(self):
        self._count("stream")
        return None

    def launch(self, fn, grid, block, *args):
        self._count("launch")
        fn(*args, grid=tuple(grid), block=tuple(block))

    def launch_on(self, stream, fn, grid, block, *args):
        self._count("launch")
        fn(*args, grid=tuple(grid), block=tuple(block))
