"""``gpumr pack | ls | info | cat | unpack | sample``: SequenceFiles from the command line."""

import json
import os
import sys

from seqfile import Reader
from seqfile.codecs import SHORT_NAMES

from ..errors import GpumrError
from ..io.remote import remote_command
from ..sizes import human, size_arg
from .args import command, positive


def cmd_pack(args):
    from ..io.packing import describe, pack
    compression = args.compression
    if compression is None:
        compression = "BLOCK" if args.codec else "NONE"
    elif compression == "NONE" and args.codec:
        raise GpumrError(f"--codec {args.codec} needs --compression RECORD or BLOCK (NONE stores values as they are)")
    stats = pack(args.sources, args.output, shards=args.shards, shard_size=args.shard_size,
                 include=args.include, exclude=args.exclude, compression=compression,
                 codec=args.codec, force=args.force, progress=not args.quiet)
    print(describe(stats) + f" -> {args.output}")


def cmd_ls(args):
    from ..io.inputs import expand_inputs
    out = sys.stdout
    for path in expand_inputs(args.files):
        with Reader(path) as reader:
            for rec in reader:
                key = rec.key if isinstance(rec.key, str) else rec.key.hex()
                size = len(rec.value) if rec.value is not None else 0
                if args.long:
                    out.write(f"{path}\t{rec.offset}\t{key}\t{size}\n")
                else:
                    out.write(f"{key}\t{size}\n")


def cmd_info(args):
    from ..io.inputs import expand_inputs
    from ..io.packing import info
    facts = [info(p) for p in expand_inputs(args.files)]
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
        with Reader(path) as reader:
            for rec in reader:
                if rec.key == args.key:
                    value = rec.value
                    sys.stdout.buffer.write(value if isinstance(value, (bytes, bytearray)) else bytes(value or b""))
                    sys.stdout.buffer.flush()
                    return
    raise GpumrError(f"{args.file}: no record with key {args.key!r}")


def cmd_unpack(args):
    from ..io.packing import unpack
    stats = unpack(args.files, args.directory, progress=not args.quiet)
    print(f"unpacked {stats['records']} records ({human(stats['bytes'])}) into {args.directory}")


def cmd_sample(args):
    from ..faces.sample import make_frames
    paths = make_frames(args.directory, count=args.count, seed=args.seed)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {len(paths)} sample frames ({human(total / len(paths))} each on average) to {args.directory}")


def register(sub):
    """Add the SequenceFile commands to the ``gpumr`` parser."""
    s = command(sub, "pack", "pack files into SequenceFiles (key: relative path, value: the file's bytes)",
                remote_command(cmd_pack, output="output"),
                description="Pack files into a SequenceFile, or a folder of part-NNNNN.seq shards balanced by bytes.\n"
                            "Folders are walked in sorted order; keys are paths relative to the folder given.\n"
                            "The output appears only once it is complete.")
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
                        "need pip install 'gpumr[codecs]'")
    s.add_argument("--force", action="store_true", help="replace OUT if it exists")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    s = command(sub, "ls", "list records: key and value size", remote_command(cmd_ls, "files"))
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("-l", "--long", action="store_true", help="also the file and byte offset of each record")

    s = command(sub, "info", "header, compression, metadata, record count and bytes of SequenceFiles",
                remote_command(cmd_info, "files"))
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("--json", action="store_true", help="print the facts as JSON")

    s = command(sub, "cat", "write one record's value to stdout", remote_command(cmd_cat, "file"))
    s.add_argument("file", metavar="FILE", help="a SequenceFile, or a folder of them")
    s.add_argument("key", metavar="KEY", help="the record's key")

    s = command(sub, "unpack", "write every record to DIR/<key>", remote_command(cmd_unpack, "files"))
    s.add_argument("files", nargs="+", metavar="FILE", help="SequenceFiles, or folders of them")
    s.add_argument("-d", "--directory", required=True, metavar="DIR", help="where the files go")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    s = command(sub, "sample", "make the built-in sample frames (real photos, 640x480 JPEG)", cmd_sample)
    s.add_argument("directory", metavar="DIR", help="where the frames go")
    s.add_argument("-n", "--count", type=positive, default=48, help="how many frames (default 48)")
    s.add_argument("--seed", type=int, default=0, help="random seed of the faces' placement (default 0)")
