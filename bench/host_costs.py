"""Every host cost on a job's path, measured here on one core, and the end to end of a GPU node made from them.

Measured with the functions the tasks and the launcher call, one core,
page-cached input on this machine's tmpfs (or its temporary folder):

* faces, per 640x480 JPEG frame: read (the SequenceFile record), decode
  (``Faces.load``), fill (the part's upload into page-locked memory,
  :meth:`gpumr.faces.gpu.FaceGPU.fill`), group (``Found.faces``: boxes,
  ``groupRectangles``, clipping, after the lease), encode (the output line),
  write (the task's part file, hashed as written); per job: start-up (a
  task process that imports and sets the workload up) and publish;
* CT, per projection of a detector size: the launcher's check (each
  projection read and checked once), load (a task reads them all), filter
  (cosine weighting, ramp, the zero border: ``FilteredRows.all``, what the
  GPU path uploads); per byte of volume: receive (a slab copied back into
  host memory), write (``.npy`` through the task's arrays, hashed as
  written), assemble (``gpumr ct assemble`` joining the slabs into one
  ``.npy``); per job: start-up (a task process: imports, workload, the CPU
  backprojector loaded from the kernel cache), publish (per file).

:func:`faces_node` and :func:`ct_node` turn them into a node's end to end,
given the device's figures (:mod:`gpu_model`'s predictions): each phase's
seconds and the bound, the phase that takes longest. Used by
``bench/gpu_model.py`` (its end-to-end table) and ``bench/breakdown.py``
(the picture).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

#: Cores of the GPU node the end to end is predicted for (this machine's per-core costs scaled to it).
NODE_CORES = 16
#: Frames of the face job predicted (about an hour of video): fixed costs spread over them.
JOB_FRAMES = 100_000
#: Slices per CT record (the workload's default ``--slab``).
CT_SLAB = 16
#: Host CPU per driver call (a launch, an asynchronous copy), seconds.
CALL_S = 5e-6
#: Host -> device copies from page-locked memory (GB/s): the CT projections' upload.
PINNED_GBS = 25.0
#: The device's memory (GB/s): an H100 SXM's datasheet figure (the device filter's speed).
DEVICE_GBS = 3350.0


def best(fn, repeat=3):
    """The least seconds of ``repeat`` calls of ``fn``."""
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def process_seconds(code, repeat=2):
    """Seconds a new Python process takes to run ``code`` (least of ``repeat``)."""
    return best(lambda: subprocess.run([sys.executable, "-c", code], check=True, capture_output=True), repeat)


def faces_options(**over):
    """The face workload's options as a task has them (defaults, but ``over``)."""
    import argparse

    from gpumr.faces.workload import Faces
    from gpumr.launch.options import task_options
    o = argparse.Namespace(**{opt.dest: opt.default for opt in task_options(Faces)})
    o.__dict__.update(over)
    return o


def publish_seconds(work, files, size):
    """Seconds the output transaction takes to publish ``files`` staged files of ``size`` bytes (their hashes
    known, as the launcher has them from the tasks)."""
    from gpumr.io.outputs import FolderOutput
    out = os.path.join(work, f"published-{files}")
    output = FolderOutput(out, "gpumr bench")
    stage = output.begin()
    parts = {}
    for i in range(files):
        name = f"part-{i:05d}"
        with open(os.path.join(stage, name), "wb") as f:
            f.write(b"\0" * size)
        parts[name] = (name, size, "0" * 64)
    t0 = time.perf_counter()
    output.commit(parts)
    return time.perf_counter() - t0


