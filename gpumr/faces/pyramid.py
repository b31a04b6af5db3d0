"""How much work one face detection asks for: the scales of its image pyramid and their pixels."""

import math

from .. import limits
from ..core import BadRecord
from ..errors import GpumrError
from .reference import scales


class Pyramid:
    """The bounds of one detection's image pyramids. Raises ``GpumrError``: a parameter out of its range, a search
    that can find nothing (``--max-size`` below ``--min-size`` or below the window, ``--min-size`` larger than any
    image ``--max-pixels`` allows), or more than :data:`gpumr.limits.MAX_PYRAMID_LEVELS` scales up to the largest face
    searched.

    Parameters
    ----------
    window : (int, int)
        The cascade's window (``CascadeClassifier.getOriginalWindowSize()``).
    scale_factor, min_size, max_size, max_pixels
        As the face job's options (``max_size`` None: no limit)."""

    def __init__(self, window, scale_factor, min_size, max_size, max_pixels):
        scale_factor = limits.number("--scale-factor", scale_factor, above=1.0, most=limits.MAX_SCALE_FACTOR)
        max_pixels = limits.number("--max-pixels", max_pixels, 1, limits.MAX_PIXELS_CEILING, integer=True)
        min_size = limits.number("--min-size", min_size, 1, limits.MAX_FACE_SIDE, integer=True)
        if window[0] < 1 or window[1] < 1:
            raise GpumrError(f"the cascade's window is {window[0]}x{window[1]} pixels: not a usable cascade")
        side = math.isqrt(max_pixels)
        if min_size > side:
            raise GpumrError(f"--min-size {min_size} is larger than any image --max-pixels {max_pixels} allows "
                             f"({side}x{side}): no face can be found")
        if max_size is not None:
            max_size = limits.number("--max-size", max_size, 1, limits.MAX_FACE_SIDE, integer=True)
            if max_size < min_size:
                raise GpumrError(f"--max-size {max_size} is below --min-size {min_size}: no face can be found")
            if max_size < max(window):
                raise GpumrError(f"--max-size {max_size} is below the cascade's {window[0]}x{window[1]} window: "
                                 "no face can be found")
        largest = min(max_size or side, side)
        try:
            scales((largest, largest), window, scale_factor)
        except GpumrError:
            raise GpumrError(
                f"--scale-factor {scale_factor:g} makes more than {limits.MAX_PYRAMID_LEVELS} scales from the "
                f"cascade's {window[0]}x{window[1]} window up to {largest} pixels (the largest face "
                + ("--max-size allows): use a larger --scale-factor or a smaller --max-size" if largest == max_size
                   else f"in an image --max-pixels {max_pixels} allows): use a larger --scale-factor, a --max-size, "
                        "or a smaller --max-pixels")) from None
        self.window = tuple(window)
        self.params = dict(scale_factor=scale_factor, min_size=min_size, max_size=max_size)
        self.max_pixels = max_pixels
        #: Pixels one image's pyramid may hold.
        self.budget = limits.PYRAMID_PIXELS_PER_PIXEL * max_pixels

    def pixels(self, width, height):
        """Pixels of the pyramid of a ``width`` x ``height`` image (its size from its header): the sum of every
        visited scale's resized image."""
        p = self.params
        return sum(sw * sh for _, (sw, sh), _, _, _ in scales((width, height), self.window, p["scale_factor"],
                                                           p["min_size"], p["max_size"]))

    def check(self, width, height):
        """Refuse an image whose pyramid is over :attr:`budget`, from its ``width`` and ``height`` alone (from its
        header). Raises ``BadRecord`` naming the image's size, the pyramid's and the limit."""
        n = self.pixels(width, height)
        if n > self.budget:
            raise BadRecord(f"image of {width}x{height} pixels: its pyramid at --scale-factor "
                            f"{self.params['scale_factor']:g} holds {n:,} pixels, over the limit of "
                            f"{limits.PYRAMID_PIXELS_PER_PIXEL} x --max-pixels = {self.budget:,}")
