"""Face detection over SequenceFiles of images, on every CPU core and every free GPU.

Run: ``python -m gpumr.jobs.face_detect -r local frames.seq --output-dir out/``
(or ``gpumr run faces frames.seq -o out/ --engine local``).
Input: SequenceFiles (Text key = image name, BytesWritable value = image
bytes), files or folders of them. Output: one line per record,
``"key"<TAB>{"faces": [[x, y, w, h], ...], "device": "cpu"|"gpu:N",
"width": W, "height": H}`` or ``{"error": "..."}``, sorted by key.

The options, their checks and the record function are the workload's
declaration (:class:`gpumr.faces.workload.Faces`); this class only names it.
"""

from gpumr.engines.streaming import GpumrJob


class MRFaceDetect(GpumrJob):
    """Face detection (OpenCV's Haar cascades) over SequenceFiles of images; per record a free GPU or the CPU."""

    WORKLOAD = "faces"


if __name__ == "__main__":  # the launcher and each task mrjob starts: inside the error boundary
    from gpumr.boundary import main
    main(MRFaceDetect.run)
