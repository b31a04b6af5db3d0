"""Pictures of face-detection results: boxes drawn on the frames, and a contact sheet."""

import os

import numpy as np

from seqfile.atomic import write_bytes

from .. import limits
from ..core.images import MAX_PIXELS, image_size
from ..errors import GpumrError
from ..io.inputs import expand_inputs
from ..io.joboutput import read_job_output
from ..io.keyfiles import KeyFiles
from ..io.outputs import FolderOutput
from ..io.records import open_reader


def draw_boxes(image, faces, thickness=2):
    """A copy of the BGR ``image`` with a white box, ``thickness`` pixels wide, around each of the job's ``faces`` for
    it.

    Examples
    --------
    >>> draw_boxes(np.zeros((4, 4, 3), np.uint8), [[0, 0, 4, 4]], 1)[0, :, 0].tolist()
    [255, 255, 255, 255]
    """
    import cv2
    out = image.copy()
    for x, y, w, h in faces:
        cv2.rectangle(out, (x, y), (x + w - 1, y + h - 1), (255, 255, 255), thickness)
    return out


#: The size of a frame on the contact sheet (width, height); a frame keeps its aspect ratio inside it.
TILE = (320, 240)
#: Height of the caption band under each tile (two lines: the key; the faces and the device) and of the title.
CAPTION, TITLE = 40, 34
_BACKGROUND = 32
_FONT, _SCALE = 0, 0.45  # cv2.FONT_HERSHEY_SIMPLEX


def tile(image):
    """``image`` (BGR) fitted into the contact sheet's :data:`TILE`, its aspect ratio kept.

    Parameters
    ----------
    image : numpy.ndarray
        A BGR image of any size.

    Returns
    -------
    numpy.ndarray
        A 320 x 240 image: ``image`` scaled (area interpolation) to fit, centred on the sheet's dark background.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumr.faces.render import tile
    >>> tile(np.zeros((100, 400, 3), np.uint8)).shape  # a wide frame: 320 x 80 inside, bands above and below
    (240, 320, 3)
    """
    import cv2
    tw, th = TILE
    h, w = image.shape[:2]
    scale = min(tw / w, th / h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    out = np.full((th, tw, 3), _BACKGROUND, np.uint8)
    y0, x0 = (th - size[1]) // 2, (tw - size[0]) // 2
    out[y0:y0 + size[1], x0:x0 + size[0]] = small
    return out


def fit_text(text, width, scale=_SCALE):
    """``text`` shortened in the middle (``a/very...name.jpg``) so that it fits ``width`` pixels when drawn."""
    import cv2

    def fits(t):
        return cv2.getTextSize(t, _FONT, scale, 1)[0][0] <= width
    if fits(text):
        return text
    keep = len(text)
    while keep > 2 and not fits(text[:keep // 2] + "..." + text[len(text) - (keep - keep // 2):]):
        keep -= 1
    return text[:keep // 2] + "..." + text[len(text) - (keep - keep // 2):]


def contact_sheet(tiles, columns=4, labels=None, title=None):
    """Tiles laid out in a grid, each with a caption of up to two lines, under an optional title.

    Parameters
    ----------
    tiles : list of numpy.ndarray
        BGR images of :data:`TILE` size (:func:`tile`).
    columns : int, optional
        Tiles per row.
    labels : list of str, optional
        One caption per tile; a newline starts its second line. Each line is shortened to the tile's width
        (:func:`fit_text`), so captions never overlap.
    title : str, optional
        A line above the grid (e.g. which frames of how many the sheet shows).

    Returns
    -------
    numpy.ndarray
        The sheet, a BGR image."""
    import cv2
    w, h = TILE
    rows = max(1, -(-len(tiles) // columns))
    top = TITLE if title else 0
    sheet = np.full((top + rows * (h + CAPTION), columns * w, 3), _BACKGROUND, np.uint8)
    if title:
        cv2.putText(sheet, fit_text(title, columns * w - 16, 0.55), (8, 23), _FONT, 0.55, (255, 255, 255), 1,
                    cv2.LINE_AA)
    for i, picture in enumerate(tiles):
        r, c = divmod(i, columns)
        y0, x0 = top + r * (h + CAPTION), c * w
        sheet[y0:y0 + h, x0:x0 + w] = picture
        for j, line in enumerate((labels[i].split("\n") if labels else [])[:2]):
            cv2.putText(sheet, fit_text(line, w - 10), (x0 + 5, y0 + h + 16 + 17 * j), _FONT, _SCALE,
                        (235, 235, 235) if j == 0 else (170, 170, 170), 1, cv2.LINE_AA)
    return sheet


def render(outputs, images, directory, sheet_frames=12, columns=4):
    """Draw every result's boxes onto its frame; write the frames and ``contact_sheet.png``.

    Parameters
    ----------
    outputs : list of str
        Job output files or directories (local paths or URIs).
    images : list of str
        The SequenceFiles the job read (local paths or URIs).
    directory : str
        The folder of ``<key>`` pictures (boxes drawn, JPEG) and ``contact_sheet.png``: one output
        (:class:`gpumr.io.outputs.FolderOutput`), new, empty or an earlier ``gpumr faces render`` folder, never one
        holding the inputs.
    sheet_frames : int
        Frames on the contact sheet, at most :data:`gpumr.limits.MAX_SHEET_FRAMES`.

    Returns
    -------
    dict
        ``frames`` drawn, ``records`` in the job output, ``faces`` drawn, ``errors`` (records with an error),
        ``sheet`` path, ``on_sheet`` (frames on the sheet: the first by key)."""
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
        title = (f"showing {len(chosen)} of {counts['drawn']} frames (the first by key); "
                 f"{counts['faces']} faces on the {counts['drawn']}" + (f"; {len(results) - counts['drawn']} of {len(results)} records "
                                                "not drawn" if len(results) > counts["drawn"] else ""))
        sheet = contact_sheet([t[1] for t in chosen], columns, title=title,
                              labels=[f"{t[0]}\n{t[2]} face{'' if t[2] == 1 else 's'}, {t[3]}" for t in chosen])
        ok, buf = cv2.imencode(".png", sheet)
        write_bytes(os.path.join(stage, "contact_sheet.png"), buf.tobytes())
    errors = sum(1 for v in results.values() if "error" in v)
    return dict(frames=counts["drawn"], records=len(results), faces=counts["faces"], errors=errors,
                sheet=os.path.join(directory, "contact_sheet.png"), on_sheet=len(chosen))


def _draw(results, images, out, counts):
    """Draw each result's boxes onto its frame, written through ``out`` (a KeyFiles), counted in ``counts``."""
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
