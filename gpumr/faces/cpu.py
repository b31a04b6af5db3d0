"""Face detection on the CPU: OpenCV's ``CascadeClassifier.detectMultiScale``."""

import os

from ..docstrings import shared
from ..errors import GpumrError
from ..limits import MAX_CASCADE_BYTES

DEFAULT_CASCADE = "haarcascade_frontalface_default.xml"
#: Detection parameters and their defaults, as ``detectMultiScale`` takes them.
DEFAULTS = dict(scale_factor=1.1, min_neighbors=3, min_size=24, max_size=None)
# The detection's parameters, as the docstrings of detect and gpumr.faces.reference.detect_reference give them.
DETECTION = """gray : numpy.ndarray
    A grey image, uint8 [y, x].
scale_factor : float, optional
    Pyramid step between scales (``--scale-factor``).
min_neighbors : int, optional
    Overlapping detections a face needs (``--min-neighbors``).
min_size, max_size : int, optional
    Smallest and largest face side in pixels; ``max_size`` 0 or None: no limit."""


def cascade_path(name=None):
    """The path of a cascade file: ``name`` (``--cascade`` as given) if it is a file, else the cascade OpenCV bundles
    under that bare name (by default ``haarcascade_frontalface_default.xml``). Raises ``GpumrError`` naming
    ``--cascade`` and what is wrong.

    Examples
    --------
    >>> os.path.basename(cascade_path())
    'haarcascade_frontalface_default.xml'
    """
    import cv2
    name = name or DEFAULT_CASCADE
    if os.path.isfile(name):
        return name
    if os.path.lexists(name):
        raise GpumrError(f"--cascade {name}: not a regular file")
    bare = os.path.basename(name) == name and not (os.altsep and os.altsep in name)
    bundled = os.path.join(cv2.data.haarcascades, name)
    if bare and name not in ("", ".", "..") and os.path.isfile(bundled):
        return bundled
    raise GpumrError(f"--cascade {name}: no such cascade file" + (
        f" here, nor one opencv ships (in {cv2.data.haarcascades})" if bare else
        " (a cascade opencv ships is named by its bare file name, e.g. haarcascade_frontalface_alt.xml)"))


def load_cascade(path=None):
    """A ready ``cv2.CascadeClassifier`` of ``path`` (a file or bundled name, as :func:`cascade_path` takes it). Raises
    ``GpumrError`` if the file is missing, larger than :data:`gpumr.limits.MAX_CASCADE_BYTES`, or is not a cascade
    OpenCV can load.

    Examples
    --------
    >>> type(load_cascade()).__name__
    'CascadeClassifier'
    """
    import cv2
    path = cascade_path(path)
    size = os.path.getsize(path)
    if size > MAX_CASCADE_BYTES:
        raise GpumrError(f"--cascade {path}: {size:,} bytes, over the limit of {MAX_CASCADE_BYTES:,} for a cascade")
    clf = cv2.CascadeClassifier()
    try:
        loaded = clf.load(path)
    except cv2.error as exc:
        loaded, why = False, str(exc).strip().splitlines()[-1].rpartition("error: ")[2][:160]
    else:
        why = "OpenCV found no cascade in it"
    if not loaded or clf.empty():
        raise GpumrError(f"--cascade {path}: not a cascade classifier OpenCV can load ({why})")
    return clf


@shared(detection=DETECTION)
def detect(classifier, gray, scale_factor=DEFAULTS["scale_factor"], min_neighbors=DEFAULTS["min_neighbors"],
           min_size=DEFAULTS["min_size"], max_size=DEFAULTS["max_size"]):
    """Faces in a grey image, as OpenCV's ``detectMultiScale`` finds them.

    Parameters
    ----------
    classifier : cv2.CascadeClassifier
        A loaded cascade (:func:`load_cascade`).
    {detection}

    Returns
    -------
    list of list of int
        ``[[x, y, w, h], ...]`` in image pixels."""
    kwargs = dict(scaleFactor=scale_factor, minNeighbors=min_neighbors, minSize=(min_size, min_size))
    if max_size:
        kwargs["maxSize"] = (max_size, max_size)
    found = classifier.detectMultiScale(gray, **kwargs)
    return [[int(v) for v in box] for box in found]
