"""The restated OpenCV detection procedure (the GPU kernel's CPU reference) equals OpenCV."""

import os

import cv2
import numpy as np
import pytest

from gpumr.errors import GpumrError
from gpumr.faces.cascade import Cascade
from gpumr.faces.reference import detect_reference

DATA = cv2.data.haarcascades


def _photos(sample_frames):
    from skimage import data
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE)
              for n in sorted(os.listdir(sample_frames))[:4]]
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    return frames + [astro, cv2.resize(astro, (300, 300)), data.camera(), cv2.resize(frames[0], (1024, 768))]


@pytest.mark.parametrize("cascade, scale_factor, min_neighbors, min_size, max_size", [
    ("haarcascade_frontalface_default.xml", 1.1, 3, 24, None),
    ("haarcascade_frontalface_alt.xml", 1.2, 3, 30, None),
    ("haarcascade_frontalface_alt2.xml", 1.1, 5, 24, 200),
    ("haarcascade_frontalface_default.xml", 1.3, 0, 40, None),
])
def test_reference_equals_opencv(sample_frames, cascade, scale_factor, min_neighbors, min_size, max_size):
    path = os.path.join(DATA, cascade)
    ours, theirs = Cascade(path), cv2.CascadeClassifier(path)
    found = 0
    for gray in _photos(sample_frames):
        kw = dict(minSize=(min_size, min_size))
        if max_size:
            kw["maxSize"] = (max_size, max_size)
        want = sorted(map(list, theirs.detectMultiScale(gray, scale_factor, min_neighbors, **kw)))
        got = sorted(detect_reference(ours, gray, scale_factor, min_neighbors, min_size, max_size))
        assert got == [[int(v) for v in b] for b in want]
        found += len(want)
    assert found > 0


def test_cascade_arrays():
    c = Cascade(os.path.join(DATA, "haarcascade_frontalface_default.xml"))
    assert c.window == (24, 24) and len(c.stages) == 25 and c.stages[:, 1].sum() == len(c.trees) == 2913
    assert c.rects.shape == (2913, 3, 4) and (c.rects[:, :, 0] + c.rects[:, :, 2] <= 24).all()
    alt2 = Cascade(os.path.join(DATA, "haarcascade_frontalface_alt2.xml"))
    assert len(alt2.nodes) > len(alt2.trees)  # trees of more than one node


def test_unsupported_cascades_are_refused_clearly(tmp_path):
    with pytest.raises(GpumrError, match="tilted"):
        Cascade(os.path.join(DATA, "haarcascade_upperbody.xml"))
    bad = tmp_path / "lbp.xml"
    bad.write_text('<?xml version="1.0"?><opencv_storage><cascade><stageType>BOOST</stageType>'
                   '<featureType>LBP</featureType></cascade></opencv_storage>')
    with pytest.raises(GpumrError, match="only BOOST stages of HAAR"):
        Cascade(str(bad))


def test_gpu_pyramid_table_matches_the_scan_grid(sample_frames):
    """The level table the GPU kernels walk covers exactly the reference's window grid."""
    from gpumr.faces.gpu import FaceGPU
    from gpumr.faces.reference import scales
    path = os.path.join(DATA, "haarcascade_frontalface_default.xml")
    grays = _photos(sample_frames)[:3]
    part = FaceGPU(path).pyramid(grays)
    table, meta, n_int, n_win = part.table, part.meta, part.n_int, part.n_win
    expected_levels = sum(1 for g in grays for _, size, _, _, _ in scales(g.shape[::-1], (24, 24), 1.1, 24)
                          if size[0] >= 24 and size[1] >= 24)
    assert len(table) == len(meta) == expected_levels
    img_off, int_off, w, h, nx, ny, step, gx, gy, win_off = table.T
    assert part.n_pix == (w * h).sum() and n_int == ((w + 1) * (h + 1)).sum() and n_win == (gx * gy).sum()
    assert (np.diff(win_off) == (gx * gy)[:-1]).all() and (np.diff(img_off) == (w * h)[:-1]).all()
    assert ((gx - 1) * step < nx).all() and (gx * step >= nx).all() and (nx == w - 23).all()
    frames, scale_values, wins = zip(*meta)
    assert list(frames) == sorted(frames) and all(step[i] == (1 if scale_values[i] >= 2 else 2) for i in range(len(meta)))
