"""Face detection over SequenceFiles of images, on every CPU core and every free GPU.

Run: ``python -m gpumr.jobs.face_detect -r local frames/ --output-dir out/``.
Input: SequenceFiles (Text key = image name, BytesWritable value = image
bytes), files or directories of them. Output: one line per record,
``"key"<TAB>{"faces": [[x, y, w, h], ...], "device": "cpu"|"gpu:N",
"width": W, "height": H}`` or ``{"error": "..."}``, sorted by key.
"""

from mrjob.job import MRJob
from mrjob.protocol import JSONProtocol

from gpumr.jobs._common import GpumrJobMixin


class MRFaceDetect(GpumrJobMixin, MRJob):
    """Haar-cascade face detection, device chosen per record."""

    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self):
        super().configure_args()
        self.add_common_args()
        self.add_file_arg("--cascade", default=None,
                          help="cascade XML, shipped to the tasks (default: opencv's "
                               "haarcascade_frontalface_default.xml)")
        self.add_passthru_arg("--scale-factor", type=float, default=1.1)
        self.add_passthru_arg("--min-neighbors", type=int, default=3)
        self.add_passthru_arg("--min-size", type=int, default=24, help="smallest face, pixels")
        self.add_passthru_arg("--max-size", type=int, default=None, help="largest face, pixels")
        self.add_passthru_arg("--max-pixels", type=int, default=50_000_000,
                              help="refuse larger images as bad records")
        self.add_passthru_arg("--opencv-threads", type=int, default=1,
                              help="OpenCV threads per map task (Hadoop runs one task per core)")

    def make_workload(self):
        import cv2
        from gpumr.faces import FaceDetection
        cv2.setNumThreads(self.options.opencv_threads)
        o = self.options
        return FaceDetection(o.cascade, o.scale_factor, o.min_neighbors, o.min_size, o.max_size, o.max_pixels)


if __name__ == "__main__":
    MRFaceDetect.run()
