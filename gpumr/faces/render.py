"""Pictures of face-detection results: boxes drawn on the frames, and a contact sheet.

People look at these, not at JSON: each frame gets white boxes around its
faces (as in the original CUDA-Hadoop work's figure), and the first frames
are laid out as a contact sheet PNG.
"""

import os

import numpy as np

from seqfile.atomic import write_bytes

from .. import limits
from ..errors import GpumrError
from ..io.inputs import expand_inputs
from ..io.joboutput import read_job_output
from ..io.keyfiles import KeyFiles
from ..io.outputs import FolderOutput
from ..io.records import open_reader
from ..core.images import MAX_PIXELS, image_size


def draw_boxes(image, faces, thickness=2):
    """A copy of ``image`` with a white box around each face.

    Parameters
    ----------
    image : numpy.ndarray
        A BGR image.
    faces : iterable of [x, y, w, h]
        The job's ``faces`` for this image.
    thickness : int, optional
        Line width in pixels.

    Returns
    -------
    numpy.ndarray
        The drawn copy; ``image`` is unchanged.
    """
    import cv2
    out = image.copy()
    for x, y, w, h in faces:
        cv2.rectangle(out, (x, y), (x + w - 1, y + h - 1), (255, 255, 255), thickness)
    return out


#: The size of a frame on the contact sheet (width, height).
TILE = (320, 240)


def tile(image):
    """``image`` (BGR) at the contact sheet's :data:`TILE` size.

    Parameters
    ----------
    image : numpy.ndarray
        A BGR image of any size.

    Returns
    -------
    numpy.ndarray
        The image resized to 320 x 240 (area interpolation).
    """
    import cv2
    return cv2.resize(image, TILE, interpolation=cv2.INTER_AREA)


def contact_sheet(tiles, columns=4, labels=None):
    """Tiles laid out in a grid with optional captions.

    Parameters
    ----------
    tiles : list of numpy.ndarray
        BGR images of :data:`TILE` size (:func:`tile`).
    columns : int, optional
        Tiles per row.
    labels : list of str, optional
        One caption per tile.

    Returns
    -------
    numpy.ndarray
        The sheet, a BGR image.
    """
    import cv2
    w, h = TILE
    rows = max(1, -(-len(tiles) // columns))
    sheet = np.full((rows * (h + 24), columns * w, 3), 32, np.uint8)
    for i, picture in enumerate(tiles):
        r, c = divmod(i, columns)
        y0, x0 = r * (h + 24), c * w
        sheet[y0:y0 + h, x0:x0 + w] = picture
        if labels:
            cv2.putText(sheet, labels[i], (x0 + 4, y0 + h + 17), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                        (230, 230, 230), 1, cv2.LINE_AA)
    return sheet


def render(outputs, images, directory, sheet_frames=12, columns=4):
    """Draw every result's boxes onto its frame; write the frames and ``contact_sheet.png``.

    Frames are drawn one at a time; only the ``sheet_frames`` first (by key)
    are kept for the sheet, each as a :data:`TILE`-sized copy, so memory
    grows neither with the number of frames nor with their size. A frame is decoded only if its header's size is within
    :data:`gpumr.core.images.MAX_PIXELS`, as in the job.

    Parameters
    ----------
    outputs : list of str
        Job output files or directories (local paths or URIs).
    images : list of str
        The SequenceFiles the job read (local paths or URIs).
    directory : str
        The folder of ``<key>`` pictures (boxes drawn, JPEG) and
        ``contact_sheet.png``: one output (:class:`gpumr.io.outputs.FolderOutput`),
        new, empty or an earlier ``gpumr faces render`` folder, never one
        holding the inputs.
    sheet_frames : int
        Frames on the contact sheet, at most :data:`gpumr.limits.MAX_SHEET_FRAMES`.

    Returns
    -------
    dict
        ``frames`` drawn, ``faces`` drawn, ``errors`` (records with an error), ``sheet`` path.
    """
    import heapq

    import cv2
    sheet_frames = limits.number("--sheet-frames", sheet_frames, 1, limits.MAX_SHEET_FRAMES, integer=True)
    output = FolderOutput(directory, "gpumr faces render", inputs=[*outputs, *images], option="-d")
    results = dict(read_job_output(outputs))
    counts = dict(drawn=0, faces=0)
    with output as stage:
        # Pictures go where unpack would put the frames: never through a link, never outside ``stage``.
        with KeyFiles(stage, record=False) as out:
            chosen = heapq.nsmallest(sheet_frames, _draw(results, images, out, counts), key=lambda t: t[0])
        if not counts["drawn"]:
            raise GpumrError("no record of the job output matches an image in the given SequenceFiles")
        sheet = contact_sheet([t[1] for t in chosen], columns,
                              labels=[f"{t[0]}  {t[2]} face(s)  {t[3]}" for t in chosen])
        ok, buf = cv2.imencode(".png", sheet)
        write_bytes(os.path.join(stage, "contact_sheet.png"), buf.tobytes())
    errors = sum(1 for v in results.values() if "error" in v)
    return dict(frames=counts["drawn"], faces=counts["faces"], errors=errors,
                sheet=os.path.join(directory, "contact_sheet.png"))


def _draw(results, images, out, counts):
    """Draw each result's boxes onto its frame, written through ``out`` (a KeyFiles), counted in ``counts``.

    Yields ``(key, boxed image as a sheet tile, faces, device)`` one frame at a time.
    """
    import cv2
    for path in expand_inputs(images):
        with open_reader(path) as reader:  # a local path or a URI, through the filesystem layer
            for key, value, _ in reader:
                res = results.get(key)
                size = image_size(value) if res and "faces" in res else None
                if size is None or size[0] * size[1] > MAX_PIXELS:
                    continue
                img = cv2.imdecode(np.frombuffer(value, np.uint8), cv2.IMREAD_COLOR)
                if img is None:
                    continue
                boxed = draw_boxes(img, res["faces"])
                ok, buf = cv2.imencode(".jpg", boxed, [cv2.IMWRITE_JPEG_QUALITY, 90])
                out.write(key if key.lower().endswith((".jpg", ".jpeg")) else key + ".jpg", buf.tobytes())
                counts["drawn"] += 1
                counts["faces"] += len(res["faces"])
                yield key, tile(boxed), len(res["faces"]), res.get("device", "?")
