"""Blob detection (``skimage.feature.blob_log``) as a gpumr workload: ``gpumr run blobs``."""

from .. import limits
from ..core.workload import Option, Workload

#: ``blob_log``'s parameters as scikit-image's own example and a published comparison of RADICAL-Pilot, Spark
#: and Dask on image analysis ran it.
DEFAULTS = {"min_sigma": 1.0, "max_sigma": 30.0, "num_sigma": 10, "threshold": 0.1, "overlap": 0.5}
#: The largest sigma taken: its kernels reach 4 sigma either side of each pixel, for every pixel and scale.
MAX_SIGMA = 500.0
#: The most scales taken (each is a plane of the cube, 8 bytes a pixel).
MAX_SCALES = 100
#: The default cap on an image's pixels (4096 x 4096); its cube and planes must fit :data:`MAX_CUBE_BYTES`.
DEFAULT_MAX_PIXELS = 4096 * 4096
#: The most bytes one image's scale-space cube and working planes may take (host or device).
MAX_CUBE_BYTES = 16 << 30


class Blobs(Workload):
    """Blobs by the Laplacian of Gaussian (scikit-image's ``blob_log``); per record a free GPU or the CPU."""

    name = "blobs"
    summary = "Blob detection (scikit-image's blob_log) over SequenceFiles of images; per record a free GPU or the CPU."
    decode = "color"
    gpu_records = 4
    options = (
        Option("--min-sigma", f"smallest Gaussian's sigma, over 0 (default {DEFAULTS['min_sigma']:g})", type=float,
               default=DEFAULTS["min_sigma"], above=0, most=MAX_SIGMA, metavar="S"),
        Option("--max-sigma", f"largest Gaussian's sigma, over 0 and at most {MAX_SIGMA:g} "
                              f"(default {DEFAULTS['max_sigma']:g})", type=float, default=DEFAULTS["max_sigma"],
               above=0, most=MAX_SIGMA, metavar="S"),
        Option("--num-sigma", f"scales between them (default {DEFAULTS['num_sigma']}, at most {MAX_SCALES})", type=int,
               default=DEFAULTS["num_sigma"], least=1, most=MAX_SCALES, metavar="N"),
        Option("--threshold", f"least scale-normalised response of a blob, at least 0 (default "
                              f"{DEFAULTS['threshold']:g})", type=float, default=DEFAULTS["threshold"], least=0,
               most=1e6),
        Option("--overlap", f"blobs overlapping more than this fraction lose the smaller one, 0 to 1 (default "
                            f"{DEFAULTS['overlap']:g})", type=float, default=DEFAULTS["overlap"], least=0, most=1),
        Option("--log-scale", "space the scales evenly on a log scale (default: linearly)", action="store_true",
               default=False),
        Option("--max-pixels", f"refuse larger images as bad records, from their header (default "
                               f"{DEFAULT_MAX_PIXELS:,}); with --num-sigma, bounds each record's memory",
               type=int, default=DEFAULT_MAX_PIXELS, least=1, most=limits.MAX_PIXELS_CEILING, metavar="N"),
    )

    # -- once per job --------------------------------------------------------------------------------
    def check(self, options):
        from .gpu import device_bytes
        need = device_bytes((options.max_pixels, 1), options.num_sigma)
        limits.at_most(f"--max-pixels {options.max_pixels:,} with --num-sigma {options.num_sigma}: one image's scale "
                       "space",
                       need, MAX_CUBE_BYTES, "bytes")

    # -- in each task --------------------------------------------------------------------------------
    def setup(self, options):
        from .scalespace import sigmas
        self.scales = sigmas(options.min_sigma, options.max_sigma, options.num_sigma, options.log_scale)
        self._gpu = None

    def load(self, key, value, options):
        """The record's image as ``rgb2gray`` makes it: float64 ``[rows, cols]`` in [0, 1]."""
        from ..core.images import decode_luminance
        return decode_luminance(value, options.max_pixels)

    def cpu(self, key, gray, options):
        from skimage.feature import blob_log
        found = blob_log(gray, min_sigma=options.min_sigma, max_sigma=options.max_sigma, num_sigma=options.num_sigma,
                         threshold=options.threshold, overlap=options.overlap, log_scale=options.log_scale)
        return {"blobs": found.tolist()}

    def gpu_ready(self, options, simulated):
        from ..gpu.launch import available
        ok, why = available(simulated)
        if not ok:
            return why
        from .scalespace import prune
        try:
            prune()
        except ImportError as exc:
            return str(exc)
        from .gpu import LoGCube
        self._gpu = LoGCube(self.scales)
        return None

    def gpu_batch(self, records, options, device):
        return [{"cube": self._gpu.run(gray, device.gpu)} for _, gray in records]

    def gpu_memory(self, grays, options):
        from .gpu import device_bytes
        return sum(device_bytes(g.shape, len(self.scales)) for g in grays) + self._gpu.table.nbytes

    def finish(self, key, result, options):
        """A GPU result's cube -> its blobs (on the host, after the lease); a CPU result as it is."""
        if "cube" not in result:
            return result
        from .scalespace import peaks
        return {"blobs": peaks(result["cube"], self.scales, options.threshold, options.overlap).tolist()}
