"""The limits on how much work one option or one piece of input may ask for, and the check that keeps them."""

import math
import numbers

from .errors import GpumrError

# -- face detection ------------------------------------------------------------------------------------
#: ``--max-pixels`` may be raised to this (2**27, e.g. 11585 x 11585): 8 times it, the largest pyramid
#: allowed (below), stays under OpenCV's 32-bit offsets into its pyramid buffer.
MAX_PIXELS_CEILING = 1 << 27
#: ``--scale-factor`` must be over 1 and at most this (larger steps overflow OpenCV's window arithmetic).
MAX_SCALE_FACTOR = 100.0
#: Scales from the cascade's window up to the largest face searched (``--max-size``, else the side of the
#: largest square image ``--max-pixels`` allows); OpenCV and the GPU path walk each of them.
MAX_PYRAMID_LEVELS = 1000
#: One image's pyramid (every scale visited, resized) may hold at most this many times ``--max-pixels``
#: pixels. OpenCV keeps the whole pyramid with its integral images, about 11 bytes per pixel
#: (``bench/limits.py``); the default scale factor's pyramid is 5.8 times the image.
PYRAMID_PIXELS_PER_PIXEL = 8
#: ``--min-size`` and ``--max-size`` at most (the largest side a JPEG can have).
MAX_FACE_SIDE = 65535
#: A JPEG may have at most this many scans (SOS markers): each is a pass of the decoder over the image.
#: libjpeg's own progressive encoding makes 10 (6 for grey); many more only costs time.
MAX_JPEG_SCANS = 100
#: Frames on ``gpumr faces render``'s contact sheet (``--sheet-frames``): 320x240 each, kept in memory.
MAX_SHEET_FRAMES = 100
#: A cascade XML file may be at most this large (OpenCV's largest bundled cascade is 2.7 MB).
MAX_CASCADE_BYTES = 16 << 20

# -- CT ------------------------------------------------------------------------------------------------
#: Projections (angles) in a geometry.
MAX_ANGLES = 65536
#: Detector pixels per side, and per projection.
MAX_DETECTOR_SIDE = 8192
MAX_DETECTOR_PIXELS = 1 << 26
#: Samples in the whole projection set (angles x detector pixels), 8 GiB as float32: a task holds it.
MAX_PROJECTION_SAMPLES = 1 << 31
#: Voxels per side, and in the whole volume (32 GiB as float32: ``ct reconstruct`` and ``ct assemble``
#: hold it).
MAX_VOXEL_SIDE = 16384
MAX_VOXELS = 1 << 33
#: Voxels in one slab, the piece of the volume one task reconstructs at a time (1 GiB as float32).
MAX_SLAB_VOXELS = 1 << 28
#: Lengths in a geometry (distances, pitches, voxel sizes, offsets), in mm: a kilometre is a mistake.
MAX_LENGTH_MM = 1e6
#: Angles in a geometry, in radians, within plus or minus this.
MAX_ANGLE_RAD = 1e6
#: A geometry JSON file may be at most this large (65536 angles take about 1.7 MB).
MAX_GEOMETRY_BYTES = 16 << 20
#: ``--i0`` and ``--noise-i0`` (photons per detector pixel) at most.
MAX_I0 = 1e15

# -- engines and tasks ---------------------------------------------------------------------------------
#: Threads one task may start (``--opencv-threads``, ``--cpu-threads``, ``ct reconstruct --threads``).
MAX_THREADS = 256
#: Reduce tasks (``--reducers``).
MAX_REDUCERS = 10000
#: ``gpumr spark faces --split-size`` at least (4 KiB: Hadoop writes a sync marker every ~2 KB; a smaller
#: split adds tasks, not work).
MIN_SPLIT_SIZE = 4 << 10
#: Byte ranges (Spark tasks) one ``gpumr spark faces`` job may plan: each is a task the driver schedules and
#: tracks (``--split-size 1`` once planned millions and ran the driver's JVM out of memory).
MAX_SPLITS = 10000
#: Tasks that may share one GPU (``--gpu-slots``, ``--slots-per-gpu``); each slot may cost a lock
#: file and a look at it per request, and more tasks per GPU than this is a mistake.
MAX_GPU_SLOTS = 256
#: Sample frames one command makes (``gpumr sample -n``, ``gpumr demo --frames``).
MAX_SAMPLE_FRAMES = 10000


def shown(value):
    """``value`` for an error message: its ``repr`` (one line), cut to 60 characters (ending in ``...`` when cut).

    Examples
    --------
    >>> shown("a" * 80)[-5:], len(shown("a" * 80))
    ('aa...', 60)
    """
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(integer, least, most, above):
    kind = "a whole number" if integer else "a number"
    fmt = (lambda v: f"{v:,}") if integer else (lambda v: f"{v:g}")
    if above is not None and most is not None:
        return f"{kind} over {fmt(above)} and at most {fmt(most)}"
    if above is not None:
        return f"{kind} over {fmt(above)}"
    if least is not None and most is not None:
        return f"{kind} from {fmt(least)} to {fmt(most)}"
    if least is not None:
        return f"{kind} of at least {fmt(least)}"
    if most is not None:
        return f"{kind} of at most {fmt(most)}"
    return f"a finite {kind[2:]}"


def number(name, value, least=None, most=None, *, above=None, integer=False):
    """``value`` if it is a finite number within the limits, else a one-line refusal naming ``name``. Raises
    ``GpumrError``: ``"{name} must be {what}, not {value}"``.

    Parameters
    ----------
    name : str
        What the value is, as the user wrote it: an option (``"--scale-factor"``) or a file's field (``"geo.json:
        DSO"``).
    value : object
        The value as given (parsed JSON included): a bool, a string, a list or a non-finite number is refused, never
        converted.
    least, most : number, optional
        Inclusive bounds.
    above : number, optional
        Exclusive lower bound.
    integer : bool
        Require a whole number (a float with no fraction is accepted); the result is then an ``int``.

    Examples
    --------
    >>> number("--frames", 3.0, 1, 10, integer=True)
    3
    >>> number("--scale-factor", 0.5, above=1)
    Traceback (most recent call last):
    gpumr.errors.GpumrError: --scale-factor must be a number over 1, not 0.5
    """
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    ok = whole or (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value))
    if ok and integer and not whole:
        ok = float(value).is_integer()
    if ok and integer:
        value = int(value)
    if ok:
        ok = ((least is None or value >= least) and (most is None or value <= most)
              and (above is None or value > above))
    if not ok:
        raise GpumrError(f"{name} must be {_describe(integer, least, most, above)}, not {shown(value)}")
    return value


def at_most(name, amount, most, what):
    """``amount`` (a product of checked sizes, e.g. voxels of a volume) if it is at most ``most`` (one of this module's
    limits). Raises ``GpumrError`` naming ``name`` (what the user knows: an option, a file and its field), ``amount`` and
    ``what`` (the unit, ``"voxels"``) when it is over.

    Examples
    --------
    >>> at_most("geo.json: nVoxel", 3000 ** 3, MAX_VOXELS, "voxels")
    Traceback (most recent call last):
    gpumr.errors.GpumrError: geo.json: nVoxel: 27,000,000,000 voxels, over the limit of 8,589,934,592
    """
    if amount > most:
        raise GpumrError(f"{name}: {amount:,} {what}, over the limit of {most:,}")
    return amount
