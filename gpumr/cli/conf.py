"""``gpumr conf``: gpumr's packaged mrjob configs and deployment scripts, usable from any folder.

The files of ``conf/`` are installed as the package ``gpumr.conf``. ``gpumr
conf`` lists them; ``gpumr conf NAME`` prints the path of one, so that
``-c "$(gpumr conf mrjob.local.conf)"`` works from any folder; ``gpumr
conf NAME -o FILE --package PKG`` writes a copy of a config whose bootstrap
names the installed scripts and the given wheel or sdist by absolute path
(the packaged EMR config names them from a checkout's root), for ``-c
FILE`` from anywhere.
"""

import os
import re

from .. import __version__
from ..boundary import report
from ..errors import GpumrError, printable

#: What each packaged file is, for the listing.
ABOUT = {
    "mrjob.local.conf": "one machine: mrjob's local runner, or a local Hadoop (--engine local | hadoop)",
    "mrjob.emr.conf": "Amazon EMR with GPU nodes (--engine emr); write a copy with -o FILE --package PKG",
    "bootstrap-gpu-node.sh": "the EMR bootstrap: installs gpumr on every node, starts the GPU scheduler",
}
# Paths the packaged configs give from a checkout's root: a file of conf/, and the package the bootstrap installs.
_CONF_FILE = re.compile(r"(?<![\w/.-])conf/([\w.-]+)#")
_PACKAGE = re.compile(r"(?<![\w/.-])dist/gpumr-[\w.+-]+?(?:\.tar\.gz|\.whl)#")


def folder():
    """The installed ``gpumr.conf`` folder."""
    import gpumr.conf
    return os.path.dirname(os.path.abspath(gpumr.conf.__file__))


def packaged():
    """The packaged files' names, sorted."""
    return sorted(n for n in os.listdir(folder()) if not n.startswith(("_", ".")) and not n.endswith(".py"))


def path_of(name):
    """The absolute path of the packaged file ``name``, or a :class:`GpumrError` naming the files there are."""
    if name not in packaged():
        raise GpumrError(f"no packaged file {printable(name)!r}: choose one of {', '.join(packaged())}")
    return os.path.join(folder(), name)


def localised(text, package=None):
    """``text`` of a packaged config with its checkout-relative paths made absolute.

    Parameters
    ----------
    text : str
        The config as packaged.
    package : str, optional
        The wheel or sdist the bootstrap installs (``make dist`` builds both);
        required when the config names one.

    Returns
    -------
    str
        The config with ``conf/X#`` naming the installed file and the
        package named by its absolute path.

    Examples
    --------
    >>> import tempfile
    >>> wheel = tempfile.NamedTemporaryFile(suffix=".whl")
    >>> localised("- sudo bash conf/boot.sh# dist/gpumr-0.1.0.tar.gz#", wheel.name).split()[-1] == wheel.name + "#"
    True
    """
    def one(path):
        if re.search(r"[\s'\"]", path):
            raise GpumrError(f"{printable(path)}: mrjob cannot name a file whose path holds a space or a quote "
                             "in a bootstrap line; move it")
        return path
    text = _CONF_FILE.sub(lambda m: one(os.path.join(folder(), m.group(1))) + "#", text)
    if _PACKAGE.search(text):
        if not package:
            raise GpumrError("--package is required: the wheel or sdist the bootstrap installs on every node "
                             "(make dist writes both in dist/)")
        if not os.path.isfile(package):
            raise GpumrError(f"--package {printable(package)}: no such file (make dist builds it in dist/)")
        text = _PACKAGE.sub(lambda m: one(os.path.abspath(package)) + "#", text)
    return text


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
    c.add_argument("--package", metavar="PKG", help="the wheel or sdist the copy's bootstrap installs (make dist)")
