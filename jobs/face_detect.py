"""Face detection over SequenceFiles of images, on every CPU core and every free GPU.

Run: ``python -m gpumr.jobs.face_detect -r local frames.seq --output-dir out/``.
Input: SequenceFiles (Text key = image name, BytesWritable value = image
bytes), files or folders of them. Output: one line per record,
``"key"<TAB>{"faces": [[x, y, w, h], ...], "device": "cpu"|"gpu:N",
"width": W, "height": H}`` or ``{"error": "..."}``, sorted by key.
"""

from gpumr.engines.streaming import GpumrJob, option_value, with_option


class MRFaceDetect(GpumrJob):
    """Face detection (OpenCV's Haar cascades) over SequenceFiles of images; per record a free GPU or the CPU."""

    @classmethod
    def prepare_args(cls, args):
        # A cascade opencv ships may be given by its file name; ship it by its path.
        from gpumr.faces.cpu import cascade_path
        name = option_value(args, "--cascade")
        return with_option(args, "--cascade", cascade_path(name)) if name else args

    def configure_args(self):
        from gpumr.faces.cpu import DEFAULT_CASCADE, DEFAULTS
        from gpumr.faces.decode import MAX_PIXELS
        from gpumr.limits import MAX_PIXELS_CEILING, MAX_SCALE_FACTOR, PYRAMID_PIXELS_PER_PIXEL
        super().configure_args()
        self.add_file_arg("--cascade", default=None, metavar="XML",
                          help=f"cascade XML file, or the bare name of one opencv ships (default {DEFAULT_CASCADE}); "
                               "shipped to the tasks")
        self.add_passthru_arg("--scale-factor", type=float, default=DEFAULTS["scale_factor"],
                              help=f"pyramid step between scales, over 1 and at most {MAX_SCALE_FACTOR:g} "
                                   f"(default {DEFAULTS['scale_factor']})")
        self.add_passthru_arg("--min-neighbors", type=int, default=DEFAULTS["min_neighbors"],
                              help=f"overlapping detections a face needs (default {DEFAULTS['min_neighbors']})")
        self.add_passthru_arg("--min-size", type=int, default=DEFAULTS["min_size"], metavar="PX",
                              help=f"smallest face, pixels (default {DEFAULTS['min_size']})")
        self.add_passthru_arg("--max-size", type=int, default=DEFAULTS["max_size"], metavar="PX",
                              help="largest face, pixels (default: no limit)")
        self.add_passthru_arg("--max-pixels", type=int, default=MAX_PIXELS, metavar="N",
                              help=f"refuse larger images as bad records, from their header (default {MAX_PIXELS:,}, "
                                   f"at most {MAX_PIXELS_CEILING:,}); an image's pyramid may hold "
                                   f"{PYRAMID_PIXELS_PER_PIXEL} times this")
        self.add_passthru_arg("--opencv-threads", type=int, default=1, metavar="N",
                              help="OpenCV threads per map task (default 1: Hadoop runs one task per core)")

    def check_options(self):
        from gpumr import limits
        from gpumr.faces.cpu import load_cascade
        from gpumr.faces.pyramid import Pyramid
        super().check_options()
        o = self.options
        window = load_cascade(o.cascade).getOriginalWindowSize()
        Pyramid(window, o.scale_factor, o.min_size, o.max_size, o.max_pixels)
        limits.number("--min-neighbors", o.min_neighbors, least=0, integer=True)
        limits.number("--opencv-threads", o.opencv_threads, 1, limits.MAX_THREADS, integer=True)

    def make_workload(self):
        import cv2
        from gpumr.faces.workload import FaceDetection
        cv2.setNumThreads(self.options.opencv_threads)
        o = self.options
        return FaceDetection(o.cascade, o.scale_factor, o.min_neighbors, o.min_size, o.max_size, o.max_pixels)


if __name__ == "__main__":  # the launcher and each task mrjob starts: inside the error boundary
    from gpumr.boundary import main
    main(MRFaceDetect.run)
