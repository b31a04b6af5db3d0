"""``gpumr pack | ls | info | cat | unpack | sample``: SequenceFiles from the command line."""

import json
import os
import sys
import tempfile

from seqfile.codecs import SHORT_NAMES

from ..errors import GpumrError, printable
from ..io.records import open_reader
from ..io.remote import locate
from ..log import logger, report
from ..sizes import human, size_arg
from .args import command, positive

_log = logger(__name__)

#: How many skipped inputs ``pack`` names one by one (then only how many more).
SHOWN_SKIPS = 20


def cmd_pack(args):
    from ..io.packing import describe, pack
    compression = args.compression
    if compression is None:
        compression = "BLOCK" if args.codec else "NONE"
    elif compression == "NONE" and args.codec:
        raise GpumrError(f"--codec {args.codec} needs --compression RECORD or BLOCK (NONE stores values as they are)")

    def run(out, plan=None):
        return pack(args.sources, out, shards=args.shards, shard_size=args.shard_size, include=args.include,
                    exclude=args.exclude, compression=compression, codec=args.codec, force=args.force,
                    progress=not args.quiet, plan=plan)
    stats = _pack_to_uri(args, run, compression == "NONE") if locate(args.output).is_uri else run(args.output)
    skipped = stats["skipped"]
    for path, reason in skipped[:SHOWN_SKIPS]:
        _log.warning("skipped %s: %s", printable(path), reason)
    if len(skipped) > SHOWN_SKIPS:
        _log.warning("skipped %d more entries that are not regular files or not followed", len(skipped) - SHOWN_SKIPS)
    links = f"; followed {stats['linked']} symbolic link{'s' if stats['linked'] != 1 else ''} to files inside " \
            "the packed folders" if stats["linked"] else ""
    skips = f"; skipped {len(skipped)} (see warnings)" if skipped else ""
    report(describe(stats) + f" -> {printable(args.output)}{links}{skips}")


def _pack_to_uri(args, run, uncompressed):
    """``pack -o URI``: pack into a local temporary folder, then publish it at the URI."""
    from ..io.outputs import UriOutput
    sharded = args.shards is not None or args.shard_size is not None
    output = UriOutput(args.output, "gpumr pack", folder=sharded, inputs=args.sources, replace=args.force,
                       proves_itself=True)
    with tempfile.TemporaryDirectory(prefix="gpumr-upload-") as folder:
        staged = os.path.join(folder, output.name)
        plan = (lambda sizes: output.check_size(max(sizes), "a shard" if sharded else "")) if uncompressed else None
        stats = run(staged, plan)
        stats["kept"] = output.put(staged)
    report(f"uploaded to {args.output}")
    return stats


def cmd_ls(args):
    from ..io.inputs import expand_inputs
    out = sys.stdout
    for path in expand_inputs(args.files):
        with open_reader(path, values=False, max_record_size=args.max_record_size) as reader:
            for rec in reader:
                key = printable(rec.key) if isinstance(rec.key, str) else rec.key.hex()
                size = rec.value
                if args.long:
                    out.write(f"{printable(path)}\t{rec.offset}\t{key}\t{size}\n")
                else:
                    out.write(f"{key}\t{size}\n")


