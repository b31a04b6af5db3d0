"""Face detection over SequenceFiles of images, as an mrjob job: ``python -m gpumr.jobs.face_detect``.

Run ``python -m gpumr.jobs.face_detect -r local frames.seq --output-dir out/`` (mrjob's way of saying
``gpumr run faces frames.seq -o out/ --engine local``): the same launcher, checks and output. Output:
one line per record, ``"key"<TAB>{"faces": [[x, y, w, h], ...], "device": "cpu"|"gpu:N", "width": W,
"height": H}`` or ``{"error": "..."}``, sorted by key. The workload: :class:`gpumr.faces.workload.Faces`.
"""

from gpumr.engines.mrjob.job import MRWorkload


class MRFaceDetect(MRWorkload):
    """Face detection (OpenCV's Haar cascades) over SequenceFiles of images; per record a free GPU or the CPU."""

    WORKLOAD = "faces"


if __name__ == "__main__":
    from gpumr.cli.run import job_main
    job_main(MRFaceDetect.WORKLOAD)
