"""Where a GPU path's time goes: every driver call timed, as gpumr drives the device and each call alone.

The H200 check of 2026-11-27 (docs/lab-notes/gpu.rst) found the kernels as
fast as the model said and the paths around them slower than predicted:
the time is in what surrounds the kernels, which the model cannot see. This profile puts a :class:`Phases` launcher
between a driver and its launcher (PyCUDA, CuPy or the emulation) and runs
the path twice:

* **as driven**: the calls as gpumr makes them. A queued call (a launch, an
  asynchronous copy, a zeroing) costs the host only its own overhead; the
  device's time shows in the calls that wait for it (``wait``,
  ``synchronize``, a blocking copy);
* **each call alone**: the device synchronised after every queued call,
  inside that call's timing: what each kernel and copy costs the device
  by itself, overlap removed.

The host's time between the calls (the path's wall time less its calls')
is split into the parts timed by name (receiving each slab into its
array; copying a part's frames into its upload) and the rest of the
driver's own Python (planning, building results). Per slab (CT) or per part of
:data:`gpumr.faces.gpu.PART` frames (faces); the faces' grouping
(``groupRectangles``, after the lease) on its own row.

Usage: python bench/gpu_phases.py [--ct 512 --angles 512 --slab 16] [--frames 256 --batch 16]
       [--emulate]   (the kernels on the host: the structure and the host's share only, no GPU's time)
"""

import argparse
import collections
import contextlib
import time

import numpy as np
from _common import table

#: The interface's calls a driver makes while it runs (:class:`gpumr.gpu.interface.Launcher`).
TIMED = ("to_device", "zeros", "to_host", "empty", "zero_async", "view", "to_device_async", "pinned",
         "to_host_async", "wait", "launch", "launch_on", "set_constant", "synchronize", "resident_blocks", "stream",
         "record", "wait_event")
#: The calls that only queue work on the device: synchronised after, when each call is timed alone. An upload
#: from pageable memory (``to_device``) is one: it returns once its data is staged, and lands later.
QUEUED = ("to_device", "zeros", "zero_async", "to_device_async", "to_host_async", "launch", "launch_on",
          "set_constant", "record", "wait_event")


class Phases:
    """A launcher that forwards every call to ``lx`` and times it on the host, by call (a launch by its kernel).

    Parameters
    ----------
    lx : gpumr.gpu.interface.Launcher
        The launcher timed (its other attributes pass through).
    kernels : dict, optional
        ``{id(function): name}``: the kernels' names for their launches' rows.
    alone : bool, optional
        Synchronise the device after each queued call, inside its timing (see the module's text).

    Attributes
    ----------
    seconds, calls : collections.Counter
        Host seconds inside each kind of call, and how many were made.

    Examples
    --------
    >>> from gpumr.gpu.interface import Launcher
    >>> class Host(Launcher):
    ...     def zeros(self, shape, dtype):
    ...         return np.zeros(shape, dtype)
    >>> lx = Phases(Host())
    >>> lx.zeros((2,), np.float32).tolist(), dict(lx.calls)
    ([0.0, 0.0], {'zeros': 1})
    """

    def __init__(self, lx, kernels=None, alone=False):
        self._lx = lx
        self._kernels = dict(kernels or {})
        self.alone = alone
        self.seconds = collections.Counter()
        self.calls = collections.Counter()

    def __getattr__(self, name):
        target = getattr(self._lx, name)
        if name not in TIMED:
            return target

        def timed(*args, **kwargs):
            what = name
            if name in ("launch", "launch_on"):
                fn = args[1] if name == "launch_on" else args[0]
                what = f"launch {self._kernels.get(id(fn), getattr(fn, 'name', 'kernel'))}"
            t0 = time.perf_counter()
            try:
                out = target(*args, **kwargs)
                if self.alone and name in QUEUED:
                    self._lx.synchronize()
                return out
            finally:
                self.seconds[what] += time.perf_counter() - t0
                self.calls[what] += 1
        return timed


