"""``gpumr bundle``: gpumr and what its tasks import, as one archive for a cluster with only Python."""

from ..log import report
from .args import command


def cmd_bundle(args):
    from ..engines.mrjob.bundle import build, mrjob_options
    path, what = build(args.output, args.python_version, kernel_dir=args.kernels, ct=not args.faces_only)
    report(f"wrote {path} ({what['bytes'] / 2**20:.1f} MiB) for Python {what['python']}: gpumr, "
           + ", ".join(what["requirements"]) + (f"; fatbins {', '.join(what['fatbins'])}" if what["fatbins"] else ""))
    report("ship it with the job's options: " + " ".join(mrjob_options(path)))


def register(sub):
    """Add ``bundle`` to the ``gpumr`` parser."""
    s = command(sub, "bundle", "gpumr and the libraries its tasks import, for nodes that have only Python",
                cmd_bundle,
                description="Build gpumr-python.zip: gpumr, the libraries its map tasks import (binary wheels for "
                            "the nodes' Python) and optionally kernel fatbins, for Hadoop's distributed cache.\n\n"
                            "Ship it with: --archives DIR/gpumr-python.zip#gpumr-python "
                            "--cmdenv PYTHONPATH=gpumr-python --python-bin python3")
    s.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for gpumr-python.zip")
    s.add_argument("--python-version", metavar="X.Y",
                   help="the nodes' Python (default: this interpreter's); wheels are fetched for it")
    s.add_argument("--kernels", metavar="DIR", help="fatbins from 'gpumr build-kernels -o DIR' to include")
    s.add_argument("--faces-only", action="store_true",
                   help="only what the face job needs (leaves out numba, which the CT job uses: a third of the size)")
