"""Predicted speed of gpumr's CUDA kernels on one H100 SXM and one A100, with no GPU: every figure a PREDICTION.

What it reads, all without a GPU:

* **nvcc** (``--resource-usage``): registers, spills, stack and shared memory
  per kernel for sm_80 and sm_90, built with gpumr's own flags
  (:data:`gpumr.gpu.kernels.FLAGS`); occupancy from them.
* **cuobjdump -sass** (the ``nvidia-cuda-cuobjdump`` and
  ``nvidia-cuda-nvdisasm`` wheels: ``pip install 'gpumr[model]'``): the
  instructions a warp issues per unit of work, counted on the fast path of
  the kernels' loops (backprojection: per voxel update; faces: per stump,
  per extra rectangle, per tree, per stage, per window).
* **an instrumented emulator run** (``cuda/host_emulation.cuh`` built with
  ``-DGPUMR_TRACE``): the kernels run on the host on real data, every global
  load recorded per (block, warp, lane, source line); a warp's requests are
  rebuilt from them, giving sectors per request, SIMT efficiency (lanes per
  request) and an L1 hit rate (LRU over sectors, the block's share of L1).
* **this host**: the CPU time of the pyramid per frame and of a slab's
  copy into a new host array.

From those, an issue-bound model (warp instructions over
SMs x 4 schedulers x clock, with an issue efficiency range), checked against
L1 and DRAM bounds, and a model of how gpumr drives the kernels today
(waves, synchronous copies, host pyramid), gives fps and GUPS. The table it
prints states its assumptions; nothing here ran on a GPU.

End to end (:func:`end_to_end`): every host cost on the job's path
measured here on one core (``bench/host_costs.py``: record read, JPEG
decode, filtering, packing into the upload, grouping, encoding, writing
.npy and lines, publish, assembly, start-up), scaled to a 16-core node with
one H100 beside the kernels' predictions: faces at 640x480, 512^3 from 512
projections, 1024^3 from 360, each with the phase that bounds it, against
the goals (:data:`GOALS`), all PREDICTIONS; the driver
calls and synchronisations per part, counted under the emulating
launcher, are an input.

Usage: python bench/gpu_model.py [--quick] [--sources DIR] [--flags KERNEL=FLAGS] [--out DIR]

The figures before this change: ``git show cfda500:cuda/backproject.cu`` (and
``haar.cu``) into DIR, then ``--sources DIR --flags backproject=-fmad=false``.
"""

import argparse
import contextlib
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import table  # noqa: E402 (after the sys.path line that finds it)

LABEL = "PREDICTION"

#: The devices modelled: datasheet figures and the assumptions the model adds (stated in the table).
DEVICES = {
    "H100 SXM": dict(arch="90", sms=132, clock_ghz=1.755, regs=65536, max_warps=64, max_blocks=32, l1_kb=256,
                     dram_gbs=3350, l2_gbs=5500),
    "A100 SXM": dict(arch="80", sms=108, clock_ghz=1.41, regs=65536, max_warps=64, max_blocks=32, l1_kb=192,
                     dram_gbs=2039, l2_gbs=3800),
}
#: Fraction of the schedulers' peak issue the kernels reach (latency not fully hidden): low, high.
ISSUE_EFFICIENCY = (0.78, 1.0)
#: Host <-> device copies (GB/s): pageable memory (what gpumr copies into today), pinned memory.
COPY_GBS = (10.0, 25.0)
#: A round trip the host waits for (a small copy back after a launch), seconds.
ROUND_TRIP_S = 20e-6
#: A warp's dependent chain per stump (cycles), when few warps are left to hide it: tree, node and rectangle
#: loads at L1 latency (~33 each), the integral-image loads at L1 or L2 latency (~33-270), ~12 dependent ALU
#: operations (~5 each), the leaf: low, high.
STUMP_CHAIN_CYCLES = (245, 480)
#: Per launch on the device (s): the gap a queued launch leaves between kernels.
LAUNCH_S = 4e-6
#: The host's own budget for driving the device (``bench/host_driving.py`` measures it): per part of 8 frames
#: (s), and per slab as a share of the kernel's time at the rate an H200 measured (GUPS).
HOST_PART_S, HOST_SLAB_SHARE, MEASURED_GUPS = 0.45e-3, 0.05, 928
#: A frame's bytes (640x480 grey), and the instructions per pyramid pixel of a bilinear resize on the GPU.
FRAME_BYTES = 640 * 480
PYRAMID_INSTR_PER_PIXEL = 40
SCHEDULERS = 4
SECTORS_PER_CLOCK_L1 = 4  # 128 bytes per clock per SM
REG_GRANULE = 256


# -- tools -------------------------------------------------------------------
def tool(name):
    """Path of a CUDA tool: on PATH, else from the ``nvidia-cuda-*`` wheels; None if absent."""
    found = shutil.which(name)
    if found:
        return found
    with contextlib.suppress(ImportError):
        import nvidia
        for base in nvidia.__path__:
            hits = sorted(glob.glob(os.path.join(base, "*", "bin", name)))
            if hits:
                return hits[-1]
    return None


