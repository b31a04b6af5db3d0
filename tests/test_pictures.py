"""The pictures gpumr makes for people: the contact sheet of ``faces render`` and the CT preview.

A newcomer found photos squashed to 4:3, captions running into each other,
a sheet that silently showed 12 frames, and a CT preview of 120x40 pixels
without a label. These tests hold the fixes: aspect ratios kept, captions
within their tile, the counts said on the sheet and by the command, and a
preview large enough to read.
"""

import json

import cv2
import numpy as np

import seqfile
from gpumr.cli import main


def test_a_tile_keeps_the_frame_s_aspect_ratio():
    from gpumr.faces.render import TILE, tile
    wide = np.full((300, 1200, 3), 200, np.uint8)  # 4:1
    t = tile(wide)
    assert t.shape == (TILE[1], TILE[0], 3)
    rows = np.where((t != t[0, 0]).any(axis=(1, 2)))[0]  # rows holding the picture, not the background
    assert len(rows) == 80 and rows[0] == 80, (len(rows), rows[:3])  # 320 x 80, centred: not stretched to 240
    tall = tile(np.full((700, 300, 3), 200, np.uint8))
    cols = np.where((tall != tall[0, 0]).any(axis=(0, 2)))[0]
    assert abs(len(cols) - round(300 * 240 / 700)) <= 1


def test_captions_fit_their_tile():
    from gpumr.faces.render import TILE, fit_text
    key = "a/very/long/folder/name/of/a/frame/from/the/camera/on/the/roof_000123.jpg"
    short = fit_text(key, TILE[0] - 10)
    width = cv2.getTextSize(short, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)[0][0]
    assert width <= TILE[0] - 10 and "..." in short and short.startswith("a/") and short.endswith(".jpg")
    assert fit_text("f.jpg", TILE[0]) == "f.jpg"


def test_render_says_how_many_frames_it_drew_of_how_many(tmp_path, capsys):
    frame = cv2.imencode(".jpg", np.full((48, 64, 3), 90, np.uint8))[1].tobytes()
    keys = [f"f{i:02d}.jpg" for i in range(14)]
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        for key in keys:
            w.append(key, frame)
    (tmp_path / "out").mkdir()
    lines = [f'{json.dumps(k)}\t{json.dumps({"faces": [[1, 1, 9, 9]], "device": "cpu", "width": 64, "height": 48})}'
             for k in keys[:13]] + [f'{json.dumps(keys[13])}\t{json.dumps({"error": "not an image"})}']
    (tmp_path / "out" / "part-00000").write_text("\n".join(lines) + "\n")
    assert main(["faces", "render", str(tmp_path / "out"), "--images", str(tmp_path / "in.seq"),
                 "-d", str(tmp_path / "pics")]) == 0
    said = capsys.readouterr().out
    assert "drew 13 faces on 13 of 14 frames" in said and "(1 records had errors)" in said
    assert "(12 of 13 frames, --sheet-frames N for more)" in said
    from gpumr.faces.render import CAPTION, TILE, TITLE
    sheet = cv2.imread(str(tmp_path / "pics" / "contact_sheet.png"))
    assert sheet.shape == (TITLE + 3 * (TILE[1] + CAPTION), 4 * TILE[0], 3)
    assert (sheet[:TITLE] > 128).any()  # the title line ("showing 12 of 13 frames ...") is drawn


def test_ct_preview_is_large_enough_to_read(tmp_path):
    from gpumr.ct.preview import MIN_SIDE
    assert main(["ct", "geometry", "-o", str(tmp_path / "g.json"), "--voxels", "16", "--angles", "24"]) == 0
    assert main(["ct", "phantom", "--geometry", str(tmp_path / "g.json"), "-o", str(tmp_path / "p.seq")]) == 0
    assert main(["ct", "reconstruct", str(tmp_path / "p.seq"), "-o", str(tmp_path / "v.npy"),
                 "--preview", str(tmp_path / "v.png")]) == 0
    img = cv2.imread(str(tmp_path / "v.png"))
    assert img.shape[0] >= MIN_SIDE + 60 and img.shape[1] >= 3 * MIN_SIDE + 100, img.shape
    # Each slice is drawn at least MIN_SIDE pixels: the axial panel's phantom spans a good part of it.
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    assert (grey[40:40 + MIN_SIDE, 50:50 + MIN_SIDE] > 60).mean() > 0.2


def test_ct_preview_draws_panels_axes_and_a_colour_bar():
    from gpumr.ct.preview import MIN_SIDE, preview_image
    vol = np.zeros((8, 8, 8), np.float32)
    vol[4, 4, 4] = 1
    img = preview_image(vol)
    ink = (img < 128).all(axis=2)
    assert img.shape[0] >= MIN_SIDE + 60
    # Tick labels and titles: dark ink outside the slices, above and below each panel.
    assert ink[:30].any() and ink[-40:].any()
    # The colour bar, last: a ramp from white (top) to black (bottom).
    column = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)[:, -60:]
    assert column.max() == 255 and column.min() == 0
