"""``gpumr build-kernels``: the CUDA kernels as fatbins for worker nodes without nvcc."""

from ..log import report
from .args import command


def cmd_build_kernels(args):
    from ..gpu.kernels import ARCHS, build
    paths = build(args.output, tuple(args.arch) if args.arch else ARCHS)
    report(f"built {len(paths)} fatbin(s): " + ", ".join(paths))


def register(sub):
    """Add ``build-kernels`` to the ``gpumr`` parser."""
    s = command(sub, "build-kernels", "compile the CUDA kernels to fatbins (worker nodes then need no nvcc)",
                cmd_build_kernels)
    s.add_argument("-o", "--output", metavar="DIR",
                   help="folder (default: the per-user kernel cache); point $GPUMR_KERNEL_DIR at it on the workers")
    s.add_argument("--arch", action="append", metavar="SM",
                   help="SM architecture, e.g. 90 (repeatable; default: 75 to 120)")
