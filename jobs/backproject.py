"""FDK reconstruction of a cone-beam CT volume, one slab of slices per record.

Run::

    gpumr ct plan --geometry proj.geometry.json --slab 16 -o plan/
    python -m gpumr.jobs.backproject -r local plan/ --projections proj.seq --output-dir out/
    gpumr ct assemble out/ -o volume.npy

Input records are plan lines ``z0 z1``; the projections and the geometry
(``--geometry``, by default the ``.geometry.json`` beside the projections)
reach every task through mrjob's file upload (Hadoop's distributed cache)
and are loaded and filtered once per task. Output: one record per slice,
keyed by the zero-padded slice index (see :mod:`gpumr.ct.slices`).
"""

import os

from gpumr.engines.streaming import GpumrJob, option_value, with_option
from gpumr.errors import GpumrError


class MRBackproject(GpumrJob):
    """FDK cone-beam reconstruction; INPUT: plan files of slab lines "z0 z1" (gpumr ct plan); per slab a free GPU or the CPU."""

    INPUT_KIND = "lines"

    @classmethod
    def prepare_args(cls, args):
        from gpumr.ct.geometry import beside
        from gpumr.io.inputs import is_file
        projections = option_value(args, "--projections")
        if projections and not option_value(args, "--geometry") and is_file(beside(projections)):
            return with_option(args, "--geometry", beside(projections))
        return args

    def configure_args(self):
        from gpumr.ct.fdk import FILTERS
        super().configure_args()
        self.add_file_arg("--projections", metavar="SEQ",
                          help="SequenceFile of projections, one record per angle (required; shipped to the tasks)")
        self.add_file_arg("--geometry", metavar="JSON",
                          help="geometry JSON (default: the .geometry.json beside --projections; shipped)")
        self.add_passthru_arg("--filter", default=FILTERS[0], choices=FILTERS,
                              help=f"ramp filter window (default {FILTERS[0]})")
        self.add_passthru_arg("--i0", type=float, default=None,
                              help="projections are raw intensities: use -log(I/I0) (I0 over 0)")
        self.add_passthru_arg("--cpu-threads", type=int, default=None, metavar="N",
                              help="threads of the CPU backprojector per task (default: all cores)")

    def check_options(self):
        from gpumr import limits
        from gpumr.ct.geometry import beside, load
        from gpumr.ct.projections import read_set
        from gpumr.io.inputs import describe_file, looks_like_sequencefile
        super().check_options()
        o = self.options
        if not o.projections:
            raise GpumrError("--projections is required: the SequenceFile of projections (gpumr ct phantom makes one)")
        if not os.path.isfile(o.projections):
            raise GpumrError(f"--projections {o.projections}: no such file")
        if not looks_like_sequencefile(o.projections):
            raise GpumrError(f"--projections {o.projections}: {describe_file(o.projections)}")
        if not o.geometry:
            raise GpumrError(f"--geometry is required: no {beside(o.projections)} beside the projections")
        if o.cpu_threads is not None:
            limits.number("--cpu-threads", o.cpu_threads, 1, limits.MAX_THREADS, integer=True)
        # Every projection is read once here, one at a time, and checked as the tasks will load them
        # (count, sizes, no NaN or infinity), so that a bad one is refused before any task starts.
        read_set([o.projections], load(o.geometry), o.i0, keep=False)

    def make_workload(self):
        from gpumr.ct.workload import Backprojection
        if self.options.cpu_threads:
            from gpumr.ct.backproject import set_threads
            set_threads(self.options.cpu_threads)
        return Backprojection([self.options.projections], self.options.geometry, self.options.filter,
                              self.options.i0)


if __name__ == "__main__":  # the launcher and each task mrjob starts: inside the error boundary
    from gpumr.boundary import main
    main(MRBackproject.run)
