"""FDK reconstruction of a cone-beam CT volume, one slab of slices per record.

Run::

    gpumr run backproject --projections proj.seq --slab 16 -o out/ --engine local
    gpumr ct assemble out/ -o volume.npy

or, as mrjob users do, with a plan made first::

    gpumr ct plan --geometry proj.geometry.json --slab 16 -o plan/
    python -m gpumr.jobs.backproject -r local plan/ --projections proj.seq --output-dir out/

Input records are plan lines ``z0 z1``; the projections and the geometry
(``--geometry``, by default the ``.geometry.json`` beside the projections)
reach every task through mrjob's file upload (Hadoop's distributed cache)
and are loaded and filtered once per task. Output: one record per slice,
keyed by the zero-padded slice index (see :mod:`gpumr.ct.slices`).
The options, their checks and the record function are the workload's
declaration (:class:`gpumr.ct.workload.Backproject`).
"""

from gpumr.engines.streaming import GpumrJob


class MRBackproject(GpumrJob):
    """FDK cone-beam reconstruction; INPUT: plan files of slab lines "z0 z1" (gpumr ct plan); per slab a free GPU or the CPU."""

    WORKLOAD = "backproject"


if __name__ == "__main__":  # the launcher and each task mrjob starts: inside the error boundary
    from gpumr.boundary import main
    main(MRBackproject.run)