class Pass:
    """One run of a path through a :class:`Phases` ``lx``: its wall seconds, the host's parts timed inside it
    (:meth:`host_part`) and the rows timed outside it (``outside``: ``{row: seconds}``)."""

    def __init__(self, lx):
        self.lx, self.wall, self.host, self.outside = lx, 0.0, collections.Counter(), {}

    @contextlib.contextmanager
    def host_part(self, owner, attr, label):
        """Meanwhile, time ``owner.attr`` (a function the driver calls through its instance, e.g. a static
        method) as the host's part ``label``, less the launcher calls made inside it."""
        original, own = getattr(owner, attr), vars(owner).get(attr)

        def timed(*args, **kwargs):
            calls, t0 = sum(self.lx.seconds.values()), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.host[label] += time.perf_counter() - t0 - (sum(self.lx.seconds.values()) - calls)
        setattr(owner, attr, timed)
        try:
            yield
        finally:
            if own is None:
                delattr(owner, attr)  # the class's own shows again
            else:
                setattr(owner, attr, own)


@contextlib.contextmanager
def timing(st, kernels, alone):
    """Drive through a :class:`Phases` of the device state ``st``'s launcher meanwhile: yields its :class:`Pass`."""
    inner = st["lx"]
    st["lx"] = lx = Phases(inner, kernels, alone)
    try:
        yield Pass(lx)
    finally:
        st["lx"] = inner


def rows_of(passes, units, unit):
    """The table's rows: per call kind, calls and milliseconds per ``unit`` in each pass, and its share of the
    wall time as driven; then the host's parts between the calls, the wall time, and the rows timed outside it.

    ``passes``: ``{"driven": Pass, "alone": Pass}`` (see :class:`Pass`).
    """
    driven, alone = passes["driven"], passes["alone"]
    kinds = sorted(set(driven.lx.seconds) | set(alone.lx.seconds), key=lambda k: -alone.lx.seconds.get(k, 0.0))

    def ms(s):
        return f"{1e3 * s / units:.3f}"

    def share(s):
        return f"{100 * s / driven.wall:.0f}%" if driven.wall else "-"
    rows = [[k, f"{driven.lx.calls[k] / units:.2f}", ms(driven.lx.seconds[k]), ms(alone.lx.seconds[k]),
             share(driven.lx.seconds[k])] for k in kinds]
    rest = [p.wall - sum(p.lx.seconds.values()) - sum(p.host.values()) for p in (driven, alone)]
    for label in driven.host:
        rows.append([f"host: {label}", "-", ms(driven.host[label]), ms(alone.host[label]), share(driven.host[label])])
    rows.append(["host: the rest of the driver's own Python", "-", ms(rest[0]), ms(rest[1]), share(rest[0])])
    rows.append([f"wall, per {unit}", "-", ms(driven.wall), ms(alone.wall), "100%"])
    for label in driven.outside:
        rows.append([f"{label} (outside the wall above)", "-", ms(driven.outside[label]), ms(alone.outside[label]),
                     "-"])
    return rows


def header(unit):
    """The table's header, per ``unit`` (slab or part)."""
    return ["call", f"calls per {unit}", f"ms per {unit}, as driven", f"ms per {unit}, each alone", "share as driven"]


def ct(gpu, n, angles, slab, where):
    """The slab path for an ``n``^3 volume from ``angles`` random filtered projections, slabs of ``slab``
    slices, after a warm-up run (set-up, self-check, both slots made): the projections' upload as the driver
    makes it (chunks through page-locked staging, then a synchronisation) and ``SlabBackprojector.run`` of
    every slab, as ``bench/backproject_gpu.py`` times it."""
    from gpumr.ct import geometry
    from gpumr.ct.backproject import pad
    from gpumr.ct.backproject_gpu import SlabBackprojector
    g = geometry.simple(n, angles, n_detector=n)
    q = np.random.default_rng(n).standard_normal((g.n_angles, *g.nDetector), dtype=np.float32)
    bp = SlabBackprojector(pad(q), g)
    slabs = [(z, min(z + slab, n)) for z in range(0, n, slab)]
    bp.run(slabs[:2], gpu)  # set-up, self-check, both slots
    st = bp.state(gpu)
    passes = {}
    for name, alone in (("driven", False), ("alone", True)):
        with timing(st, {id(st["fn"]): "backproject_slab"}, alone) as p, \
                p.host_part(bp, "_upload", "filling the projections' page-locked staging (once per device)"), \
                p.host_part(st["host"], "take", "taking each slab's page-locked buffer"):
            t0 = time.perf_counter()
            with p.lx.active():
                st["proj"] = bp._upload(p.lx, gpu)  # the path includes the upload, once per task and device
                p.lx.synchronize()
            got = bp.run(slabs, gpu)
            p.wall = time.perf_counter() - t0
        passes[name] = p
        assert sum(s.shape[0] for s in got) == n
    updates = n ** 3 * angles
    wall = passes["driven"].wall
    rows = rows_of(passes, len(slabs), "slab")
    table(f"Where the slab path's time goes: {n}^3 from {angles} projections, slabs of {slab}, on {where}; as "
          f"driven {wall:.3f} s, {updates / wall / 1e9:.3g} GUPS", header("slab"), rows)
    return rows


