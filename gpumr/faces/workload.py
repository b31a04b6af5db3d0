"""Face detection as a gpumr workload: one image record in, its faces out, on the CPU or a GPU."""

from .. import limits
from ..core.images import MAX_PIXELS, decode_gray
from ..core.workload import Option, Workload
from ..errors import GpumrError
from .cpu import DEFAULT_CASCADE, DEFAULTS, cascade_path, detect, load_cascade
from .pyramid import Pyramid


class Faces(Workload):
    """Face detection (OpenCV's Haar cascades); per record a free GPU or the CPU."""

    name = "faces"
    summary = "Face detection (OpenCV's Haar cascades) over SequenceFiles of images; per record a free GPU or the CPU."
    decode = "gray"
    gpu_records = 16
    options = (
        Option("--cascade", f"cascade XML file, or the bare name of one opencv ships (default {DEFAULT_CASCADE}); "
                            "shipped to the tasks", metavar="XML", side_file=True),
        Option("--scale-factor", f"pyramid step between scales, over 1 and at most {limits.MAX_SCALE_FACTOR:g} "
                                 f"(default {DEFAULTS['scale_factor']})", type=float, default=DEFAULTS["scale_factor"], metavar="F"),
        Option("--min-neighbors", f"overlapping detections a face needs (default {DEFAULTS['min_neighbors']})",
               type=int, default=DEFAULTS["min_neighbors"], least=0, metavar="N"),
        Option("--min-size", f"smallest face, pixels (default {DEFAULTS['min_size']})", type=int,
               default=DEFAULTS["min_size"], metavar="PX"),
        Option("--max-size", "largest face, pixels (default: no limit)", type=int, default=DEFAULTS["max_size"],
               metavar="PX"),
        Option("--max-pixels", f"refuse larger images as bad records, from their header (default {MAX_PIXELS:,}, "
                               f"at most {limits.MAX_PIXELS_CEILING:,}); an image's pyramid may hold "
                               f"{limits.PYRAMID_PIXELS_PER_PIXEL} times this", type=int, default=MAX_PIXELS,
               metavar="N"),
        Option("--opencv-threads", "OpenCV threads per task (default 1: engines run one task per core)", type=int,
               default=1, metavar="N", least=1, most=limits.MAX_THREADS),
    )

    # -- once per job --------------------------------------------------------------------------------
    def resolve(self, options):
        """A cascade opencv ships may be given by its bare file name: the launcher ships it by its path."""
        try:
            options.cascade = cascade_path(options.cascade)
        except GpumrError:
            pass  # said by check, in its words

    def check(self, options):
        window = load_cascade(options.cascade).getOriginalWindowSize()
        Pyramid(window, options.scale_factor, options.min_size, options.max_size, options.max_pixels)

    # -- in each task --------------------------------------------------------------------------------
    def setup(self, options):
        import cv2
        cv2.setNumThreads(options.opencv_threads)
        self.cascade_file = cascade_path(options.cascade)
        self.classifier = load_cascade(self.cascade_file)
        self.pyramid = Pyramid(self.classifier.getOriginalWindowSize(), options.scale_factor, options.min_size,
                               options.max_size, options.max_pixels)
        self.params = dict(min_neighbors=options.min_neighbors, **self.pyramid.params)
        self._gpu = None

    def load(self, key, value, options):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            from ..core.badrecord import BadRecord
            raise BadRecord(f"value is a {type(value).__name__}, not image bytes")
        return decode_gray(value, self.pyramid.max_pixels, check=self.pyramid.check)

    def cpu(self, key, gray, options):
        return {"faces": detect(self.classifier, gray, **self.params), "width": int(gray.shape[1]),
                "height": int(gray.shape[0])}

    def gpu_ready(self, options, simulated):
        from ..gpu.launch import available
        ok, why = available(simulated)
        if not ok:
            return why
        from .gpu import FaceGPU
        try:
            self._gpu = FaceGPU(self.cascade_file, **self.params)
        except GpumrError as exc:  # a cascade the GPU kernel does not take (tilted features, ...)
            return str(exc)
        return None

    def gpu_batch(self, records, options, device):
        """What the device finds per frame (:class:`gpumr.faces.gpu.Found`); made faces in :meth:`finish`."""
        return self._gpu.found([gray for _, gray in records], device.gpu)

    def finish(self, key, result, options):
        """A frame's faces from what the GPU found, after its lease: boxes, OpenCV's grouping, clipping."""
        from .gpu import Found
        if not isinstance(result, Found):
            return result
        height, width = result.shape
        return {"faces": result.faces(self.params["min_neighbors"]), "width": int(width), "height": int(height)}

    def gpu_memory(self, grays, options):
        """The device memory the GPU path needs for these frames (:func:`gpumr.faces.gpu.batch_memory`)."""
        from .gpu import batch_memory, cascade_features
        size = self.classifier.getOriginalWindowSize()
        return batch_memory([g.shape for g in grays], (int(size[0]), int(size[1])), self.params["scale_factor"],
                            self.params["min_size"], self.params["max_size"], cascade_features(self.cascade_file))