def cmd_info(args):
    from ..io.inputs import expand_inputs
    from ..io.packing import info
    facts = [info(p, max_record_size=args.max_record_size) for p in expand_inputs(args.files)]
    if args.json:
        json.dump(facts if len(facts) > 1 else facts[0], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for f in facts:
        print(f"{f['path']}: SequenceFile v{f['version']}")
        print(f"  key class    {f['key_class']}")
        print(f"  value class  {f['value_class']}")
        print(f"  compression  {f['compression']}" + (f" ({f['codec']})" if f["codec"] else ""))
        print(f"  metadata     {json.dumps(f['metadata'])}")
        print(f"  records      {f['records']}")
        print(f"  value bytes  {f['value_bytes']} ({human(f['value_bytes'])})")
        print(f"  file bytes   {f['file_bytes']} ({human(f['file_bytes'])})")


def cmd_cat(args):
    from ..io.inputs import expand_inputs
    for path in expand_inputs([args.file]):
        with open_reader(path, max_record_size=args.max_record_size) as reader:
            for rec in reader:
                if rec.key == args.key:
                    value = rec.value
                    sys.stdout.buffer.write(value if isinstance(value, (bytes, bytearray)) else bytes(value or b""))
                    sys.stdout.buffer.flush()
                    return
    raise GpumrError(f"{locate(args.file).shown}: no record with key {args.key!r}")


def cmd_unpack(args):
    from ..io.packing import unpack

    def refused(message):
        _log.error("%s", message)  # one record refused; the command goes on
    directory = locate(args.directory).local  # file:///PATH is the local folder PATH; other URIs are refused
    if directory is None:
        raise GpumrError(f"-d {locate(args.directory).shown}: unpack writes into a folder of this machine; "
                         "give a path (or file:///PATH)")
    stats = unpack(args.files, directory, progress=not args.quiet, force=args.force, on_refused=refused,
                   max_record_size=args.max_record_size)
    where = printable(args.directory)
    report(f"unpacked {stats['records']} records ({human(stats['bytes'])}) into {where}"
           + (f"; refused {stats['refused']}" if stats["refused"] else ""))
    if stats["refused"]:
        raise GpumrError(f"refused {stats['refused']} of {stats['records'] + stats['refused']} records "
                         f"(named above); {stats['records']} written into {where}")


def cmd_sample(args):
    from ..faces.sample import make_frames
    paths = make_frames(args.directory, count=args.count, seed=args.seed)
    total = sum(os.path.getsize(p) for p in paths)
    report(f"wrote {len(paths)} sample frames ({human(total / len(paths))} each on average) to {args.directory}")


def _cap_option(parser):
    from ..io.records import DEFAULT_MAX_RECORD_SIZE, max_record_size_arg
    parser.add_argument("--max-record-size", type=max_record_size_arg, default=DEFAULT_MAX_RECORD_SIZE,
                        metavar="SIZE", help="refuse a record (or block) larger than SIZE once decompressed, "
                                             "with an error naming file and offset (default 256MiB)")


def register(sub):
    """Add the SequenceFile commands to the ``gpumr`` parser."""
    s = command(sub, "pack", "pack files into SequenceFiles (key: relative path, value: the file's bytes)",
                cmd_pack,
                description="Pack files into a SequenceFile, or a folder of part-NNNNN.seq shards balanced by bytes.\n"
                            "Folders are walked in sorted order; keys are paths relative to the folder given.\n"
                            "The output appears only once it is complete.\n"
                            "Only regular files are packed. Inside a folder, a symbolic link to a file is followed\n"
                            "only if its target is a regular file inside that folder; other links, folder links,\n"
                            "FIFOs, sockets and devices are skipped, each named in a warning.")
    s.add_argument("sources", nargs="+", metavar="SRC", help="files or folders")
    s.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output file, or folder with --shards/--shard-size")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--shards", type=positive, metavar="N", help="write N part-NNNNN.seq files balanced by bytes")
    g.add_argument("--shard-size", type=size_arg, metavar="SIZE", help="write shards of about SIZE each (e.g. 256MB)")
    s.add_argument("--include", action="append", default=[], metavar="GLOB", help="keep only keys matching GLOB")
    s.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="drop keys matching GLOB")
    s.add_argument("--compression", choices=["NONE", "RECORD", "BLOCK"], default=None, type=str.upper,
                   help="NONE stores values as they are (the default: images are compressed already); RECORD "
                        "compresses each value, BLOCK many records together (the default when --codec is given)")
    s.add_argument("--codec", choices=sorted(SHORT_NAMES), default=None,
                   help="compression codec (default: 'default', zlib, when compressing); snappy, lz4 and zstd "
                        "need cramjam: pip install 'gpumr[codecs]'")
    s.add_argument("--force", action="store_true",
                   help="replace OUT if it is an earlier gpumr pack output (a SequenceFile whose header says gpumr "
                        "pack wrote it; with shards, a folder holding only such part-NNNNN.seq files), never "
                        "anything else; the old output is removed once the new one is complete")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary line")

    s = command(sub, "ls", "list records: key and value size", cmd_ls)
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("-l", "--long", action="store_true", help="also the file and byte offset of each record")
    _cap_option(s)

    s = command(sub, "info", "header, compression, metadata, record count and bytes of SequenceFiles",
                cmd_info)
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("--json", action="store_true", help="print the facts as JSON")
    _cap_option(s)

    s = command(sub, "cat", "write one record's value to stdout", cmd_cat)
    s.add_argument("file", metavar="FILE", help="a SequenceFile, or a folder of them")
    s.add_argument("key", metavar="KEY", help="the record's key")
    _cap_option(s)

    s = command(sub, "unpack", "write every record to DIR/<key>", cmd_unpack,
                description="Write every record to DIR/<key>, each file atomically. Keys that would land outside\n"
                            "DIR, pass through a symbolic link, repeat an earlier key, or are not valid file names\n"
                            "are refused, one error line each; the exit status is then 1.")
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("-d", "--directory", required=True, metavar="DIR", help="where the files go")
    _cap_option(s)
    s.add_argument("--force", action="store_true", help="replace files in DIR that an earlier gpumr unpack wrote "
                                                         "and that are unchanged since (never a file of yours, a "
                                                         "link or a folder)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary line")

    s = command(sub, "sample", "make the built-in sample frames (real photos, 640x480 JPEG)", cmd_sample)
    s.add_argument("directory", metavar="DIR", help="where the frames go")
    s.add_argument("-n", "--count", type=positive, default=48, help="how many frames (default 48)")
    s.add_argument("--seed", type=int, default=0, help="random seed of the faces' placement (default 0)")
