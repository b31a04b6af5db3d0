"""The end-to-end demo on built-in sample data (``make demo``: :doc:`/getting-started/index`)."""

import os

from ..faces.render import render
from ..faces.sample import frame_count, make_frames
from ..io.outputs import FolderOutput
from ..io.packing import pack
from ..log import logger, report

log = logger(__name__)


def demo(output, frames=48, shards=2, runner="local"):
    """Run the whole demo into folder ``output``, saying each step (stderr) and its summary line (stdout); returns the
    summary dict. Raises ``GpumrError`` if ``output`` is something other than a new or empty folder or an earlier demo
    output."""
    frame_count(frames)
    with FolderOutput(output, "gpumr demo", option="--output") as stage:
        frame_dir = os.path.join(stage, "frames")
        seq_dir = os.path.join(stage, "frames.seq")
        job_out = os.path.join(stage, "faces")
        pictures = os.path.join(stage, "pictures")
        log.info(f"[1/4] making {frames} sample frames (real photos, 640x480 JPEG) in {os.path.join(output, 'frames')}")
        make_frames(frame_dir, count=frames)
        log.info(f"[2/4] packing them into {shards} SequenceFiles in {os.path.join(output, 'frames.seq')}")
        pack([frame_dir], seq_dir, shards=shards, progress=False)
        log.info(f"[3/4] running the face-detection job (mrjob {runner} runner, {shards} map tasks)")
        from ..launch.job import launch
        result = launch(["faces", seq_dir, "-o", job_out, "--engine", runner, "--no-conf"])
        counts, seconds = result.counts, result.seconds
        log.info(f"      {result.summary()}")
        log.info(f"[4/4] drawing the boxes and the contact sheet in {os.path.join(output, 'pictures')}")
        pics = render([job_out], [seq_dir], pictures)
    sheet = os.path.join(output, "pictures", os.path.basename(pics["sheet"]))
    report(f"demo: {frames} frames, {pics['faces']} faces, {frames / seconds:.1f} frames/s through the job; "
        f"picture: {sheet} (the first {pics['on_sheet']} of {frames} frames)")
    return dict(frames=frames, faces=pics["faces"], seconds=seconds, fps=frames / seconds, counters=counts,
                sheet=sheet, output=os.path.join(output, "faces"))
