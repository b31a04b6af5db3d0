"""Face detection as a gpumr workload: one image record in, its faces out."""

from .. import limits
from ..core import BadRecord, Workload
from ..core.declare import Declaration, Option
from ..errors import GpumrError
from .cpu import DEFAULT_CASCADE, DEFAULTS, cascade_path, detect, load_cascade
from .decode import MAX_PIXELS, decode_gray
from .pyramid import Pyramid


class FaceDetection(Workload):
    """Face detection over image records.

    Parameters
    ----------
    cascade : str, optional
        Cascade XML path (or a bundled cascade's file name).
    scale_factor, min_neighbors, min_size, max_size
        As ``detectMultiScale``.
    max_pixels : int
        Images above this many pixels are refused as bad records, and so are
        those whose image pyramid would be over its limit (:class:`Pyramid`).

    Raises
    ------
    GpumrError
        A missing or unloadable cascade, or parameters out of their limits.
    """

    name = "face detection"
    gpu_batch = 16

    def __init__(self, cascade=None, scale_factor=DEFAULTS["scale_factor"],
                 min_neighbors=DEFAULTS["min_neighbors"], min_size=DEFAULTS["min_size"],
                 max_size=DEFAULTS["max_size"], max_pixels=MAX_PIXELS):
        self.cascade_file = cascade_path(cascade)
        self.classifier = load_cascade(self.cascade_file)
        self.pyramid = Pyramid(self.classifier.getOriginalWindowSize(), scale_factor, min_size, max_size, max_pixels)
        self.params = dict(min_neighbors=min_neighbors, **self.pyramid.params)
        self.max_pixels = self.pyramid.max_pixels

    def decode(self, key, value):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadRecord(f"value is a {type(value).__name__}, not image bytes")
        return decode_gray(value, self.max_pixels, check=self.pyramid.check)

    def run_cpu(self, gray):
        return detect(self.classifier, gray, **self.params)

    def outputs(self, key, gray, faces, device):
        return [(key, {"faces": faces, "device": device, "width": int(gray.shape[1]),
                       "height": int(gray.shape[0])})]

    def gpu_memory_for(self, grays):
        """The device memory the GPU path needs for these frames (:func:`gpumr.faces.gpu.batch_memory`)."""
        from .gpu import batch_memory, cascade_features
        size = self.classifier.getOriginalWindowSize()
        return batch_memory([g.shape for g in grays], (int(size[0]), int(size[1])), self.params["scale_factor"],
                            self.params["min_size"], self.params["max_size"], cascade_features(self.cascade_file))

    def gpu_backend(self, simulated=False):
        from ..gpu.launch import available
        ok, _ = available(simulated)
        if not ok:
            return None
        from .gpu import FaceGPU
        try:
            return FaceGPU(self.cascade_file, **self.params)
        except GpumrError:  # a cascade the GPU kernel does not take (tilted features, ...)
            return None


class Faces(Declaration):
    """Face detection, declared once for every engine (:mod:`gpumr.core.declare`)."""

    name = "faces"
    summary = "Face detection (OpenCV's Haar cascades) over SequenceFiles of images; per record a free GPU or the CPU."
    input = "seqfile"
    options = (
        Option("--cascade", f"cascade XML file, or the bare name of one opencv ships (default {DEFAULT_CASCADE}); "
                            "shipped to the tasks", metavar="XML", side_file=True),
        Option("--scale-factor", f"pyramid step between scales, over 1 and at most {limits.MAX_SCALE_FACTOR:g} "
                                 f"(default {DEFAULTS['scale_factor']})", type=float, default=DEFAULTS["scale_factor"]),
        Option("--min-neighbors", f"overlapping detections a face needs (default {DEFAULTS['min_neighbors']})",
               type=int, default=DEFAULTS["min_neighbors"], least=0, integer=True),
        Option("--min-size", f"smallest face, pixels (default {DEFAULTS['min_size']})", type=int,
               default=DEFAULTS["min_size"], metavar="PX"),
        Option("--max-size", "largest face, pixels (default: no limit)", type=int, default=DEFAULTS["max_size"],
               metavar="PX"),
        Option("--max-pixels", f"refuse larger images as bad records, from their header (default {MAX_PIXELS:,}, "
                               f"at most {limits.MAX_PIXELS_CEILING:,}); an image's pyramid may hold "
                               f"{limits.PYRAMID_PIXELS_PER_PIXEL} times this", type=int, default=MAX_PIXELS,
               metavar="N"),
        Option("--opencv-threads", "OpenCV threads per task (default 1: engines run one task per core)", type=int,
               default=1, metavar="N", least=1, most=limits.MAX_THREADS, integer=True),
    )

    def prepare(self, values):
        # A cascade opencv ships may be given by its file name; ship it by its path.
        name = values.get("--cascade")
        try:
            return {"--cascade": cascade_path(name)} if name else {}
        except GpumrError:
            return {}  # said by check

    def check(self, o):
        super().check(o)
        window = load_cascade(o.cascade).getOriginalWindowSize()
        Pyramid(window, o.scale_factor, o.min_size, o.max_size, o.max_pixels)

    def make(self, o):
        import cv2
        cv2.setNumThreads(o.opencv_threads)
        return FaceDetection(o.cascade, o.scale_factor, o.min_neighbors, o.min_size, o.max_size, o.max_pixels)


#: The declaration of face detection.
DECLARATION = Faces()
