"""Adaboost (Haar cascade) face detection: the CPU path and the workload.

The CPU path is OpenCV's ``CascadeClassifier.detectMultiScale`` on the
grey image, so results equal a direct OpenCV call with the same parameters.
Defaults: ``scale_factor`` 1.1, ``min_neighbors`` 3, ``min_size`` 24 (pixels,
square), no ``max_size``; the cascade is OpenCV's
``haarcascade_frontalface_default.xml`` from the installed opencv.
"""

import io
import os

import numpy as np

from .core import BadRecord, Workload
from .errors import GpumrError

DEFAULT_CASCADE = "haarcascade_frontalface_default.xml"
#: Largest image accepted by default (decompression bombs are refused before decoding).
MAX_PIXELS = 50_000_000


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


def image_size(data):
    """``(width, height)`` from an image header without decoding pixels, or None if unknown."""
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None  # only the header is read; our own limit applies
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:
        return None


def decode_gray(data, max_pixels=MAX_PIXELS):
    """Decode image bytes to an 8-bit grey array.

    Raises
    ------
    BadRecord
        Empty, undecodable, or larger than ``max_pixels`` (checked from the header first).
    """
    import cv2
    if len(data) == 0:
        raise BadRecord("empty value (zero bytes)")
    size = image_size(data)
    if size is not None and size[0] * size[1] > max_pixels:
        raise BadRecord(f"image of {size[0]}x{size[1]} pixels exceeds the limit of {max_pixels}")
    buf = np.frombuffer(data, np.uint8)
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    except cv2.error as exc:
        raise BadRecord(f"not a decodable image ({str(exc).strip().splitlines()[-1][:120]})") from None
    if img is None or img.size == 0:
        raise BadRecord("not a decodable image")
    if img.shape[0] * img.shape[1] > max_pixels:
        raise BadRecord(f"image of {img.shape[1]}x{img.shape[0]} pixels exceeds the limit of {max_pixels}")
    return img


def detect(classifier, gray, scale_factor=1.1, min_neighbors=3, min_size=24, max_size=None):
    """Faces in a grey image as ``[[x, y, w, h], ...]`` (ints, image pixels), as OpenCV finds them."""
    kwargs = dict(scaleFactor=scale_factor, minNeighbors=min_neighbors, minSize=(min_size, min_size))
    if max_size:
        kwargs["maxSize"] = (max_size, max_size)
    found = classifier.detectMultiScale(gray, **kwargs)
    return [[int(v) for v in box] for box in found]


class FaceDetection(Workload):
    """Face detection over image records.

    Parameters
    ----------
    cascade : str, optional
        Cascade XML path (or a bundled cascade's file name).
    scale_factor, min_neighbors, min_size, max_size
        As ``detectMultiScale``.
    max_pixels : int
        Images above this many pixels are refused as bad records.
    """

    name = "face detection"
    gpu_batch = 16
    gpu_memory = 256 * 1024 * 1024

    def __init__(self, cascade=None, scale_factor=1.1, min_neighbors=3, min_size=24, max_size=None,
                 max_pixels=MAX_PIXELS):
        self.cascade_file = cascade_path(cascade)
        self.classifier = load_cascade(self.cascade_file)
        self.params = dict(scale_factor=scale_factor, min_neighbors=min_neighbors, min_size=min_size,
                           max_size=max_size)
        self.max_pixels = max_pixels

    def decode(self, key, value):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadRecord(f"value is a {type(value).__name__}, not image bytes")
        return decode_gray(value, self.max_pixels)

    def run_cpu(self, gray):
        return detect(self.classifier, gray, **self.params)

    def output(self, key, gray, faces, device):
        return {"faces": faces, "device": device, "width": int(gray.shape[1]), "height": int(gray.shape[0])}

    def gpu_backend(self):
        from .gpu import available
        ok, _ = available()
        if not ok:
            return None
        from .faces_gpu import FaceGPU
        try:
            return FaceGPU(self.cascade_file, **self.params)
        except GpumrError:  # a cascade the GPU kernel does not take (tilted features, ...)
            return None
