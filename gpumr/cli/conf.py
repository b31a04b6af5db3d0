"""``gpumr conf``: gpumr's packaged mrjob configs and deployment scripts, usable from any folder."""

from .. import __version__
from ..engines.mrjob.configs import folder, localised, packaged, path_of
from ..errors import GpumrError
from ..log import report

#: What each packaged file is, for the listing.
ABOUT = {
    "mrjob.local.conf": "one machine: mrjob's local runner, or a local Hadoop (--engine local | hadoop)",
    "mrjob.emr.conf": "Amazon EMR with GPU nodes (--engine emr uses it without -c); a copy to edit: -o FILE --package WHEEL",
    "bootstrap-gpu-node.sh": "the EMR bootstrap: installs gpumr on every node, starts the GPU scheduler",
}


def cmd_conf(args):
    if not args.name:
        if args.output or args.package:
            raise GpumrError("-o and --package need the NAME of a packaged config (gpumr conf lists them)")
        print(f"gpumr {__version__}'s packaged configs, in {folder()}:")
        width = max(map(len, packaged()))
        for name in packaged():
            print(f"  {name.ljust(width)}  {ABOUT.get(name, '')}".rstrip())
        return
    source = path_of(args.name)
    if not args.output:
        if args.package:
            raise GpumrError("--package needs -o FILE: the copy to write")
        print(source)
        return
    from ..io.outputs import FileOutput
    with open(source, encoding="utf-8") as f:
        text = localised(f.read(), args.package)
    head = (f"# Written by `gpumr conf {args.name} -o ...` from gpumr {__version__}'s packaged {args.name}: the files "
            "the bootstrap\n# uploads are named by absolute path, so `-c` takes this file from any folder.\n")
    with FileOutput(args.output, "gpumr conf", inputs=[source, *filter(None, [args.package])]) as f:
        f.write((head + text).encode("utf-8"))
    report(f"wrote {args.output} (from {source})")


def register(sub):
    """Add ``conf`` to the ``gpumr`` parser."""
    from .args import command
    c = command(sub, "conf", "gpumr's packaged mrjob configs and scripts: list, path, or a copy for any folder",
                cmd_conf)
    c.add_argument("name", nargs="?", metavar="NAME", help="a packaged file (none: list them); alone: print its path")
    c.add_argument("-o", "--output", metavar="FILE", help="write a copy whose bootstrap names files by absolute path")
    c.add_argument("--package", metavar="WHEEL", help="the gpumr wheel the copy's bootstrap installs on every node "
                                                     "(the one you installed gpumr from; make dist builds one)")
