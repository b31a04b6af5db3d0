"""gpumr's CUDA kernels executed on the host: the launcher of simulated GPUs."""

import collections
import ctypes
import functools
import hashlib
import itertools
import os
import random
import re
import shutil
import subprocess
import threading
import weakref

import numpy as np

from ..errors import GpumrError
from . import kernels
from .interface import Launcher, check_copy, check_filter, check_view

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


class DeviceError(RuntimeError):
    """A CUDA error of a simulated device; ``sticky``: its context is lost, and every later call fails the same."""

    def __init__(self, message, sticky=False):
        super().__init__(message)
        self.sticky = sticky


class LaunchError(DeviceError):
    """A launch a driver would refuse (grid or block beyond CUDA's limits), or a kernel that failed as it ran."""


class EmulationError(RuntimeError):
    """A rule of CUDA's the driver broke that a GPU would not report (device memory given back under queued work)."""


#: How queued work is run: ``late`` (when the host waits for it, the latest first where nothing orders two
#: operations), ``random[:SEED]`` (when waited for, in a random order CUDA allows), ``eager`` (at once, in order).
ORDER_ENV = "GPUMR_EMULATE_ORDER"
#: Faults to inject, ``KIND@CALL#N`` separated by commas: ``failure@launch#2`` makes the second launch
#: raise a launch failure, ``sticky@to_host_async#3`` loses the context when the third copy back runs.
FAULTS_ENV = "GPUMR_EMULATE_FAULTS"
FAULT_KINDS = ("failure", "sticky")
#: The byte fresh device and page-locked memory holds.
POISON = 0xFF


def parse_order(text):
    """``(order, seed)`` of an :data:`ORDER_ENV` value (empty: ``late``). Raises ``GpumrError`` if it is none of
    ``late``, ``eager``, ``random[:SEED]``."""
    name, _, seed = (text or "late").partition(":")
    if name in ("late", "eager") and not seed:
        return name, 0
    if name == "random" and (not seed or seed.isdigit()):
        return name, int(seed or 0)
    raise GpumrError(f"{ORDER_ENV}={text!r}: one of late, eager, random[:SEED]")


def parse_faults(text):
    """``{(call, n): kind}`` of an :data:`FAULTS_ENV` value. Raises ``GpumrError`` naming the first entry that is not
    ``KIND@CALL#N``.

    Examples
    --------
    >>> parse_faults("sticky@launch#3, failure@to_host_async#1")
    {('launch', 3): 'sticky', ('to_host_async', 1): 'failure'}
    """
    out = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        m = re.fullmatch(r"(\w+)@(\w+)#(\d+)", item)
        if not m or m.group(1) not in FAULT_KINDS or int(m.group(3)) < 1:
            raise GpumrError(f"{FAULTS_ENV}: {item!r} is not KIND@CALL#N (KIND one of {', '.join(FAULT_KINDS)}; "
                             "e.g. sticky@launch#3)")
        out[m.group(2), int(m.group(3))] = m.group(1)
    return out


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
    """Host compiler flags that make kernel ``name``'s float rounding follow its nvcc flags."""
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
    """The ``extern "C" __global__`` kernels and ``__constant__`` symbols of source ``text`` (from ``path``). Raises
    ``GpumrError``: naming the file, the line and the CUDA feature, if the source uses one that the host emulation
    does not restate."""
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
    """The host build of kernel ``name``: ``(shared library path, kernel names, constant names)``. Raises
    ``GpumrError`` if the source uses what the emulation does not restate, or the compiler fails (its first error
    quoted), or there is no compiler."""
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


class _Block:
    """Emulated device memory itself: freed once neither its :class:`Allocation` nor queued work refers to it."""

    __slots__ = ("ptr", "nbytes", "users", "__weakref__")

    def __init__(self, nbytes):
        self.ptr = _libc.malloc(max(nbytes, 1))
        if not self.ptr:
            raise MemoryError(nbytes)
        self.nbytes, self.users = nbytes, {}
        ctypes.memset(self.ptr, POISON, max(nbytes, 1))  # never written yet: NaN as float, -1 as integer
        weakref.finalize(self, _libc.free, self.ptr)


