"""Watershed segmentation as a gpumr workload: ``gpumr run watershed`` (CPU only)."""

from .. import limits
from ..core.workload import Option, Workload

#: The default cap on an image's pixels (4096 x 4096): the segmentation holds some 40 bytes a pixel.
DEFAULT_MAX_PIXELS = 4096 * 4096
#: The largest marker neighbourhood and least marker distance taken, pixels.
MAX_FOOTPRINT = 255
MAX_MIN_DISTANCE = 10000


class Watershed(Workload):
    """Watershed segmentation (Otsu, distance transform, peak_local_max markers, watershed); on the CPU."""

    name = "watershed"
    summary = "Watershed segmentation (scikit-image) over SequenceFiles of images: regions and areas; on the CPU."
    decode = "color"
    options = (
        Option("--min-distance", "least distance between two markers, pixels (default 1)", type=int, default=1,
               least=1, most=MAX_MIN_DISTANCE, metavar="PX"),
        Option("--footprint", f"side of the square a marker is the largest distance in, pixels (default 3, at most "
                              f"{MAX_FOOTPRINT})", type=int, default=3, least=1, most=MAX_FOOTPRINT, metavar="PX"),
        Option("--dark", "the objects are darker than the background (default: brighter)", action="store_true",
               default=False),
        Option("--max-pixels", f"refuse larger images as bad records, from their header (default "
                               f"{DEFAULT_MAX_PIXELS:,})", type=int, default=DEFAULT_MAX_PIXELS, least=1,
               most=limits.MAX_PIXELS_CEILING, metavar="N"),
    )

    def load(self, key, value, options):
        """The record's image as ``rgb2gray`` makes it: float64 ``[rows, cols]`` in [0, 1]."""
        from ..core.images import decode_luminance
        return decode_luminance(value, options.max_pixels)

    def cpu(self, key, gray, options):
        from .segment import areas, segment
        labels = segment(gray, options.min_distance, options.footprint, options.dark)
        return {"regions": int(labels.max()), "areas": areas(labels)}
