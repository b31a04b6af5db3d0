"""``gpumr faces render`` and ``gpumr demo``."""


def cmd_render(args):
    from .render import render
    r = render(args.outputs, args.images, args.directory, sheet_frames=args.sheet_frames)
    print(f"drew {r['faces']} faces on {r['frames']} frames in {args.directory}"
          + (f" ({r['errors']} records had errors)" if r["errors"] else "") + f"; contact sheet: {r['sheet']}")


def cmd_demo(args):
    from .demo import demo
    demo(args.output, frames=args.frames, shards=args.shards, runner=args.runner)


def register(sub):
    """Add ``faces`` and ``demo`` to the ``gpumr`` parser."""
    s = sub.add_parser("faces", help="face-detection results")
    fs = s.add_subparsers(dest="action", metavar="ACTION")
    fs.required = True
    r = fs.add_parser("render", help="draw boxes onto the frames and make a contact sheet PNG")
    r.add_argument("outputs", nargs="+", metavar="OUTPUT", help="job output files or directories")
    r.add_argument("--images", nargs="+", required=True, metavar="SEQ", help="the SequenceFiles the job read")
    r.add_argument("-d", "--directory", required=True, metavar="DIR")
    r.add_argument("--sheet-frames", type=int, default=12)
    r.set_defaults(func=cmd_render)

    d = sub.add_parser("demo", help="run the face-detection job end to end on built-in sample frames")
    d.add_argument("--output", default="demo-out", help="directory for everything the demo makes")
    d.add_argument("--frames", type=int, default=48)
    d.add_argument("--shards", type=int, default=2)
    d.add_argument("--runner", choices=["local", "inline"], default="local")
    d.set_defaults(func=cmd_demo)