def faces(gpu, frames, batch, where, size=(640, 480)):
    """The faces' kernel path (``FaceGPU.found`` on batches of ``batch`` grey frames of ``size``, the sample
    frames' 640x480 by default) and the grouping of each frame's windows (``Found.faces``), after a warm-up
    batch."""
    import shutil
    import tempfile

    import cv2
    from _common import frame_corpus

    from gpumr.faces import gpu as facegpu
    from gpumr.faces.cpu import cascade_path
    work = tempfile.mkdtemp(prefix="gpumr-phases-")
    try:
        paths = frame_corpus(work, count=frames, distinct=min(frames, 64))
        grays = [cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths]
        grays = [g if g.shape[::-1] == tuple(size) else cv2.resize(g, tuple(size), interpolation=cv2.INTER_AREA)
                 for g in grays]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    det = facegpu.FaceGPU(cascade_path())
    det.found(grays[:batch], gpu)  # set-up, self-check, a lane
    st = det._devices.get(gpu)
    names = {id(fn): name for name, fn in st["fns"].items()}
    passes = {}
    for name, alone in (("driven", False), ("alone", True)):
        with timing(st, names, alone) as p, \
                p.host_part(det, "fill", "copying each part's tables and frames into its page-locked upload"):
            found, t0 = [], time.perf_counter()
            for i in range(0, len(grays), batch):
                found.extend(det.found(grays[i:i + batch], gpu))
            p.wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        n_faces = sum(len(f.faces(det.params["min_neighbors"])) for f in found)
        p.outside["grouping (groupRectangles, after the lease)"] = time.perf_counter() - t0
        passes[name] = p
    parts = passes["driven"].lx.calls["to_device_async"]  # (one upload per part)
    wall = passes["driven"].wall
    rows = rows_of(passes, parts, "part")
    table(f"Where the faces' kernel path's time goes: {len(grays)} frames of {size[0]}x{size[1]}, batches of "
          f"{batch}, in {parts} parts of at most {facegpu.PART}, on {where}; as driven {wall:.3f} s, "
          f"{len(grays) / wall:.0f} fps before grouping; {n_faces} faces", header("part"), rows)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct", type=int, default=512, metavar="N", help="volume of N^3 (0: no CT)")
    ap.add_argument("--angles", type=int, default=512)
    ap.add_argument("--slab", type=int, default=16)
    ap.add_argument("--frames", type=int, default=256, help="frames for faces (0: no faces)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", default="640x480", help="the faces' frames, WxH (the sample frames resized)")
    ap.add_argument("--emulate", action="store_true",
                    help="a simulated GPU: the kernels run on the host (the calls' structure and the host's share; "
                         "no GPU's time)")
    args = ap.parse_args()
    if args.emulate:
        from gpumr.devices.nvml import simulated_gpus
        from gpumr.gpu import emulate
        ok, why = emulate.available()
        if not ok:
            raise SystemExit(f"gpu_phases: --emulate: {why}")
        gpu, where = simulated_gpus("1")[0], "a simulated GPU (EMULATED: the kernels on the host, no GPU's times)"
    else:
        from gpumr.devices.nvml import discover
        gpus = discover().gpus
        if not gpus:
            raise SystemExit("gpu_phases: no NVIDIA GPU here (--emulate runs the kernels on the host)")
        from gpumr.gpu.launch import launcher
        gpu = gpus[0]
        where = f"{gpu.name} (launcher {launcher(gpu).name})"
    print(f"gpu_phases: {where}", flush=True)
    if args.ct:
        ct(gpu, args.ct, args.angles, args.slab, where)
    if args.frames:
        faces(gpu, args.frames, args.batch, where, tuple(int(v) for v in args.size.lower().split("x")))


if __name__ == "__main__":
    main()
