"""Pictures of face-detection results: boxes drawn on the frames, and a contact sheet.

People look at these, not at JSON: each frame gets white boxes around its
faces (as in the original CUDA-Hadoop work's figure), and the first frames
are laid out as a contact sheet PNG.
"""

import os

import numpy as np

from seqfile import Reader
from seqfile.atomic import write_bytes

from ..errors import GpumrError
from ..io.inputs import expand_inputs
from ..io.joboutput import read_job_output
from ..io.keyfiles import KeyFiles
from ..io.outputs import FolderOutput


def draw_boxes(image, faces, thickness=2):
    """A copy of ``image`` with a white box around each ``[x, y, w, h]``."""
    import cv2
    out = image.copy()
    for x, y, w, h in faces:
        cv2.rectangle(out, (x, y), (x + w - 1, y + h - 1), (255, 255, 255), thickness)
    return out


def contact_sheet(tiles, columns=4, tile_size=(320, 240), labels=None):
    """Tiles (BGR images) resized into a grid with optional captions."""
    import cv2
    w, h = tile_size
    rows = max(1, -(-len(tiles) // columns))
    sheet = np.full((rows * (h + 24), columns * w, 3), 32, np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, columns)
        y0, x0 = r * (h + 24), c * w
        sheet[y0:y0 + h, x0:x0 + w] = cv2.resize(tile, (w, h), interpolation=cv2.INTER_AREA)
        if labels:
            cv2.putText(sheet, labels[i], (x0 + 4, y0 + h + 17), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                        (230, 230, 230), 1, cv2.LINE_AA)
    return sheet


def render(outputs, images, directory, sheet_frames=12, columns=4):
    """Draw every result's boxes onto its frame; write the frames and ``contact_sheet.png``.

    Parameters
    ----------
    outputs : list of str
        Job output files or directories.
    images : list of str
        The SequenceFiles the job read.
    directory : str
        The folder of ``<key>`` pictures (boxes drawn, JPEG) and
        ``contact_sheet.png``: one output (:class:`gpumr.io.outputs.FolderOutput`),
        new, empty or an earlier ``gpumr faces render`` folder, never one
        holding the inputs.

    Returns
    -------
    dict
        ``frames`` drawn, ``faces`` drawn, ``errors`` (records with an error), ``sheet`` path.
    """
    import cv2
    output = FolderOutput(directory, "gpumr faces render", inputs=[*outputs, *images], option="-d")
    results = dict(read_job_output(outputs))
    with output as stage:
        drawn, faces, tiles = _draw(results, images, stage)
        if not drawn:
            raise GpumrError("no record of the job output matches an image in the given SequenceFiles")
        tiles.sort(key=lambda t: t[0])
        chosen = tiles[:sheet_frames]
        sheet = contact_sheet([t[1] for t in chosen], columns,
                              labels=[f"{t[0]}  {t[2]} face(s)  {t[3]}" for t in chosen])
        ok, buf = cv2.imencode(".png", sheet)
        write_bytes(os.path.join(stage, "contact_sheet.png"), buf.tobytes())
    errors = sum(1 for v in results.values() if "error" in v)
    return dict(frames=drawn, faces=faces, errors=errors, sheet=os.path.join(directory, "contact_sheet.png"))


def _draw(results, images, folder):
    """Draw each result's boxes onto its frame, written into ``folder``; return ``(frames, faces, tiles)``."""
    import cv2
    drawn = faces = 0
    tiles = []
    # Pictures go where unpack would put the frames: never through a link, never outside ``folder``.
    with KeyFiles(folder, record=False) as out:
        for path in expand_inputs(images):
            with Reader(path) as reader:
                for key, value, _ in reader:
                    res = results.get(key)
                    if not res or "faces" not in res:
                        continue
                    img = cv2.imdecode(np.frombuffer(value, np.uint8), cv2.IMREAD_COLOR)
                    if img is None:
                        continue
                    boxed = draw_boxes(img, res["faces"])
                    ok, buf = cv2.imencode(".jpg", boxed, [cv2.IMWRITE_JPEG_QUALITY, 90])
                    out.write(key if key.lower().endswith((".jpg", ".jpeg")) else key + ".jpg", buf.tobytes())
                    drawn += 1
                    faces += len(res["faces"])
                    tiles.append((key, boxed, len(res["faces"]), res.get("device", "?")))
    return drawn, faces, tiles
