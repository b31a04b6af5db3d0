"""FDK reconstruction of a cone-beam CT volume, one slab of slices per record.

Run::

    gpumr ct plan --geometry proj.geometry.json --slab 16 -o plan/
    python -m gpumr.jobs.backproject -r local plan/ --projections proj.seq \\
        --geometry proj.geometry.json --output-dir out/
    gpumr ct assemble out/ -o volume.npy

Input records are plan lines ``z0 z1``; the projections and the geometry
reach every task through mrjob's file upload (Hadoop's distributed cache)
and are loaded and filtered once per task. Output: one record per slice,
keyed by the zero-padded slice index (see :mod:`gpumr.ct.slices`).
"""

from mrjob.job import MRJob
from mrjob.protocol import JSONProtocol

from gpumr.jobs._common import GpumrJobMixin


class MRBackproject(GpumrJobMixin, MRJob):
    """Slab backprojection, device chosen per slab."""

    OUTPUT_PROTOCOL = JSONProtocol
    INPUT_KIND = "lines"

    def configure_args(self):
        super().configure_args()
        self.add_common_args()
        self.add_file_arg("--projections", help="SequenceFile of projections (shipped to the tasks)")
        self.add_file_arg("--geometry", help="geometry JSON (shipped to the tasks)")
        self.add_passthru_arg("--filter", default="ram-lak",
                              choices=["ram-lak", "shepp-logan", "cosine", "hamming", "hann"])
        self.add_passthru_arg("--i0", type=float, default=None, help="raw intensities: -log(I/I0)")
        self.add_passthru_arg("--cpu-threads", type=int, default=None,
                              help="threads of the CPU backprojector per task (default: all cores)")

    def make_workload(self):
        from gpumr.ct.workload import Backprojection
        if self.options.cpu_threads:
            import numba
            numba.set_num_threads(self.options.cpu_threads)
        return Backprojection([self.options.projections], self.options.geometry, self.options.filter,
                              self.options.i0)


if __name__ == "__main__":
    MRBackproject.run()