class Allocation:
    """One allocation of emulated device memory; given back (to the simulated device's count) when nothing refers to
    it any more. Given back while work queued on another stream still uses it: a violation
    (:meth:`EmulatedLauncher.violations`), as a pool may hand it out again while that work runs."""

    def __init__(self, launcher, nbytes):
        self.nbytes = nbytes
        launcher._reserve(nbytes)
        try:
            self.block = _Block(nbytes)
        except MemoryError:
            launcher._release(nbytes)
            raise DeviceOutOfMemory(f"simulated GPU {launcher.ordinal}: the host has no {nbytes} bytes to give") \
                from None
        self.launcher = launcher
        weakref.finalize(self, Allocation._gone, launcher, weakref.ref(self.block), nbytes)

    @property
    def ptr(self):
        return self.block.ptr

    @staticmethod
    def _gone(launcher, block, nbytes):
        launcher._release(nbytes)
        b = block()
        if b is not None and b.users:
            launcher._violation(f"{nbytes} bytes of device memory were given back while work queued on a stream "
                                f"still used them ({', '.join(sorted(set(b.users.values())))}; a memory pool may "
                                "hand them out again at once)")


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


class Stream:
    """A stream of a simulated device: its work runs in the order queued. The legacy default stream (``legacy``)
    orders work around it on blocking streams (``blocking``); :meth:`EmulatedLauncher.stream` makes non-blocking ones,
    as the real launchers do, which nothing orders but events."""

    def __init__(self, launcher, blocking=False, legacy=False):
        self.launcher, self.blocking, self.legacy = launcher, blocking or legacy, legacy
        self.last = None  # the last operation queued on it