def faces_costs(work, det, found, frames=64):
    """Seconds per 640x480 frame of each host step, on one core; and the job's fixed seconds.

    ``det``: a :class:`gpumr.faces.gpu.FaceGPU`; ``found``: what the device
    found in some frames (:class:`gpumr.faces.gpu.Found`, from a run under
    the emulation), whose grouping is timed.
    """
    from _common import frame_corpus

    import seqfile
    from gpumr.core.processor import plain_result
    from gpumr.faces.gpu import PART
    from gpumr.faces.workload import Faces
    from gpumr.io import joboutput
    from gpumr.io.packing import pack
    from gpumr.tasks import output
    paths = frame_corpus(os.path.join(work, "faces"), count=frames, distinct=min(frames, 64))
    seq = os.path.join(work, "frames.seq")
    pack([os.path.dirname(paths[0])], seq, progress=False)
    o = faces_options()
    w = Faces()
    w.resolve(o)
    w.setup(o)
    records = [(k, bytes(v)) for k, v, _ in seqfile.Reader(seq)]
    n = len(records)
    grays = [w.load(k, v, o) for k, v in records]
    per = {"read": best(lambda: [bytes(v) for _, v, _ in seqfile.Reader(seq)]) / n,
           "decode": best(lambda: [w.load(k, v, o) for k, v in records]) / n}
    plans = [(det.plan([g.shape for g in grays[a:a + PART]]), grays[a:a + PART]) for a in range(0, n, PART)]
    buf = np.empty(max(p.layout.upload for p, _ in plans), np.uint8)
    per["fill"] = best(lambda: [det.fill(buf, p, g) for p, g in plans]) / n
    mn = det.params["min_neighbors"]
    per["group"] = best(lambda: [f.faces(mn) for f in found]) / len(found)
    results = [plain_result(k, {"faces": [[10, 20, 30, 30]], "width": 640, "height": 480}, "gpu:0")
               for k, _ in records]
    lines = [joboutput.line(k, v) for (k, _), v in zip(records, results)]
    per["encode"] = best(lambda: [joboutput.line(k, v) for (k, _), v in zip(records, results)]) / n
    stage = os.path.join(work, "stage")
    os.makedirs(stage, exist_ok=True)
    per["write"] = best(lambda: output.write_lines(stage, f"part-{time.perf_counter_ns()}", lines)) / n
    fixed = {"start-up": process_seconds(
        "from gpumr.faces.workload import Faces; import sys; sys.path.insert(0, %r); import host_costs; "
        "o = host_costs.faces_options(); w = Faces(); w.resolve(o); w.setup(o)" % os.path.dirname(__file__)),
        "publish": publish_seconds(work, NODE_CORES, 1 << 20)}
    return per, fixed


def ct_costs(work, sizes=(512, 1024), angles=8):
    """Per detector size ``d`` in ``sizes``: seconds per projection of ``d`` x ``d`` (check, load, filter) and per
    byte of volume (receive, write, assemble), on one core; and the job's fixed seconds."""
    from gpumr.ct import geometry
    from gpumr.ct.bands import FilteredRows
    from gpumr.ct.projections import read_set, write_set
    from gpumr.ct.slices import assemble
    from gpumr.io.outputs import digest, proof_path
    from gpumr.io.proofs import Proof
    from gpumr.tasks.output import ARRAYS, Arrays
    out = {}
    rng = np.random.default_rng(0)
    for d in sizes:
        g = geometry.simple(d, angles, n_detector=d)
        seq = os.path.join(work, f"proj-{d}.seq")
        write_set(seq, rng.random((angles, d, d), dtype=np.float32))
        per = {"check": best(lambda: read_set([seq], g, keep=False), 2) / angles}
        proj = read_set([seq], g)
        per["load"] = best(lambda: read_set([seq], g), 2) / angles
        per["filter"] = best(lambda: FilteredRows(proj, g, "ram-lak").all(), 2) / angles
        slab = rng.random((CT_SLAB, d, d), dtype=np.float32)
        nbytes = slab.nbytes
        dst = np.empty_like(slab)
        per["receive"] = best(lambda: np.copyto(dst, slab)) / nbytes
        stage = os.path.join(work, f"stage-{d}")
        os.makedirs(stage)
        slabs = 4
        keys = [f"z{i * CT_SLAB:05d}" for i in range(slabs)]

        def write():
            arrays = Arrays(stage, f"attempt-{time.perf_counter_ns()}")
            return arrays, [arrays.encode(k, {"slab": slab}) for k in keys]
        per["write"] = best(write, 2) / (slabs * nbytes)
        arrays, written = write()
        folder = os.path.join(work, f"out-{d}")
        os.makedirs(os.path.join(folder, ARRAYS))
        listed = {}
        for name, staged, _, _ in arrays.written:
            os.replace(os.path.join(stage, staged), os.path.join(folder, name))
            listed[name] = list(digest(os.path.join(folder, name)))
        Proof(proof_path(folder), "gpumr run", [listed]).save()  # (what the job writes beside its output)
        results = [(k, {"z": [i * CT_SLAB, (i + 1) * CT_SLAB], "nz": slabs * CT_SLAB, "slab": v["slab"]})
                   for i, (k, v) in enumerate(zip(keys, written))]
        per["assemble"] = best(lambda: assemble(results, [folder], os.path.join(work, f"vol-{d}.npy")), 2) / \
            (slabs * nbytes)
        out[d] = per
    fixed = {"start-up": process_seconds(
        "import numpy as np; from gpumr.ct import geometry; from gpumr.ct.workload import Backproject; "
        "from gpumr.ct.backproject import backproject; g = geometry.simple(8, 4); "
        "backproject(np.zeros((4, *g.nDetector), np.float32), g)"),
        "assemble start-up": process_seconds("import gpumr.ct.slices, gpumr.io.joboutput"),
        "publish per file": publish_seconds(work, 64, 1 << 10) / 64}
    return out, fixed