def compile_cubin(name, arch, work):
    """``(cubin path, {kernel: resources})`` for kernel ``name`` built as gpumr builds it, for sm_``arch``."""
    from gpumr.gpu import kernels
    nvcc = kernels.nvcc()
    out = os.path.join(work, f"{name}-sm{arch}.cubin")
    cmd = [nvcc, "-cubin", "-O3", "-std=c++14", *kernels.FLAGS.get(name, []), f"-arch=sm_{arch}",
           "--resource-usage", kernels.source_path(name), "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return out, parse_resources(proc.stdout + proc.stderr)


def parse_resources(text):
    """``{kernel: dict(regs, spill_stores, spill_loads, stack, smem)}`` from ptxas's ``-v`` report."""
    found, current = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
        if m:
            current = found.setdefault(m.group(1), dict(regs=0, spill_stores=0, spill_loads=0, stack=0, smem=0))
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(s.group(1)) if s else 0
    return found


def occupancy(regs, threads, smem, dev):
    """``(blocks per SM, warps per SM, fraction of the SM's warps)`` for a kernel's registers and block size."""
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // REG_GRANULE) * REG_GRANULE
    by_regs = (dev["regs"] // per_warp) // warps
    by_warps = dev["max_warps"] // warps
    by_smem = (dev["l1_kb"] * 1024 - 1024) // smem if smem else dev["max_blocks"]
    blocks = max(0, min(by_regs, by_warps, by_smem, dev["max_blocks"]))
    return blocks, blocks * warps, blocks * warps / dev["max_warps"]


def sass(cubin):
    """``{kernel: [(address, instruction), ...]}`` from ``cuobjdump -sass``."""
    exe, dis = tool("cuobjdump"), tool("nvdisasm")
    env = dict(os.environ)
    if dis:
        env["PATH"] = os.path.dirname(dis) + os.pathsep + env.get("PATH", "")
    text = subprocess.run([exe, "-sass", cubin], capture_output=True, text=True, check=True, env=env).stdout
    out = {}
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split(None, 1)[0]
        out[name] = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", part)]
    return out


# -- control flow of SASS: loops and their fast paths --------------------------
_BRA = re.compile(r"^(@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(0x[0-9a-f]+)")


class Flow:
    """One kernel's SASS: its loops (backward branches) and the instructions a warp issues on a path."""

    def __init__(self, ins):
        self.ins = ins
        self.at = {a: i for i, (a, _) in enumerate(ins)}
        self.loops = []  # (start index, back-branch index)
        for i, (_, t) in enumerate(ins):
            m = _BRA.match(t)
            if m and int(m.group(2), 16) <= ins[i][0]:
                self.loops.append((self.at[int(m.group(2), 16)], i))

    def _holds(self, lo, hi, pattern):
        return any(re.search(pattern, t) for _, t in self.ins[lo:hi])

    def walk(self, lo, hi, skip=()):
        """Instructions issued from index ``lo`` to the back branch at ``hi`` (inclusive), once round.

        Inner loops are taken once (their back branch falls through); a
        forward conditional branch is taken when what it skips holds a CALL
        (a slow path, e.g. a division's special cases) or its index is in
        ``skip``; an unconditional one always is.
        """
        n, i, seen = 0, lo, 0
        while i <= hi and seen < 100000:
            seen += 1
            n += 1
            m = _BRA.match(self.ins[i][1])
            if i == hi or not m:
                i += 1
                continue
            target = self.at.get(int(m.group(2), 16), i + 1)
            if target <= i:  # an inner loop's back branch: once round
                i += 1
            elif not m.group(1) or i in skip or self._holds(i + 1, target, r"\bCALL\b"):
                i = target
            else:
                i += 1
        return n

    def guarded(self, lo, hi, pattern):
        """Forward conditional branches in ``[lo, hi]`` that skip a block holding ``pattern``: (index, length)."""
        out = []
        for i in range(lo, hi + 1):
            m = _BRA.match(self.ins[i][1])
            if m and m.group(1):
                target = self.at.get(int(m.group(2), 16), i + 1)
                if i < target <= hi and self._holds(i + 1, target, pattern) and \
                        not self._holds(i + 1, target, r"\bCALL\b"):
                    out.append((i, target - i - 1))
        return out

    def innermost(self, pattern, *also):
        """The smallest loop holding an instruction matching ``pattern`` (and one matching each of ``also``)."""
        hits = [(hi - lo, lo, hi) for lo, hi in self.loops
                if all(self._holds(lo, hi + 1, p) for p in (pattern, *also))]
        return min(hits)[1:] if hits else None

    def enclosing(self, loop):
        """The smallest loop strictly around ``loop``, or None."""
        lo, hi = loop
        outer = [(h - l, l, h) for l, h in self.loops if l <= lo and h >= hi and (l, h) != (lo, hi)]
        return min(outer)[1:] if outer else None

    def mix(self, lo, hi):
        """Instruction classes in ``[lo, hi]``: counts of fp32, integer/address, load, other."""
        kinds = dict(fp32=0, int=0, load=0, other=0)
        for _, t in self.ins[lo:hi + 1]:
            op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
            if op in ("LDG", "LD", "LDC", "ULDC", "LDS"):
                kinds["load"] += 1
            elif op.startswith("F") or op in ("MUFU",):
                kinds["fp32"] += 1
            elif op.startswith(("I", "LEA", "LOP", "SHF", "IMAD", "VI", "U", "MOV", "SEL", "ISETP", "PRMT")):
                kinds["int"] += 1
            else:
                kinds["other"] += 1
        return kinds


def backproject_counts(ins, zb):
    """SASS of ``backproject_slab``: instructions per voxel update (angle loop's fast path / ZB) and per thread."""
    f = Flow(ins)
    loop = f.innermost(r"LDG") or (0, len(ins) - 1)
    per_angle = f.walk(*loop)
    return dict(per_update=per_angle / zb, per_angle=per_angle, setup=f.walk(0, loop[0] - 1) if loop[0] else 0,
                mix={k: v / zb for k, v in f.mix(*loop).items()})


def haar_counts(ins):
    """SASS of a stage-running kernel: instructions per stump (2 rectangles), per extra rectangle, per tree and
    stage beyond its stumps, and per window outside the loops."""
    f = Flow(ins)
    node = f.innermost(r"LDG\.E\.128", r"\bFSETP")  # a node: its feature's loads and its threshold's test
    if node is None:
        return None
    tree = f.enclosing(node) or node
    stage = f.enclosing(tree)
    rects = f.guarded(*node, r"LDG")
    third = {rects[-1][0]} if rects else set()  # the third rectangle's (each rectangle guarded, or the third only)
    rect = rects[-1][1] if rects else 0
    node_all = f.walk(*node)
    tree_all = f.walk(*tree)
    stage_all = f.walk(*stage) if stage else tree_all
    outer = stage or tree
    total_fast = f.walk(0, len(ins) - 1)
    body = f.walk(*outer)
    return dict(stump2=f.walk(*tree, skip=third), stump3=tree_all, rect=rect, node=node_all, tree=tree_all - node_all,
                stage=stage_all - tree_all, window=max(total_fast - body, 0))


# -- the instrumented emulator ---------------------------------------------------
SITES, FIELDS = 4096, 6


def traced_module(lx, name, work):
    """Kernel ``name`` built for the host with ``-DGPUMR_TRACE``, loaded on emulated launcher ``lx``."""
    from gpumr.gpu import emulate, kernels
    source = kernels.source_path(name)
    with open(source, encoding="utf-8") as f:
        text = f.read()
    names, constants = emulate.scan(source, text)
    path = os.path.join(work, f"{name}-trace.so")
    cmd = [emulate.compiler(), *emulate.FLAGS, *emulate.host_flags(name), "-DGPUMR_TRACE", "-iquote",
           os.path.dirname(source), "-include", kernels.package_path(emulate.HEADER), "-x", "c++", "-", "-o", path]
    subprocess.run(cmd, input=emulate._unit(source, text, names, constants), text=True, check=True,
                   capture_output=True)
    mod = emulate.Module(lx, name, path, names, constants)
    mod.lib.gpumr_trace_config.argtypes = [ctypes.c_ulonglong]
    return mod


def take(mod):
    """Per-site totals since the last take: int64 [SITES, 5] (requests, lanes, sectors, sector hits, warps)."""
    buf = np.zeros((SITES, FIELDS), np.uint64)
    mod.lib.gpumr_trace_take(buf.ctypes.data_as(ctypes.c_void_p))
    return buf.astype(np.int64)


def site_lines(name, pattern):
    """Source lines (1-based) of kernel ``name`` matching ``pattern``."""
    from gpumr.gpu import kernels
    with open(kernels.source_path(name), encoding="utf-8") as f:
        return [i + 1 for i, line in enumerate(f) if re.search(pattern, line)]


def summarise(stats, lines):
    """requests, lanes, sectors, hits summed over source ``lines``."""
    rows = stats[[ln % SITES for ln in lines]]
    return dict(requests=int(rows[:, 0].sum()), lanes=int(rows[:, 1].sum()), sectors=int(rows[:, 2].sum()),
                hits=int(rows[:, 3].sum()), warps=int(rows[:, 4].sum()))


def trace_backprojection(n, n_angles, work, l1_sectors, zb):
    """Sectors per request and L1 hit rate of the projection gathers, on a centre and an edge slab of an n^3 run."""
    from gpumr.ct import geometry
    from gpumr.ct.backproject import _axes, _scalars, pad
    from gpumr.gpu.emulate import EmulatedLauncher
    g = geometry.simple(n, n_angles, n_detector=n)
    rng = np.random.default_rng(0)
    proj = pad(rng.random((n_angles, n, n), dtype=np.float32))
    lx = EmulatedLauncher(0, 1 << 40, order="eager")
    mod = traced_module(lx, "backproject", work)
    mod.lib.gpumr_trace_config(l1_sectors)
    fn = mod.get_function("backproject_slab")
    zs, ys, xs = (lx.to_device(a.astype(np.float32)) for a in _axes(g))
    b = np.asarray(g.angles, np.float64)
    trig = np.stack([np.cos(b), np.sin(b)], axis=1).astype(np.float32)
    if "c_trig" in mod.constants:  # (a kernel before its angles' cosines went to global memory)
        lx.set_constant(mod, "c_trig", trig)
        lead = ()
    else:
        lead = (lx.to_device(trig),)
    dproj = lx.to_device(proj)
    k = _scalars(g)
    slab = max(2 * zb, 16)
    totals = np.zeros((SITES, FIELDS), np.int64)
    for z0 in (n // 2 - slab // 2, 0):
        out = lx.zeros((slab, n, n), np.float32)
        grid = (-(-n // 32), -(-n // 8), -(-slab // zb))
        fn(dproj, *lead, np.int32(n_angles), np.int32(k["nv"]), np.int32(k["nu"]), zs[z0:z0 + slab], ys, xs,
           np.int32(slab), np.int32(n), np.int32(n), np.float32(k["dso"]), np.float32(k["dsd"]),
           np.float32(k["cu"]), np.float32(k["cv"]), np.float32(k["inv_du"]), np.float32(k["inv_dv"]),
           *([np.int32(1)] if len(fn.params) - len(lead) == 18 else []), out,  # the angles uncut (none before the cut)
           grid=grid, block=(32, 8, 1))
        totals[:, :5] += take(mod)[:, :5]
    s = summarise(totals, site_lines("backproject", r"__ldg\((?:proj|lower)"))
    return dict(sectors_per_request=s["sectors"] / max(s["requests"], 1), l1_hit=s["hits"] / max(s["sectors"], 1),
                lanes_per_request=s["lanes"] / max(s["requests"], 1), requests=s["requests"])


def trace_faces(frames, work, l1_sectors, run_blocks):
    """Per kernel of the face pipeline: warps, requests and lanes per source line, for ``frames`` (grey, at most
    one part of :data:`gpumr.faces.gpu.PART`, run as one part); the driver calls of that part (counted by the
    emulating launcher, the lane's one-off buffers left out: ``empty``, ``pinned``, ``stream``); and what the
    device found in each frame (:class:`gpumr.faces.gpu.Found`).

    ``run_blocks``: the blocks of ``run_stages`` the modelled device holds at once, the grid the driver gives
    it there (the emulated device's own is a few dozen, which would give each lane many windows in turn).
    """
    from gpumr.faces import gpu as facegpu
    from gpumr.faces.cpu import cascade_path
    from gpumr.gpu import launch as launchmod
    from gpumr.gpu.emulate import EmulatedLauncher

    per_kernel = {}

    class Traced(EmulatedLauncher):
        def module(self, name):
            self._mod = traced_module(self, name, work)
            self._mod.lib.gpumr_trace_config(l1_sectors)
            return self._mod

        def launch_on(self, stream, fn, grid, block, *args):
            super().launch_on(stream, fn, grid, block, *args)
            entry = per_kernel.setdefault(fn.name, dict(stats=np.zeros((SITES, FIELDS), np.int64), threads=0,
                                                        launches=0))
            got = take(self._mod)
            entry["stats"][:, :5] += got[:, :5]
            entry.setdefault("deepest", []).append(got[:, 5].copy())
            entry["threads"] += int(np.prod(grid)) * int(np.prod(block))
            entry["launches"] += 1

    lx = Traced(0, 1 << 40, order="eager")  # (each launch's trace taken as it returns)
    det = facegpu.FaceGPU(cascade_path())
    original = launchmod.launcher
    launchmod.launcher = lambda gpu, prefer=None: lx
    try:
        st = det._setup(None)
        st["run_blocks"] = run_blocks
        lx.calls.clear()
        t0 = time.perf_counter()
        found = det._found(st, list(frames[:facegpu.PART]))
        emu_s = time.perf_counter() - t0
    finally:
        launchmod.launcher = original
    driving = {k: v for k, v in lx.calls.items() if k not in ("empty", "pinned", "stream")}
    driving["syncs"] = sum(v for k, v in driving.items() if k in EmulatedLauncher.SYNCS)
    return per_kernel, det, emu_s, driving, found


# -- host-side measurements ------------------------------------------------------
def host_part_ms(det, frames, repeat=3):
    """CPU milliseconds per frame of the host work a part needs before its upload: its tables (made once per run
    of the same shapes) and frames copied into the page-locked upload (:meth:`gpumr.faces.gpu.FaceGPU.fill`)."""
    plan = det.plan([g.shape for g in frames])
    buf = np.empty(plan.layout.upload, np.uint8)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        det.fill(buf, plan, frames)
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best / len(frames)


def host_slab_ms(nbytes, repeat=3):
    """Host milliseconds to receive ``nbytes`` into a new array (what ``to_host`` does after the copy)."""
    src = np.ones(nbytes // 4, np.float32)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        dst = np.empty_like(src)
        ctypes.memmove(dst.ctypes.data, src.ctypes.data, nbytes)
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


# -- the model ---------------------------------------------------------------------
def issue_rate(dev):
    """Warp instructions per second the SMs can issue (all schedulers, every clock)."""
    return dev["sms"] * SCHEDULERS * dev["clock_ghz"] * 1e9


def predict_backprojection(dev, res, counts, trace, n=512, n_angles=512, slab=16, zb=8, block=(32, 8),
                           pipelined=False, split=1, host_s=0.0):
    """GUPS (kernel alone, as driven) for an n^3 volume from ``n_angles`` projections, slabs of ``slab`` slices."""
    threads = block[0] * block[1]
    blocks_sm, warps_sm, occ = occupancy(res["regs"], threads, res["smem"], dev)
    issue = [issue_rate(dev) * e * 32 / counts["per_update"] for e in ISSUE_EFFICIENCY]
    sectors_per_update = 4 * trace["sectors_per_request"] / 32
    l1 = dev["sms"] * dev["clock_ghz"] * 1e9 * SECTORS_PER_CLOCK_L1 / sectors_per_update
    l2 = dev["l2_gbs"] * 1e9 / 32 / (sectors_per_update * (1 - trace["l1_hit"]))
    kernel = [min(g, l1, l2) for g in issue]
    blocks = -(-n // block[0]) * -(-n // block[1]) * -(-slab // zb)
    slots = blocks_sm * dev["sms"]
    if split == "driver":
        from gpumr.ct.backproject_gpu import split_for_waves
        split = split_for_waves(blocks, slots, n_angles)
    blocks *= split
    waves = -(-blocks // slots) if slots else float("inf")
    fill = blocks / (waves * slots) if slots else 0.0
    updates = slab * n * n * n_angles
    slab_bytes = slab * n * n * 4
    driven = []
    for rate, copy in zip(kernel, COPY_GBS):
        t_kernel = updates / (rate * fill)
        t_copy = slab_bytes / (copy * 1e9) + ROUND_TRIP_S
        t = max(t_kernel, t_copy, host_s) if pipelined else t_kernel + t_copy + host_s
        driven.append(updates / t)
    return dict(occ=occ, blocks_sm=blocks_sm, fill=fill, waves=waves, kernel=kernel, driven=driven, slab=slab,
                split=split,
                bound="issue" if issue[-1] <= min(l1, l2) else "L1/L2", l1_bound=l1)


def face_work(per_kernel, counts, block=256):
    """Warp instructions per frame of each face kernel, from the traced run and the SASS counts."""
    # The loads read once per node, rectangle, tree and stage (a kernel with nodes packed in constant memory:
    # its node load, read once per tree of one node, stands for the tree's; its rectangles' offsets).
    stump = site_lines("haar", r"C\.node_thr|LOAD\(&c_nodes\[")
    rect = site_lines("haar", r"C\.rects|f->r\[r\]")
    tree = site_lines("haar", r"C\.trees|LOAD\(&c_nodes\[")
    stage = site_lines("haar", r"C\.stage_thr|LOAD\(&c_stages\[")
    out = {}
    for name, e in per_kernel.items():
        c = counts.get(name)
        warps = -(-e["threads"] // 32)
        st = e["stats"]
        if c and name in ("first_stage", "run_stages"):
            s, r = summarise(st, stump), summarise(st, rect)
            t, g = summarise(st, tree), summarise(st, stage)
            base = c["stump2"] - c["tree"] - 2 * c["rect"]
            work = (warps * c["window"] + g["requests"] * c["stage"] + t["requests"] * c["tree"] +
                    s["requests"] * base + r["requests"] * c["rect"])
            line = stump[0] % SITES
            out[name] = dict(warp_instr=work, simt=s["lanes"] / max(32 * s["requests"], 1), stumps=s["lanes"],
                             rects_per_stump=r["lanes"] / max(s["lanes"], 1),
                             deepest=sum(int(d[line]) for d in e.get("deepest", [])))
        elif c:
            loads = st[:, 0].sum()
            out[name] = dict(warp_instr=warps * c["setup"] + loads * c["per_load"], simt=None)
        allst = st[:, 2].sum()
        out.setdefault(name, {})["sectors_per_request"] = allst / max(st[:, 0].sum(), 1)
        out[name]["sectors"] = int(allst)
        out[name]["misses"] = int(allst - st[:, 3].sum())
        out[name]["l1_hit"] = st[:, 3].sum() / max(allst, 1)
        out[name]["threads"] = e["threads"]
        out[name]["launches"] = e["launches"]
    return out


def simple_counts(ins):
    """A kernel with one loop of loads: instructions outside it, and inside it per load."""
    f = Flow(ins)
    loop = f.innermost(r"LDG")
    if loop is None:
        return dict(setup=f.walk(0, len(ins) - 1), per_load=0)
    loads = sum(1 for _, t in ins[loop[0]:loop[1] + 1] if re.search(r"\bLDG", t))
    body = f.walk(*loop)
    return dict(setup=f.walk(0, len(ins) - 1) - body, per_load=body / max(loads, 1))


def predict_faces(dev, work, frames, host_ms, pixels_per_frame, driving, part=8):
    """fps of the face kernels at the traced frames' size: dict of (low, high) ranges.

    ``work`` is of the traced frames run as one part (:func:`trace_faces`).
    ``alone1``: the kernels for one frame at a time (a frame's latency: the
    deepest window's chain of stumps, and each launch, paid per frame);
    ``alone``: per part of ``part`` frames (paid once per part), the device's own
    rate (what :func:`host_costs.faces_node` takes); ``driven``: one task
    driving the device as gpumr does (``driving``: the driver calls and host
    synchronisations per part, counted under the emulating launcher), its
    host work before each part's upload (``host_ms`` per frame) overlapped
    with the previous part's kernels, each synchronisation a round trip.
    """
    launches = sum(w["launches"] for w in work.values())  # per part: the traced frames ran as one part
    l1_rate = dev["sms"] * SECTORS_PER_CLOCK_L1 * dev["clock_ghz"] * 1e9
    l2_rate = dev["l2_gbs"] * 1e9 / 32
    clock = dev["clock_ghz"] * 1e9
    out = dict(alone1=[], alone=[], driven=[])
    for e, chain in zip(ISSUE_EFFICIENCY, reversed(STUMP_CHAIN_CYCLES)):
        through = sum(max(w["warp_instr"] / (issue_rate(dev) * e), w["sectors"] / l1_rate, w["misses"] / l2_rate)
                      for w in work.values()) / frames
        # each launch ends with its deepest lane's chain of stumps: paid once per part, as its launches are
        tail = sum(w.get("deepest", 0) for w in work.values()) * chain / clock
        over = LAUNCH_S * launches
        out["alone1"].append(1 / (through + tail + over))
        k = through + (tail + over) / part
        out["alone"].append(1 / k)
        upload = FRAME_BYTES / (COPY_GBS[1] * 1e9)
        trips = driving.get("syncs", 0) * ROUND_TRIP_S / part
        out["driven"].append(1 / (max(k + upload, host_ms / 1e3) + trips))
    return {key: sorted(v) for key, v in out.items()}


def fmt(lo, hi, unit=""):
    """A range; GUPS given in billions of updates per second."""
    if unit.strip() == "GUPS":
        lo, hi = lo / 1e9, hi / 1e9
    return f"{lo:,.0f}-{hi:,.0f}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small traced runs (CI): a 64^3 slab, one frame")
    ap.add_argument("--sources", help="model the .cu files of this folder (e.g. an earlier version)")
    ap.add_argument("--frames", type=int, default=None, help="frames traced as one part (default 1 quick, 3 full)")
    ap.add_argument("--out", default=None, help="write the end-to-end phases as end_to_end.json here "
                                                "(bench/breakdown.py draws them)")
    ap.add_argument("--flags", action="append", default=[], metavar="KERNEL=FLAGS",
                    help="nvcc flags of a kernel (comma-separated; e.g. backproject=-fmad=false for a version "
                         "built that way), replacing gpumr's for this run")
    args = ap.parse_args()
    if args.sources:
        os.environ["GPUMR_CUDA_SOURCES"] = os.path.abspath(args.sources)
    from gpumr.gpu import kernels
    for item in args.flags:
        name, _, flags = item.partition("=")
        kernels.FLAGS[name] = [f for f in flags.split(",") if f]
    if kernels.nvcc() is None:
        print("gpu_model: no nvcc: the model needs the CUDA toolkit's compiler (registers, SASS)")
        return 1
    if tool("cuobjdump") is None:
        print("gpu_model: no cuobjdump: pip install 'gpumr[model]' (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
        return 1
    work = tempfile.mkdtemp(prefix="gpumr-model-")
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    from gpumr.gpu import kernels
    zb = kernels.defines("backproject").get("ZB", 8)
    res, instr = {}, {}
    for arch in ("80", "90"):
        for name in ("backproject", "haar"):
            cubin, r = compile_cubin(name, arch, work)
            res[arch, name] = r
            instr[arch, name] = sass(cubin)
    rows = []
    for (arch, name), r in sorted(res.items()):
        for fn, v in sorted(r.items()):
            dev = next(d for d in DEVICES.values() if d["arch"] == arch)
            threads = 256
            _, warps, occ = occupancy(v["regs"], threads, v["smem"], dev)
            rows.append([f"sm_{arch}", fn, v["regs"], f"{v['spill_stores']}/{v['spill_loads']}", v["stack"],
                         f"{occ:.0%} ({warps} warps)", len(instr[arch, name][fn])])
    table("Kernels as nvcc builds them (gpumr's flags; block of 256 threads) -- compiler facts, not a GPU run",
          ["arch", "kernel", "registers", "spill st/ld B", "stack B", f"occupancy ({LABEL})", "SASS instr"], rows)

    bp = {arch: backproject_counts(instr[arch, "backproject"]["backproject_slab"], zb) for arch in ("80", "90")}
    hc = {}
    for arch in ("80", "90"):
        h = instr[arch, "haar"]
        hc[arch] = {n: haar_counts(h[n]) for n in ("first_stage", "run_stages")}
        for n in h:
            if n not in hc[arch]:
                hc[arch][n] = simple_counts(h[n])
    h90 = hc["90"]["run_stages"]
    table("SASS per unit of work (cuobjdump; fast path of each loop) -- counts, the model's input", ["what", "sm_80",
          "sm_90"], [
        ["backprojection: instructions per voxel update", f"{bp['80']['per_update']:.2f}",
         f"{bp['90']['per_update']:.2f}"],
        ["  of which fp32 / int+address / load (sm_90)", "", "{fp32:.2f} / {int:.2f} / {load:.2f}".format(
            **bp["90"]["mix"])],
        ["faces run_stages: instructions per stump, 2 / 3 rectangles",
         f"{hc['80']['run_stages']['stump2']} / {hc['80']['run_stages']['stump3']}",
         f"{h90['stump2']} / {h90['stump3']}"],
        ["faces run_stages: per stage beyond its trees / per window", "",
         f"{h90['stage']} / {h90['window']}"],
        ["faces integral_rows: instructions per element", f"{hc['80']['integral_rows']['per_load']:.1f}",
         f"{hc['90']['integral_rows']['per_load']:.1f}"],
    ])

    # -- traced runs
    n, n_angles = (64, 32) if args.quick else (128, 128)
    h100 = DEVICES["H100 SXM"]
    b_sm, _, _ = occupancy(res["90", "backproject"]["backproject_slab"]["regs"], 256, 0, h100)
    t0 = time.perf_counter()
    bt = trace_backprojection(n, n_angles, work, h100["l1_kb"] * 1024 // 32 // max(b_sm, 1), zb)
    bt_s = time.perf_counter() - t0
    import cv2

    from gpumr.faces.gpu import PART
    from gpumr.faces.sample import make_frames
    n_frames = min(args.frames or (1 if args.quick else 3), PART)
    paths = make_frames(os.path.join(work, "frames"), count=n_frames)
    frames = [cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths]
    f_sm, _, _ = occupancy(res["90", "haar"]["run_stages"]["regs"], 256, 0, h100)
    l1_share = h100["l1_kb"] * 1024 // 32 // max(f_sm, 1)
    per_kernel, det, emu_s, driving, found = trace_faces(frames, work, l1_share, f_sm * h100["sms"])
    fw = {arch: face_work(per_kernel, hc[arch]) for arch in ("80", "90")}
    part_ms = host_part_ms(det, frames)
    pixels = sum(lv[1][0] * lv[1][1] for lv in det._levels(frames[0].shape))
    slab_ms = host_slab_ms(16 * 512 * 512 * 4)
    rows = [["backprojection gathers (projections)", f"{bt['sectors_per_request']:.2f}", f"{bt['l1_hit']:.0%}",
             f"{bt['lanes_per_request']:.1f}", ""]]
    for name in ("integral_rows", "first_stage", "run_stages"):
        w = fw.get("90", {}).get(name)
        if w:
            rows.append([f"faces {name}", f"{w['sectors_per_request']:.1f}", f"{w['l1_hit']:.0%}",
                         f"{w['simt']:.2f}" if w.get("simt") is not None else "",
                         w["deepest"] if "deepest" in w else ""])
    table(f"Warp traffic from the instrumented emulator (traced: {n}^3 from {n_angles} angles, {bt_s:.0f} s; "
          f"{n_frames} frame(s) {frames[0].shape[1]}x{frames[0].shape[0]} as one part, {emu_s:.0f} s; survivors in "
          f"the order the kernels append them) -- L1 modelled, a {LABEL} for a GPU",
          ["loads", "sectors/request", "L1 hit (model)", "SIMT efficiency", "deepest lanes of the part's launches (stumps)"],
          rows)
    table("Driver calls per part of frames, counted under the emulating launcher (the model's input; a lane's "
          "buffers, made once, left out)", ["call", "per part"],
          [[k, v] for k, v in sorted(driving.items()) if k != "syncs"] + [["host synchronisations", driving["syncs"]]])

    bp_rows, face_rows, kernels_h100 = [], [], {}
    for dname, dev in DEVICES.items():
        arch = dev["arch"]
        r = res[arch, "backproject"]["backproject_slab"]
        old = predict_backprojection(dev, r, bp[arch], bt, zb=zb, host_s=slab_ms / 1e3)
        now = predict_backprojection(dev, r, bp[arch], bt, zb=zb, pipelined=True, split="driver",
                                     host_s=slab_ms / 1e3)
        bp_rows.append([dname, f"{old['occ']:.0%}", old["bound"], fmt(*old["kernel"], " GUPS"),
                        f"{fmt(*old['driven'], ' GUPS')} ({old['fill']:.0%} of waves)",
                        f"{fmt(*now['driven'], ' GUPS')} ({now['fill']:.0%} of waves, {now['split']} parts)"])
        pnow = predict_faces(dev, fw[arch], len(frames), part_ms, pixels, driving, part=PART)
        face_rows.append([dname, fmt(*pnow["alone1"], " fps"), fmt(*pnow["alone"], " fps"),
                          fmt(*pnow["driven"], " fps")])
        if dname == "H100 SXM":
            kernels_h100 = dict(faces=pnow["alone"], ct={
                (cn, ca): predict_backprojection(dev, r, bp[arch], bt, n=cn, n_angles=ca, zb=zb, pipelined=True,
                                                 split="driver", host_s=slab_ms / 1e3 * (cn / 512) ** 2)["driven"]
                for cn, ca in CT_CASES})
    table(f"{LABEL}S for CT backprojection (no GPU ran): 512^3 from 512 projections, gpumr's 16-slice slabs",
          ["device", "occupancy", "bound", f"kernel alone ({LABEL})",
           f"driven one slab at a time, copy synchronous ({LABEL})",
           f"driven as gpumr does now: copies overlapped, angles cut to fill waves ({LABEL})"], bp_rows)
    table(f"{LABEL}S for face detection (no GPU ran): 640x480 frames, default cascade, scale 1.1",
          ["device", f"kernels, one frame at a time ({LABEL})", f"kernels, parts of {PART} ({LABEL})",
           f"one task driving it: {driving['syncs']} wait per part, next part filled meanwhile ({LABEL})"],
          face_rows)
    end_to_end(args, work, det, found, driving, kernels_h100)
    stages = fw["90"].get("run_stages", {})
    print(f"\nAssumptions of every {LABEL.lower()} above:")
    for line in [
        "throughput: per kernel the largest of warp instructions (SASS fast path x traced warp requests) over "
        f"SMs x 4 schedulers x clock at {ISSUE_EFFICIENCY[0]:.0%}-{ISSUE_EFFICIENCY[1]:.0%} issue efficiency, "
        f"traced sectors over L1's {SECTORS_PER_CLOCK_L1} sectors/clock/SM, modelled L1 misses over L2 bandwidth",
        "clocks: " + ", ".join(f"{k} {v['clock_ghz']} GHz, {v['sms']} SMs, L2 {v['l2_gbs']} GB/s"
                               for k, v in DEVICES.items()),
        f"copies {COPY_GBS[0]:.0f} GB/s (pageable: low end of each range) to {COPY_GBS[1]:.0f} GB/s (pinned: high "
        f"end); {ROUND_TRIP_S * 1e6:.0f} us per synchronisation the host waits for; {LAUNCH_S * 1e6:.0f} us per "
        "launch on the device",
        "backprojection: a launch's last wave idles what its blocks leave empty (wave fill); driven one slab at "
        "a time (gpumr before its pipelining) each copy back and the host's receiving of the slab (measured "
        f"here: {slab_ms:.2f} ms per 16-slice slab) wait; pipelined, a slab costs the largest of its kernel, its "
        "copy and that receiving",
        f"faces: the deepest lane's chain of stumps ({STUMP_CHAIN_CYCLES[0]}-{STUMP_CHAIN_CYCLES[1]} cycles each) "
        f"bounds each launch's end; paid per frame one frame at a time, once per part of {PART} as gpumr drives",
        f"faces as driven by one task: per part one upload of its frames and tables (filled in {part_ms:.2f} ms per "
        f"frame, measured here, while the device runs the part before), {driving.get('launch', 0)} launches, "
        f"one copy back and {driving['syncs']} synchronisation; survivor counts stay on the device",
        f"faces work from the traced frames (gpumr's sample frames): run_stages SIMT efficiency "
        f"{stages.get('simt', 0):.2f}, {stages.get('rects_per_stump', 0):.2f} rectangles per stump",
        "the independent analysis (issue 28) gave: backprojection 40 registers, 75% occupancy, 36.75 SASS per "
        "update, 3.1 sectors/request, 640-820 GUPS alone, 380-575 as driven; faces ~1,730 fps kernels alone, "
        "~610 fps as driven",
    ]:
        print(f"  - {line}")
    return 0


#: The CT jobs predicted end to end: (n, projections of n x n) for an n^3 volume.
CT_CASES = ((512, 512), (1024, 360))
#: The goals, as predictions until a GPU measures them: faces fps (at least), CT seconds (at most).
GOALS = {"faces": 4000.0, (512, 512): 3.0, (1024, 360): 5.0}


def end_to_end(args, work, det, found, driving, kernels):
    """The end-to-end tables: host costs measured here on one core; each job on one node of
    :data:`host_costs.NODE_CORES` cores and one H100 (the kernels' predictions), phases, bound, goal."""
    import host_costs as hc
    t0 = time.perf_counter()
    face_per, face_fixed = hc.faces_costs(work, det, found, frames=16 if args.quick else 64)
    sizes = (256,) if args.quick else tuple(n for n, _ in CT_CASES)
    ct_per, ct_fixed = hc.ct_costs(work, sizes=sizes, angles=4 if args.quick else 8)
    took = time.perf_counter() - t0

    def per_size(n):  # a size not measured (--quick): the nearest one measured, per pixel or byte as it scales
        d = min(ct_per, key=lambda m: abs(m - n))
        scale = (n / d) ** 2
        return {k: v * (scale if k in ("check", "load", "filter") else 1.0) for k, v in ct_per[d].items()}
    rows = [[f"faces: {k}", f"{v * 1e3:.3f} ms per frame"] for k, v in face_per.items()]
    rows += [[f"faces job: {k}", f"{v:.3f} s"] for k, v in face_fixed.items()]
    for d, per in sorted(ct_per.items()):
        rows += [[f"CT {d}x{d}: {k}", f"{v * 1e3:.2f} ms per projection" if k in ("check", "load", "filter") else
                  f"{1 / v / 1e9:.2f} GB/s"] for k, v in per.items()]
    rows += [[f"CT job: {k}", f"{v:.3f} s"] for k, v in ct_fixed.items()]
    table(f"Host costs on the job's path, measured here on one core of this machine ({took:.0f} s; page-cached, "
          f"tmpfs){' -- --quick: CT at 256x256 only, scaled per pixel' if args.quick else ''}",
          ["what", "measured"], rows)

    fps, face_phases = [], None
    for rate in kernels["faces"]:
        f, face_phases = hc.faces_node(face_per, face_fixed, 1 / rate, driving)
        fps.append(f)
    results = [["faces 640x480, %d frames" % hc.JOB_FRAMES, f">= {GOALS['faces']:,.0f} fps",
                fmt(min(fps), max(fps), " fps"), hc.bound({k: v for k, v in face_phases.items()
                                                            if k not in ("start-up", "publish")}),
                "met" if min(fps) >= GOALS["faces"] else ("missed" if max(fps) < GOALS["faces"] else "in range")]]
    phases_rows = {k: [f"{v:.2f}"] for k, v in face_phases.items()}
    columns = [f"faces, {hc.JOB_FRAMES} frames (s)"]
    for (n, na) in CT_CASES:
        per = per_size(n)
        secs = []
        for gups in kernels["ct"][n, na]:
            t, phases = hc.ct_node(per, ct_fixed, n, na, gups / 1e9)
            secs.append(t)
        assembled = phases["assemble (start-up, join into one .npy)"]
        slabs = [t - assembled for t in secs]
        goal = GOALS[n, na]
        to_slabs = {k: v for k, v in phases.items() if not k.startswith("assemble")}
        results.append([f"CT {n}^3 from {na} projections of {n}^2", f"<= {goal:g} s",
                        f"{min(slabs):.1f}-{max(slabs):.1f} s to the slabs; {min(secs):.1f}-{max(secs):.1f} s "
                        "with one .npy", f"{hc.bound(to_slabs)}; then assembly {assembled:.1f} s",
                        "met" if max(slabs) <= goal else ("missed" if min(slabs) > goal else "in range")])
        for k, v in phases.items():
            phases_rows.setdefault(k, [""] * len(columns)).append(f"{v:.2f}")
        columns.append(f"CT {n}^3 / {na} (s)")
        for row in phases_rows.values():
            row += [""] * (len(columns) - len(row))
    table(f"{LABEL}S end to end (no GPU ran): one node of {hc.NODE_CORES} cores (this machine's per-core host "
          f"costs) and one H100 SXM (the kernels' {LABEL.lower()}s above, low-high)",
          ["job", f"goal ({LABEL})", f"end to end ({LABEL})", "bound", "goal"], results)
    table(f"Where the time goes, {LABEL}S (no GPU ran): faces, the seconds each part of the path would take alone "
          "(the busiest sets the pace; start-up and publish added); CT, phases one after another (the kernels' "
          "high figure)", ["phase"] + columns, [[k] + v for k, v in phases_rows.items()])
    hc.write_json(os.path.join(args.out, "end_to_end.json") if args.out else os.devnull,
                  {"faces": face_phases, "ct": {f"{n}^3/{na}": hc.ct_node(per_size(n), ct_fixed, n, na,
                                                                         max(kernels["ct"][n, na]) / 1e9)[1]
                                                for n, na in CT_CASES}})


if __name__ == "__main__":
    sys.exit(main())