class Op:
    """One operation queued on a stream: run once every operation in ``deps`` has run."""

    __slots__ = ("seq", "name", "stream", "deps", "run", "keep", "counted", "fault", "done")

    def __init__(self, seq, name, stream, deps, run, keep, counted, fault):
        self.seq, self.name, self.stream, self.deps, self.run = seq, name, stream, deps, run
        self.keep, self.counted, self.fault, self.done = keep, counted, fault, False

    def __repr__(self):
        return f"<{self.name} #{self.seq}{' done' if self.done else ''}>"


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
        self.module.launcher._launch(self, args, grid, block, None, now=True)

    def prepare(self, args, grid, block):
        """The checked launch: ``(run, blocks)``, ``run()`` running the grid, ``blocks`` the device memory
        it points to. Raises as a driver refuses a launch (argument types and count, grid and block)."""
        if block is None:
            raise ValueError("must specify block size")
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: takes {len(self.params)} arguments, {len(args)} given")
        values = [self._value(i, arg, param) for i, (arg, param) in enumerate(zip(args, self.params))]
        grid3, block3 = _dims(self.name, grid, block)
        argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        grid_c, block_c = (ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3)
        blocks = tuple({id(a.allocation.block): a.allocation.block for a in args
                        if isinstance(a, DeviceArray)}.values())

        def run():
            keep = values  # (the arguments live as long as the launch)
            if self._run(argv, grid_c, block_c, self.module.launcher.threads):
                why = self.module.lib.gpumr_launch_error
                why.restype = ctypes.c_char_p
                raise LaunchError(f"{self.name}: {why().decode(errors='replace')}")
            return keep
        return run, blocks

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
    """Load a copy of host build ``path`` that only one :class:`Module` loads; the copy is removed once loaded."""
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
    """The launcher of a simulated GPU: the kernels built for and run on the host, its streams asynchronous.

    Parameters
    ----------
    ordinal : int
    memory : int
        The simulated device's memory (bytes); allocations beyond it raise :class:`DeviceOutOfMemory`.
    sanitize : bool, optional
        Build with AddressSanitizer (default: ``$GPUMR_EMULATE_ASAN`` is ``1``).
    order : str, optional
        ``late``, ``random[:SEED]`` or ``eager`` (default: ``$GPUMR_EMULATE_ORDER``, else ``late``).
    faults : str, optional
        Faults to inject, as :data:`FAULTS_ENV` takes them (default: that variable's).

    Attributes
    ----------
    used, peak : int
        Bytes of device memory allocated now, and at most so far (see :meth:`reset_peak`).
    calls : collections.Counter
        The driver calls made through this launcher, by the interface's method name (``launch``, ``to_device``,
        ``pinned``, ``synchronize`` ...): what a driver would be asked to do, counted so that tests can hold a
        driver's calls per unit of work (see :attr:`syncs`).
    violations : list of str
        CUDA's rules the driver broke that a GPU would not report (memory given back under queued work).
    sticky : DeviceError or None
        The sticky error the device is lost to, once one happened."""

    #: The calls after which the host waits for the device: a synchronisation, waiting for a copy, a
    #: blocking copy back (PyCUDA's ``get``), and a blocking copy to the device (``to_gpu`` from pageable
    #: memory, ordered after every launch queued on the default stream).
    SYNCS = ("synchronize", "wait", "to_host", "to_device")

    name = "emulated"
    out_of_memory = DeviceOutOfMemory

    def __init__(self, ordinal, memory, sanitize=None, order=None, faults=None):
        self.ordinal = ordinal
        self.memory = int(memory)
        self.sanitize = os.environ.get(SANITIZE_ENV) == "1" if sanitize is None else sanitize
        if self.sanitize and not _asan_loaded():
            raise GpumrError(f"{SANITIZE_ENV}=1: the AddressSanitizer build needs gcc's libasan loaded first: run "
                             "with LD_PRELOAD=$(gcc -print-file-name=libasan.so)")
        self.order, seed = parse_order(os.environ.get(ORDER_ENV, "") if order is None else order)
        self._rng = random.Random(seed)
        self.faults = parse_faults(os.environ.get(FAULTS_ENV, "") if faults is None else faults)
        self.threads = len(os.sched_getaffinity(0))
        self.used = self.peak = 0
        self._lock = threading.RLock()  # (re-entered by an allocation's finalizer that a collection runs inside it)
        self.calls = collections.Counter()
        self._queue = threading.RLock()  # the streams and their queued work
        self._legacy = Stream(self, legacy=True)
        self._blocking = weakref.WeakSet()
        self._pending = {}  # seq -> Op queued, not yet run
        self._seq = itertools.count()
        self.sticky = None
        self.violations = []
        self._unreported = []

    # -- bookkeeping -------------------------------------------------------------------------------
    @property
    def syncs(self):
        """Host synchronisations so far: the :attr:`calls` named in :data:`SYNCS`."""
        return sum(self.calls[name] for name in self.SYNCS)

    def _count(self, name):
        with self._lock:
            self.calls[name] += 1

    def _call(self, name, queued=False):
        """Count call ``name``; raise the device's sticky error, or a fault injected at this call. Returns the
        call's label where a sticky fault is to strike when its queued work runs, else None."""
        self._check()
        with self._lock:
            self.calls[name] += 1
            n = self.calls[name]
        kind = self.faults.get((name, n))
        if kind is None:
            return None
        where = f"{name} #{n} on simulated GPU {self.ordinal}"
        if kind == "failure":
            raise DeviceError(f"{where}: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure (injected)")
        if not queued:
            self._lose(where)
        return where

    def _check(self):
        if self.sticky is not None:
            raise type(self.sticky)(str(self.sticky), sticky=True)

    def _lose(self, where, error=None):
        """The device is lost to a sticky error (``error``, else an illegal address at ``where``): nothing queued
        runs any more, and every later call raises it. Raises it."""
        with self._queue:
            if self.sticky is None:
                self.sticky = error or DeviceError(f"{where}: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access "
                                                   "was encountered (injected; the context is lost)", sticky=True)
                self.sticky.sticky = True
            for op in list(self._pending.values()):
                self._retire(op)
        self._check()

    def inject(self, kind, call, n):
        """Inject a fault: ``kind`` (``failure`` or ``sticky``) at the ``n``-th call ``call`` (a name of
        :attr:`calls`) from now.

        Examples
        --------
        >>> lx = EmulatedLauncher(0, 1 << 20)
        >>> lx.inject("failure", "zeros", 2)
        >>> _ = lx.zeros(4, np.float32)
        >>> lx.zeros(4, np.float32)
        Traceback (most recent call last):
        ...
        gpumr.gpu.emulate.DeviceError: zeros #2 on simulated GPU 0: CUDA_ERROR_LAUNCH_FAILED: ...
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"a fault is one of {', '.join(FAULT_KINDS)}, not {kind!r}")
        self.faults[call, self.calls[call] + int(n)] = kind

    def _violation(self, text):
        self.violations.append(text)
        self._unreported.append(text)

    def _report(self):
        if self._unreported:
            text = self._unreported.pop(0)
            raise EmulationError(f"simulated GPU {self.ordinal}: {text}")

    def is_device_error(self, exc):
        return isinstance(exc, DeviceError)

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

    # -- queues --------------------------------------------------------------------------------------
    def pending(self):
        """How many operations are queued and not yet run."""
        with self._queue:
            return len(self._pending)

    def _enqueue(self, stream, name, run, blocks=(), keep=(), after=(), fault=None):
        """Queue ``run()`` on ``stream`` (None: the legacy default stream) after the operations ``after``;
        ``blocks``: the device memory it uses, ``keep``: what must live until it runs. Returns its :class:`Op`."""
        stream = self._legacy if stream is None else stream
        if not isinstance(stream, Stream) or stream.launcher is not self:
            raise TypeError(f"{name}: not a stream of simulated GPU {self.ordinal}: {stream!r}")
        with self._queue:
            deps = [stream.last, *after]
            if stream.legacy:
                deps += [s.last for s in self._blocking]
            elif stream.blocking:
                deps.append(self._legacy.last)
            deps = [d for d in dict.fromkeys(deps) if d is not None and not d.done]
            counted = () if stream.legacy else blocks
            op = Op(next(self._seq), name, stream, deps, run, (*keep, *blocks), counted, fault)
            for b in counted:
                b.users[op.seq] = name
            stream.last = op
            self._pending[op.seq] = op
        if self.order == "eager":
            self._complete([op])
        return op

    def _complete(self, targets):
        """Run the operations ``targets`` and what they wait for, in an order CUDA allows (see the class)."""
        with self._queue:
            needed, stack = {}, [t for t in targets if t is not None and not t.done]
            while stack:
                op = stack.pop()
                if op.seq not in needed and not op.done:
                    needed[op.seq] = op
                    stack.extend(d for d in op.deps if not d.done)
            while needed:
                ready = sorted((op for op in needed.values() if all(d.done for d in op.deps)), key=lambda x: x.seq)
                op = self._rng.choice(ready) if self.order == "random" else ready[-1]
                del needed[op.seq]
                self._execute(op)

    def _execute(self, op):
        if self.sticky is not None or op.fault:
            self._retire(op)
            self._lose(op.fault)
        try:
            op.run()
        except DeviceError as exc:  # a kernel that failed as it ran: the context is lost, as on a GPU
            self._retire(op)
            self._lose(op.name, exc)
        self._retire(op)

    def _retire(self, op):
        if op.done:
            return
        op.done = True
        for b in op.counted:
            b.users.pop(op.seq, None)
        op.run = op.keep = op.counted = None
        op.deps = ()
        self._pending.pop(op.seq, None)

    def _before_host(self):
        """What a blocking call on the legacy default stream waits for: its work, and blocking streams'."""
        with self._queue:
            return [self._legacy.last] + [s.last for s in self._blocking]

    # -- the interface ------------------------------------------------------------------------------
    def module(self, name):
        self._call('module')
        return Module(self, name, *build(name, self.sanitize))

    def _array(self, shape, dtype):
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return DeviceArray(Allocation(self, nbytes), 0, shape, dtype)

    def to_device(self, host):
        fault = self._call('to_device', queued=True)
        data = np.array(host, order="C", copy=True)  # staged before it returns; lands late
        dev = self._array(data.shape, data.dtype)
        self._enqueue(None, "to_device", functools.partial(ctypes.memmove, dev.ptr, data.ctypes.data, data.nbytes),
                      (dev.allocation.block,), (data,), fault=fault)
        return dev

    def zeros(self, shape, dtype):
        fault = self._call('zeros', queued=True)
        dev = self._array(shape, dtype)
        self._enqueue(None, "zeros", functools.partial(ctypes.memset, dev.ptr, 0, dev.nbytes),
                      (dev.allocation.block,), fault=fault)
        return dev

    def to_host(self, dev):
        self._call('to_host')
        self._complete(self._before_host())
        out = np.empty(dev.shape, dev.dtype)
        ctypes.memmove(out.ctypes.data, dev.ptr, dev.nbytes)
        self._report()
        return out

    def set_constant(self, module, name, host):
        ptr, size = module.get_global(name)
        data = np.array(host, order="C", copy=True)  # staged before it returns; lands late
        if data.nbytes > size:
            raise ValueError(f"{name}: {data.nbytes} bytes do not fit its {size}")
        fault = self._call('set_constant', queued=True)
        self._enqueue(None, f"set_constant {name}", functools.partial(ctypes.memmove, ptr, data.ctypes.data,
                                                                      data.nbytes), (), (data, module), fault=fault)

    def copy_to_symbol(self, ptr, data):
        fault = self._call('set_constant', queued=True)
        data = np.array(data, order="C", copy=True)
        self._enqueue(None, "set_constant", functools.partial(ctypes.memmove, ptr, data.ctypes.data, data.nbytes),
                      (), (data,), fault=fault)

    def synchronize(self):
        """Wait for every operation queued on the device."""
        self._call('synchronize')
        with self._queue:
            targets = list(self._pending.values())
        self._complete(targets)
        self._report()

    #: The simulated device's waves: SMs, and blocks of up to 256 threads per SM (what drivers size launches by).
    SMS, BLOCKS_PER_SM = 4, 6

    def resident_blocks(self, fn, threads):
        return self.SMS * self.BLOCKS_PER_SM * max(1, 256 // max(threads, 1))

    def empty(self, shape, dtype):
        self._call('empty')
        return self._array(shape, dtype)

    def zero_async(self, dev, stream):
        fault = self._call('zero_async', queued=True)
        self._enqueue(stream, "zero_async", functools.partial(ctypes.memset, dev.ptr, 0, dev.nbytes),
                      (dev.allocation.block,), fault=fault)

    def view(self, dev, offset, count, dtype):
        check_view(dev.nbytes, offset, count, dtype)
        return DeviceArray(dev.allocation, dev.offset + offset, (count,), dtype)

    def to_device_async(self, host, dev, stream):
        fault = self._call("to_device_async", queued=True)
        check_copy(host, dev)
        self._enqueue(stream, "to_device_async", functools.partial(ctypes.memmove, dev.ptr, host.ctypes.data,
                                                                   host.nbytes),
                      (dev.allocation.block,), (host,), fault=fault)

    def to_host_async(self, dev, host, stream, after=None):
        fault = self._call('to_host_async', queued=True)
        if host.nbytes != dev.nbytes:
            raise ValueError(f"copy of {dev.nbytes} bytes into a host array of {host.nbytes}")
        after = () if after is None else (after.last,)
        return self._enqueue(stream, "to_host_async", functools.partial(ctypes.memmove, host.ctypes.data, dev.ptr,
                                                                        dev.nbytes),
                             (dev.allocation.block,), (host,), after=after, fault=fault)

    def record(self, stream=None):
        self._call("record")
        with self._queue:
            return (self._legacy if stream is None else stream).last

    def wait_event(self, stream, event):
        self._call("wait_event")
        if event is not None:
            self._enqueue(stream, "wait_event", _nothing, after=(event,))

    def wait(self, token):
        self._call("wait")
        if token is not None:
            self._complete([token])
        self._report()

    fft = True

    def filter_rows(self, dev, response, stream):
        fault = self._call("filter_rows", queued=True)
        response = check_filter(dev, response)  # (staged before it returns)
        n = dev.shape[1]

        def run():
            rows = np.frombuffer((ctypes.c_char * dev.nbytes).from_address(dev.ptr), np.float32).reshape(dev.shape)
            spectrum = np.fft.rfft(rows, axis=1)
            spectrum *= response
            rows[...] = np.fft.irfft(spectrum, n=n, axis=1)
        self._enqueue(stream, "filter_rows", run, (dev.allocation.block,), (response,), fault=fault)

    def pinned(self, shape, dtype):
        self._call("pinned")
        out = np.empty(shape, dtype)
        out.view(np.uint8).fill(POISON)  # (not zeros: a copy that has not landed shows)
        return out

    def stream(self, blocking=False):
        self._call("stream")
        s = Stream(self, blocking=blocking)
        if blocking:
            self._blocking.add(s)
        return s

    def launch(self, fn, grid, block, *args):
        self._launch(fn, args, grid, block, None)

    def launch_on(self, stream, fn, grid, block, *args):
        self._launch(fn, args, grid, block, stream)

    def _launch(self, fn, args, grid, block, stream, now=False):
        """Queue kernel ``fn`` on ``stream`` (checked now, as a driver checks a launch); ``now``: run it at once,
        after what the legacy default stream orders before it (a kernel called directly)."""
        fault = None if now else self._call("launch", queued=True)
        self._check()
        if fn.module.launcher is not self:
            raise TypeError(f"{fn.name}: a kernel of another device")
        run, blocks = fn.prepare(args, grid, block)
        op = self._enqueue(stream, f"launch {fn.name}", run, blocks, fault=fault)
        if now:
            self._complete([op])


def _nothing():
    return None
