"""The host's own cost of driving a GPU, measured with no GPU, beside the model's budget for it.

The drivers run on the null launcher (:mod:`gpumr.gpu.null`): every call
taken and counted, no kernel run and no byte copied, so that what is left
is the host's own work as gpumr drives a device (its Python, planning,
host copies into and out of page-locked buffers, allocations). Measured,
as the tasks drive the device, after a warm-up (buffers made, plans kept):

* faces: per part of :data:`gpumr.faces.gpu.PART` frames of 640x480, in
  batches of 16 (the face workload's), the frames' copy into the upload
  included;
* CT: per slab of 16 slices of a 512^3 (512 projections) and a 1024^3 (360
  projections) volume, in calls of 4 slabs (the CT workload's), and per
  volume (the device's set-up, the projections' upload included, and every
  slab); and the FDK filter on the device, once per device (beside it, the
  host's own filter of the same projections, wall time on every core).

Budgets (``bench/gpu_model.py``): a part's host work within
:data:`gpu_model.HOST_PART_S`; a slab's within
:data:`gpu_model.HOST_SLAB_SHARE` of the kernel's time at the rate an H200
measured (:data:`gpu_model.MEASURED_GUPS`), and so a volume's slabs'; the
set-up, once per device, hidden behind the projections' own copy to the
device at the pinned rate (:data:`gpu_model.COPY_GBS`); the filter's
driving within the device's own time for it (its memory traffic at
:data:`host_costs.DEVICE_GBS`, a prediction).

Usage: python bench/host_driving.py [--quick] [--repeat N]
"""

import argparse
import gc
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import table  # noqa: E402 (after the sys.path line that finds it)
from gpu_model import COPY_GBS, HOST_PART_S, HOST_SLAB_SHARE, MEASURED_GUPS  # noqa: E402 (after sys.path)
from host_costs import DEVICE_GBS, filter_bytes  # noqa: E402 (after sys.path)


def null_gpu(memory):
    """A simulated GPU (of ``memory`` bytes: a launcher of its own) driven by a fresh null launcher."""
    from gpumr.devices.nvml import simulated_gpus
    from gpumr.gpu import launch
    from gpumr.gpu.null import NullLauncher
    gpu = simulated_gpus(f"1:{memory}")[0]
    lx = NullLauncher()
    launch.use(gpu, lx)
    return gpu, lx


def trusted(implementation, gpu):
    """Set ``implementation`` (its ``_devices`` and ``_setup``) up on ``gpu``, trusted without a self-check (a null
    device computes nothing); the seconds the set-up took."""
    t0 = time.thread_time()
    st = implementation._setup(gpu)
    took = time.thread_time() - t0
    implementation._devices.trust(gpu, st)
    return took


