"""The end-to-end demo on built-in sample data (the README's main command).

Makes the sample frames, packs them into SequenceFiles, runs the
face-detection job with mrjob's local runner, renders the contact sheet and
prints a summary.
"""

import os
import shutil

from ..core.counters import summary
from ..errors import GpumrError
from ..engines.streaming import run_job
from ..faces.render import render
from ..faces.sample import frame_count, make_frames
from ..io.packing import pack


#: The file that marks a folder as the demo's own; what the demo makes in it.
MARKER = ".gpumr-demo"
MADE = ("frames", "frames.seq", "faces", "pictures")


def prepare_output(output):
    """Make ``output`` ready for the demo without touching anything the demo did not make.

    A new or empty folder is used as it is; an earlier demo output (it holds
    :data:`MARKER`) has the demo's own entries replaced; any other folder
    with something in it is refused.

    Raises
    ------
    GpumrError
        If ``output`` is a file, a link, or a folder holding things the demo did not make.
    """
    if os.path.islink(output) or (os.path.exists(output) and not os.path.isdir(output)):
        raise GpumrError(f"{output}: exists and is not a folder; give the demo a new or empty folder")
    entries = os.listdir(output) if os.path.isdir(output) else []
    if entries and MARKER not in entries:
        raise GpumrError(f"{output}: not empty and not an earlier demo output; give the demo a new or empty folder")
    os.makedirs(output, exist_ok=True)
    for name in MADE:
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    open(os.path.join(output, MARKER), "w").close()


def demo(output, frames=48, shards=2, runner="local", log=print):
    """Run the whole demo into folder ``output`` (see :func:`prepare_output`); returns the summary dict."""
    frame_count(frames)
    prepare_output(output)
    frame_dir = os.path.join(output, "frames")
    seq_dir = os.path.join(output, "frames.seq")
    job_out = os.path.join(output, "faces")
    pictures = os.path.join(output, "pictures")
    log(f"[1/4] making {frames} sample frames (real photos, 640x480 JPEG) in {frame_dir}")
    make_frames(frame_dir, count=frames)
    log(f"[2/4] packing them into {shards} SequenceFiles in {seq_dir}")
    pack([frame_dir], seq_dir, shards=shards, progress=False)
    log(f"[3/4] running the face-detection job (mrjob {runner} runner, {shards} map tasks)")
    from gpumr.jobs.face_detect import MRFaceDetect
    counts, seconds = run_job(MRFaceDetect, [seq_dir], job_out, runner)
    log(f"      {summary(counts, seconds)}")
    log(f"[4/4] drawing the boxes and the contact sheet in {pictures}")
    pics = render([job_out], [seq_dir], pictures)
    log(f"demo: {frames} frames, {pics['faces']} faces, {frames / seconds:.1f} frames/s through the job; "
        f"picture: {pics['sheet']}")
    return dict(frames=frames, faces=pics["faces"], seconds=seconds, fps=frames / seconds, counters=counts,
                sheet=pics["sheet"], output=job_out)
