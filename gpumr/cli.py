"""The ``gpumr`` command: one entry point, one subcommand per task.

Errors are one line on stderr (``gpumr: error: ...``) and exit status 1;
``--debug`` shows the traceback instead.
"""

import argparse
import json
import os
import sys

from seqfile import Reader, SequenceFileError

from . import __version__
from .errors import GpumrError
from .sizes import human, size_arg


def _positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer: {text!r}")
    return n


# -- SequenceFile commands -------------------------------------------------
def cmd_pack(args):
    from .packing import describe, pack
    stats = pack(args.sources, args.output, shards=args.shards, shard_size=args.shard_size,
                 include=args.include, exclude=args.exclude, compression=args.compression,
                 codec=args.codec, force=args.force, progress=not args.quiet)
    print(describe(stats) + f" -> {args.output}")


def cmd_ls(args):
    from .packing import expand_inputs
    out = sys.stdout
    for path in expand_inputs(args.files):
        with Reader(path, raw=not args.decode_keys) as reader:
            for rec in reader:
                key = rec.key if isinstance(rec.key, str) else rec.key.hex()
                size = len(rec.value) if rec.value is not None else 0
                if args.long:
                    out.write(f"{path}\t{rec.offset}\t{key}\t{size}\n")
                else:
                    out.write(f"{key}\t{size}\n")


def cmd_info(args):
    from .packing import expand_inputs, info
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
    with Reader(args.file) as reader:
        for rec in reader:
            if rec.key == args.key:
                value = rec.value
                sys.stdout.buffer.write(value if isinstance(value, (bytes, bytearray)) else bytes(value or b""))
                sys.stdout.buffer.flush()
                return
    raise GpumrError(f"{args.file}: no record with key {args.key!r}")


def cmd_unpack(args):
    from .packing import unpack
    stats = unpack(args.files, args.directory, progress=not args.quiet)
    print(f"unpacked {stats['records']} records ({human(stats['bytes'])}) into {args.directory}")


def cmd_sample(args):
    from .sample import make_frames
    paths = make_frames(args.directory, count=args.count, seed=args.seed)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {len(paths)} sample frames ({human(total / len(paths))} each on average) to {args.directory}")


def cmd_build_kernels(args):
    from .kernels import ARCHS, build
    paths = build(args.output, tuple(args.arch) if args.arch else ARCHS)
    print(f"built {len(paths)} fatbin(s): " + ", ".join(paths))


def build_parser():
    """The argument parser of the ``gpumr`` command."""
    p = argparse.ArgumentParser(prog="gpumr", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"gpumr {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("pack", help="pack files into SequenceFiles (key: relative path, value: bytes)")
    s.add_argument("sources", nargs="+", metavar="SRC", help="files or directories")
    s.add_argument("-o", "--output", required=True, help="output file, or directory with --shards/--shard-size")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--shards", type=_positive, help="write N part-NNNNN.seq files balanced by bytes")
    g.add_argument("--shard-size", type=size_arg, help="write shards of about SIZE each (e.g. 256MB)")
    s.add_argument("--include", action="append", default=[], metavar="GLOB", help="keep only keys matching GLOB")
    s.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="drop keys matching GLOB")
    s.add_argument("--compression", choices=["NONE", "RECORD", "BLOCK"], default="NONE", type=str.upper)
    s.add_argument("--codec", default=None, help="default (zlib), gzip, bzip2, snappy, lz4, zstd")
    s.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_pack)

    s = sub.add_parser("ls", help="list records: key and value size")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("-l", "--long", action="store_true", help="also the file and byte offset of each record")
    s.set_defaults(func=cmd_ls, decode_keys=True)

    s = sub.add_parser("info", help="header, compression, metadata, record count, bytes")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("cat", help="write one record's value to stdout")
    s.add_argument("file", metavar="FILE")
    s.add_argument("key", metavar="KEY")
    s.set_defaults(func=cmd_cat)

    s = sub.add_parser("unpack", help="write every record to DIR/<key>")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("-d", "--directory", required=True, metavar="DIR")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=cmd_unpack)

    s = sub.add_parser("sample", help="make the built-in sample frames (real photos, 640x480 JPEG)")
    s.add_argument("directory", metavar="DIR")
    s.add_argument("-n", "--count", type=_positive, default=48)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_sample)

    s = sub.add_parser("build-kernels", help="compile the CUDA kernels to fatbins (worker nodes then need no nvcc)")
    s.add_argument("-o", "--output", help="directory (default: the per-user kernel cache); point "
                                          "$GPUMR_KERNEL_DIR at it on the workers")
    s.add_argument("--arch", action="append", help="SM architecture, e.g. 90 (repeatable; default: 75 to 120)")
    s.set_defaults(func=cmd_build_kernels)

    for register in _extensions():
        register(sub)
    return p


def _extensions():
    """Subcommand groups that live beside their subject."""
    from . import cli_device, cli_faces, cli_ct  # noqa: F401  (each registers its commands)
    return [cli_device.register, cli_faces.register, cli_ct.register]


def main(argv=None):
    """Run the ``gpumr`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (GpumrError, SequenceFileError, ValueError) as exc:
        if args.debug:
            raise
        print(f"gpumr: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except OSError as exc:
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpumr: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpumr: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