def bound(phases):
    """The phase that takes longest: its name."""
    return max(phases, key=phases.get)


def faces_node(per, fixed, device_frame_s, driving, frame_bytes=640 * 480, cores=NODE_CORES, frames=JOB_FRAMES):
    """A face job of ``frames`` 640x480 frames on one node: ``(fps, phases)``, ``phases`` the seconds each part of
    the path would take alone over the job (the busiest sets the pace; fixed costs are added).

    Every task holds a GPU slot (``--gpu-slots`` = ``cores``), drives the
    device through its own lane and does its records' host work: the cores
    share read, decode, fill, driver calls (``driving``: calls per part of
    :data:`gpumr.faces.gpu.PART` frames), grouping, encoding and writing;
    the device runs the kernels (``device_frame_s`` per frame) and the
    frames' upload (page-locked) overlaps them; start-up and publish are paid
    once.
    """
    from gpumr.faces.gpu import PART
    calls = sum(v for k, v in driving.items() if k not in ("empty", "pinned", "stream")) / PART
    host = sum(per.values()) + calls * CALL_S
    phases = {"host (read, decode, fill, group, encode, write) on %d cores" % cores: frames * host / cores,
              "GPU kernels": frames * device_frame_s,
              "upload (page-locked)": frames * frame_bytes / (PINNED_GBS * 1e9)}
    total = max(phases.values()) + fixed["start-up"] + fixed["publish"]
    phases.update({"start-up": fixed["start-up"], "publish": fixed["publish"]})
    return frames / total, phases


def ct_node(per, fixed, n, angles, gups, cores=NODE_CORES, slab=CT_SLAB):
    """A CT job, ``n``^3 voxels from ``angles`` projections of ``n`` x ``n``, then ``gpumr ct assemble``, on one
    node: ``(seconds, phases)``, the phases one after another (the longest is the bound).

    As gpumr runs it with ``--device gpu``: ``cores`` tasks (one per core;
    ``n / slab`` records shared among them) and the node's GPU owner; the
    launcher checks every projection once (one core); the tasks start; the
    owner loads every projection once (one core), uploads them through
    page-locked staging, filters every row on the device (:func:`filter_bytes`
    at the device's memory speed) and backprojects every slab (``gups``: as
    the driver feeds it), the slabs' copies back overlapped; the owner's
    connection threads write the slabs as ``.npy``, one per task at once; the
    launcher publishes a file per slab; ``gpumr ct assemble`` starts and joins
    the slabs into one ``.npy``. ``per``: :func:`ct_costs` for the detector
    size ``n``.
    """
    tasks = min(cores, max(1, n // slab))
    proj_bytes = angles * (n + 2) ** 2 * 4
    vol = n ** 3 * 4
    phases = {
        "launcher check (every projection, one core)": angles * per["check"],
        "task start-up (imports, workload, CPU kernel)": fixed["start-up"],
        "load projections (the GPU owner, once, one core)": angles * per["load"],
        "upload projections (page-locked staging, once)": proj_bytes / (PINNED_GBS * 1e9),
        "filter on the device (its memory traffic)": filter_bytes(n, n, angles) / (DEVICE_GBS * 1e9),
        "GPU backprojection (copies back overlapped)": n ** 3 * angles / (gups * 1e9),
        "receive + write .npy (a thread per task)": vol / tasks * (per["receive"] + per["write"]),
        "publish (a file per slab)": (n // slab) * fixed["publish per file"],
        "assemble (start-up, join into one .npy)": fixed["assemble start-up"] + vol * per["assemble"],
    }
    return sum(phases.values()), phases


def filter_bytes(rows, cols, angles):
    """Device memory traffic of the device's FDK filter (:mod:`gpumr.ct.fdk_gpu`) over ``angles`` projections of
    ``rows`` x ``cols``, per detector row: the weighing reads the row and writes its padded transform row (``N``
    floats), the real transform reads it and writes ``N / 2 + 1`` complex values, the response's product reads and
    writes them, the inverse reads them and writes ``N`` floats, the store reads and writes the row.

    Examples
    --------
    >>> filter_bytes(1, 1024, 1)
    69664
    """
    from gpumr.ct.fdk import transform_length
    n = transform_length(cols)
    half = (n // 2 + 1) * 8
    return angles * rows * (4 * cols + 4 * n + 4 * n + half + 2 * half + half + 4 * n + 8 * cols)


def write_json(path, data):
    """Write ``data`` as JSON (the numbers the picture is drawn from)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="gpumr-host-costs-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                     else None) as work:
        print(json.dumps(ct_costs(work, sizes=(256,), angles=4), indent=1))
