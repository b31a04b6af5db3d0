"""The end-to-end demo on built-in sample data (the README's main command).

Makes the sample frames, packs them into SequenceFiles, runs the
face-detection job with mrjob's local runner, renders the contact sheet and
prints a summary.
"""

import os
import shutil
import time

from .packing import pack
from .render import render
from .sample import make_frames


def run_face_job(inputs, output_dir, runner="local", extra=()):
    """Run ``gpumr.jobs.face_detect`` through mrjob; returns ``(counters, seconds)``."""
    import logging
    from gpumr.jobs.face_detect import MRFaceDetect
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # no "No configs specified" chatter
    args = ["-r", runner, "--no-conf", *inputs, "--output-dir", output_dir, *extra]
    job = MRFaceDetect(args=args)
    t0 = time.perf_counter()
    with job.make_runner() as r:
        r.run()
        counters = r.counters()
    return counters, time.perf_counter() - t0


def demo(output, frames=48, shards=2, runner="local", log=print):
    """Run the whole demo into directory ``output``; returns the summary dict."""
    if os.path.exists(output):
        shutil.rmtree(output)
    os.makedirs(output)
    frame_dir = os.path.join(output, "frames")
    seq_dir = os.path.join(output, "frames.seq")
    job_out = os.path.join(output, "faces")
    pictures = os.path.join(output, "pictures")
    log(f"[1/4] making {frames} sample frames (real photos, 640x480 JPEG) in {frame_dir}")
    make_frames(frame_dir, count=frames)
    log(f"[2/4] packing them into {shards} SequenceFiles in {seq_dir}")
    pack([frame_dir], seq_dir, shards=shards, progress=False)
    log(f"[3/4] running the face-detection job (mrjob {runner} runner, {shards} map tasks)")
    counters, seconds = run_face_job([seq_dir], job_out, runner)
    log(f"[4/4] drawing the boxes and the contact sheet in {pictures}")
    pics = render([job_out], [seq_dir], pictures)
    group = {}
    for step in counters:
        for name, n in step.get("gpumr", {}).items():
            group[name] = group.get(name, 0) + n
    summary = dict(frames=frames, faces=pics["faces"], seconds=seconds, fps=frames / seconds,
                   counters=group, sheet=pics["sheet"], output=job_out)
    devices = ", ".join(f"{k}={v}" for k, v in sorted(group.items())) or "none"
    log(f"demo: {frames} frames, {pics['faces']} faces, {frames / seconds:.1f} frames/s through the job "
        f"({devices}); picture: {pics['sheet']}")
    return summary
