"""Face detection on the CPU: OpenCV's ``CascadeClassifier.detectMultiScale``.

Results equal a direct OpenCV call with the same parameters. Defaults
(:data:`DEFAULTS`): ``scale_factor`` 1.1, ``min_neighbors`` 3, ``min_size``
24 (pixels, square), no ``max_size``; the cascade is OpenCV's
``haarcascade_frontalface_default.xml`` from the installed opencv. A cascade
is a file path or the name of one that opencv ships (``cv2.data.haarcascades``).
"""

import os

from ..errors import GpumrError

DEFAULT_CASCADE = "haarcascade_frontalface_default.xml"
#: Detection parameters and their defaults, as ``detectMultiScale`` takes them.
DEFAULTS = dict(scale_factor=1.1, min_neighbors=3, min_size=24, max_size=None)


def cascade_path(name=None):
    """Path of a cascade file: ``name`` if it is a file, else one of opencv's bundled cascades."""
    import cv2
    name = name or DEFAULT_CASCADE
    if os.path.isfile(name):
        return name
    bundled = os.path.join(cv2.data.haarcascades, os.path.basename(name))
    if os.path.isfile(bundled):
        return bundled
    raise GpumrError(f"{name}: no such cascade file (nor in opencv's {cv2.data.haarcascades})")


def load_cascade(path=None):
    """A ready ``cv2.CascadeClassifier``.

    Raises
    ------
    GpumrError
        If the file is missing or is not a cascade OpenCV can load.
    """
    import cv2
    path = cascade_path(path)
    clf = cv2.CascadeClassifier(path)
    if clf.empty():
        raise GpumrError(f"{path}: not a cascade classifier OpenCV can load")
    return clf


def detect(classifier, gray, scale_factor=DEFAULTS["scale_factor"], min_neighbors=DEFAULTS["min_neighbors"],
           min_size=DEFAULTS["min_size"], max_size=DEFAULTS["max_size"]):
    """Faces in a grey image as ``[[x, y, w, h], ...]`` (ints, image pixels), as OpenCV finds them."""
    kwargs = dict(scaleFactor=scale_factor, minNeighbors=min_neighbors, minSize=(min_size, min_size))
    if max_size:
        kwargs["maxSize"] = (max_size, max_size)
    found = classifier.detectMultiScale(gray, **kwargs)
    return [[int(v) for v in box] for box in found]