def best(fn, repeat):
    """The least CPU seconds of this thread in ``repeat`` runs of ``fn`` (what the host spends driving, however
    busy the machine is with other work)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def faces(frames, batch, repeat, size=(640, 480)):
    """Host seconds per part of the faces' GPU path on the null launcher, and the calls per part."""
    import shutil
    import tempfile

    import cv2

    from gpumr.faces.cpu import cascade_path
    from gpumr.faces.gpu import PART, FaceGPU
    from gpumr.faces.sample import make_frames
    work = tempfile.mkdtemp(prefix="gpumr-host-driving-")
    try:
        grays = [cv2.resize(cv2.imread(p, cv2.IMREAD_GRAYSCALE), size)
                 for p in make_frames(os.path.join(work, "frames"), count=min(frames, 32))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    grays = (grays * (frames // len(grays) + 1))[:frames]
    gpu, lx = null_gpu("17GiB")
    det = FaceGPU(cascade_path())
    trusted(det, gpu)
    det.found(grays[:batch], gpu)  # a lane, its buffers, the plans

    def run():
        for i in range(0, len(grays), batch):
            det.found(grays[i:i + batch], gpu)
    lx.calls.clear()
    run()
    parts = -(-len(grays) // PART)
    calls = {k: v / parts for k, v in lx.calls.items()}
    return best(run, repeat) / parts, calls


def ct(n, angles, slab, repeat, per_call=4):
    """Host seconds of the slab path on the null launcher: ``(per slab, set-up)``, and the calls per slab."""
    from gpumr.ct import geometry
    from gpumr.ct.backproject_gpu import SlabBackprojector
    g = geometry.simple(n, angles, n_detector=n)
    padded = np.zeros((angles, n + 2, n + 2), np.float32)  # (untouched pages: the upload reads zeros)
    gpu, lx = null_gpu(f"{80 + n}GiB")
    bp = SlabBackprojector(padded, g, slab=slab)
    bp._devices._expected.result()  # (the CPU's side of the self-check: not to run beside the timing)
    setup = trusted(bp, gpu)
    slabs = [(z, min(z + slab, n)) for z in range(0, n, slab)]
    calls_of = [slabs[i:i + per_call] for i in range(0, len(slabs), per_call)]
    bp.run(calls_of[0], gpu)  # the lane, its slots, the page-locked slabs

    def run():
        for c in calls_of:
            bp.run(c, gpu)  # (each call's slabs let go of before the next, as the task's output writes them)
    lx.calls.clear()
    run()
    calls = {k: v / len(slabs) for k, v in lx.calls.items()}
    per_slab = best(run, repeat) / len(slabs)
    return per_slab, setup, calls


def ct_filter(n, angles, repeat):
    """The FDK filter of ``angles`` projections of ``n`` x ``n``: ``(host filter wall seconds on every core, the
    device filter's host driving seconds on the null launcher, its calls)``."""
    from gpumr.ct import geometry
    from gpumr.ct.backproject import threads
    from gpumr.ct.fdk import filter_projections
    from gpumr.ct.fdk_gpu import filter_on_device
    from gpumr.gpu.null import NullArray
    g = geometry.simple(n, angles, n_detector=n)
    raw = np.random.default_rng(n).random((angles, n, n), dtype=np.float32)
    t0 = time.perf_counter()
    filter_projections(raw, g, threads=threads())
    host = time.perf_counter() - t0
    del raw
    _, lx = null_gpu(f"{90 + n}GiB")
    q = NullArray((angles, n + 2, n + 2), np.float32)
    filter_on_device(lx, q, g)
    lx.calls.clear()
    filter_on_device(lx, q, g)
    calls = dict(lx.calls)
    return host, best(lambda: filter_on_device(lx, q, g), repeat), calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="faces only, and CT at 512^3 (CI)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    part_s, part_calls = faces(64 if args.quick else 256, 16, args.repeat)
    rows.append(["faces: per part of 8 frames 640x480", f"{part_s * 1e3:.3f} ms", f"{HOST_PART_S * 1e3:.2f} ms",
                 "met" if part_s <= HOST_PART_S else "MISSED"])
    call_rows = [["faces, per part", ", ".join(f"{k} {v:g}" for k, v in sorted(part_calls.items()))]]
    for n, angles in ((512, 512),) + (() if args.quick else ((1024, 360),)):
        per_slab, setup, calls = ct(n, angles, 16, args.repeat)
        kernel_slab = 16 * n * n * angles / (MEASURED_GUPS * 1e9)
        kernel_volume = n ** 3 * angles / (MEASURED_GUPS * 1e9)
        rows.append([f"CT {n}^3 from {angles}: per slab of 16", f"{per_slab * 1e3:.3f} ms "
                     f"({100 * per_slab / kernel_slab:.1f}% of the kernel's {kernel_slab * 1e3:.2f} ms)",
                     f"{HOST_SLAB_SHARE * kernel_slab * 1e3:.3f} ms",
                     "met" if per_slab <= HOST_SLAB_SHARE * kernel_slab else "MISSED"])
        slabs = -(-n // 16)
        rows.append([f"CT {n}^3 from {angles}: the volume's {slabs} slabs", f"{per_slab * slabs * 1e3:.1f} ms "
                     f"({100 * per_slab / kernel_slab:.1f}% of the kernels' {kernel_volume:.3f} s)",
                     f"{HOST_SLAB_SHARE * kernel_volume * 1e3:.1f} ms",
                     "met" if per_slab <= HOST_SLAB_SHARE * kernel_slab else "MISSED"])
        upload = angles * (n + 2) ** 2 * 4 / (COPY_GBS[1] * 1e9)
        rows.append([f"CT {n}^3 from {angles}: set-up, once per device (the projections through page-locked "
                     "staging)", f"{setup:.3f} s", f"{upload:.3f} s (the copy's own, at {COPY_GBS[1]:.0f} GB/s)",
                     "hidden" if setup <= upload else "MISSED"])
        call_rows.append([f"CT {n}^3, per slab", ", ".join(f"{k} {v:.3g}" for k, v in sorted(calls.items()))])
        host, driving, calls = ct_filter(n, angles, args.repeat)
        device = filter_bytes(n, n, angles) / (DEVICE_GBS * 1e9)
        rows.append([f"CT {n}^3 from {angles}: the FDK filter, once per device; on the host instead: {host:.2f} s "
                     f"wall on {os.cpu_count()} cores", f"{driving * 1e3:.2f} ms",
                     f"{device * 1e3:.1f} ms (the filter's memory traffic, PREDICTION)",
                     "hidden" if driving <= device else "MISSED"])
        call_rows.append([f"CT {n}^3, the FDK filter", ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))])
    table("The host's own cost of driving a GPU (null launcher: no kernel runs, no byte is copied; best of "
          f"{args.repeat}, CPU time of the driving thread; this machine's host, no GPU used) beside the model's budget",
          ["what", "host, measured", "budget (model)", ""], rows)
    table("Driver calls (null launcher)", ["path", "calls"], call_rows)


if __name__ == "__main__":
    main()
