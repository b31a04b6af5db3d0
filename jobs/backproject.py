"""FDK reconstruction of a cone-beam CT volume, one slab of slices per record, as an mrjob job.

Run ``python -m gpumr.jobs.backproject -r local --projections proj.seq --slab 16 --output-dir out/``
(mrjob's way of saying ``gpumr run backproject --projections proj.seq -o out/ --engine local``), then
``gpumr ct assemble out/ -o volume.npy``. The workload: :class:`gpumr.ct.workload.Backproject`.
"""

from gpumr.engines.mrjob.job import MRWorkload


class MRBackproject(MRWorkload):
    """FDK cone-beam reconstruction, one slab of slices per record; per slab a free GPU or the CPU."""

    WORKLOAD = "backproject"


if __name__ == "__main__":
    from gpumr.cli.run import job_main
    job_main(MRBackproject.WORKLOAD)
