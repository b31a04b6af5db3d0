"""``gpumr faces render`` and ``gpumr demo``."""

from ..log import report
from .args import command, positive


def cmd_render(args):
    from ..faces.render import render
    r = render(args.outputs, args.images, args.directory, sheet_frames=args.sheet_frames)
    report(f"drew {r['faces']} faces on {r['frames']} of {r['records']} frames in {args.directory}"
           + (f" ({r['errors']} records had errors)" if r["errors"] else "")
           + f"; contact sheet: {r['sheet']} ({r['on_sheet']} of {r['frames']} frames"
           + (", --sheet-frames N for more)" if r["on_sheet"] < r["frames"] else ")"))


def cmd_demo(args):
    from .demo import demo
    demo(args.output, frames=args.frames, shards=args.shards, runner=args.runner)


def register(sub):
    """Add ``faces`` and ``demo`` to the ``gpumr`` parser."""
    s = sub.add_parser("faces", help="face-detection results", description="Face-detection results.")
    fs = s.add_subparsers(dest="action", metavar="ACTION")
    fs.required = True
    r = command(fs, "render", "draw boxes onto the frames and make a contact sheet PNG", cmd_render)
    r.add_argument("outputs", nargs="+", metavar="OUTPUT", help="job output files or folders")
    r.add_argument("--images", nargs="+", required=True, metavar="SEQ", help="the SequenceFiles the job read")
    r.add_argument("-d", "--directory", required=True, metavar="DIR", help="where the pictures go")
    r.add_argument("--sheet-frames", type=positive, default=12, metavar="N",
                   help="frames on the contact sheet (default 12, at most 100)")

    d = command(sub, "demo", "run the face-detection job end to end on built-in sample frames", cmd_demo)
    d.add_argument("--output", default="demo-out", metavar="DIR",
                   help="folder for everything the demo makes (default demo-out)")
    d.add_argument("--frames", type=positive, default=48, metavar="N", help="sample frames (default 48)")
    d.add_argument("--shards", type=positive, default=2, metavar="N",
                   help="SequenceFiles, one map task each (default 2)")
    d.add_argument("--runner", choices=["local", "inline"], default="local",
                   help="mrjob runner (default local: one process per map task)")
