"""The picture of a reconstructed volume that people look at first: three central slices, labelled."""

import numpy as np

#: A slice's longest side on the picture, at least (pixels); volumes larger than MAX_SIDE are shrunk to it.
MIN_SIDE, MAX_SIDE = 256, 512
#: Grey levels span these percentiles of the three slices shown (a few bright or dark voxels do not wash the
#: picture out; the slices, not the whole volume, so that a preview costs the same time and memory at any size).
LOW, HIGH = 1, 99.5

_FONT_SCALE = 0.45
_INK, _PAPER, _FRAME = (40, 40, 40), (255, 255, 255), (120, 120, 120)
_MARGIN = dict(left=46, top=34, bottom=44, right=18)


def _text(img, text, org, scale=_FONT_SCALE, anchor="left"):
    """Draw ``text`` with its baseline at ``org``; ``anchor`` left, centre or right of ``org``."""
    import cv2
    (w, _), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    x = {"left": org[0], "centre": org[0] - w // 2, "right": org[0] - w}[anchor]
    cv2.putText(img, text, (int(x), int(org[1])), cv2.FONT_HERSHEY_SIMPLEX, scale, _INK, 1, cv2.LINE_AA)


def _ticks(n):
    """Voxel indices to mark on an axis of ``n`` voxels: 0, the middle and the last."""
    return sorted({0, n // 2, n - 1})


def _panel(slice2d, lo, hi, scale, title, xlabel, ylabel):
    """One slice as a framed, titled, ticked picture (BGR)."""
    import cv2
    rows, cols = slice2d.shape
    grey = (np.clip((slice2d - lo) / (hi - lo), 0, 1) * 255).astype(np.uint8)
    h, w = int(round(rows * scale)), int(round(cols * scale))
    interp = cv2.INTER_NEAREST if scale >= 1 else cv2.INTER_AREA
    body = cv2.cvtColor(cv2.resize(grey, (w, h), interpolation=interp), cv2.COLOR_GRAY2BGR)
    m = _MARGIN
    img = np.full((m["top"] + h + m["bottom"], m["left"] + w + m["right"], 3), _PAPER, np.uint8)
    y0, x0 = m["top"], m["left"]
    img[y0:y0 + h, x0:x0 + w] = body
    cv2.rectangle(img, (x0 - 1, y0 - 1), (x0 + w, y0 + h), _FRAME, 1)
    for i in _ticks(cols):  # ticks at voxel centres
        x = x0 + int((i + 0.5) * scale)
        cv2.line(img, (x, y0 + h), (x, y0 + h + 4), _FRAME, 1)
        _text(img, str(i), (x, y0 + h + 17), anchor="centre")
    for i in _ticks(rows):
        y = y0 + int((i + 0.5) * scale)
        cv2.line(img, (x0 - 5, y), (x0 - 1, y), _FRAME, 1)
        _text(img, str(i), (x0 - 8, y + 5), anchor="right")
    _text(img, xlabel, (x0 + w // 2, y0 + h + 36), anchor="centre")
    _text(img, ylabel, (8, y0 - 8))
    _text(img, title, (x0 + w // 2, 18), scale=0.55, anchor="centre")
    return img


def _colour_bar(height, lo, hi):
    """A vertical grey scale from ``lo`` (bottom) to ``hi`` (top), with its values written beside it."""
    import cv2
    m = _MARGIN
    labels = [f"{v:.3g}" for v in (hi, (lo + hi) / 2, lo)]
    width = 14 + 10 + max(cv2.getTextSize(t, cv2.FONT_HERSHEY_SIMPLEX, _FONT_SCALE, 1)[0][0] for t in labels) + 10
    img = np.full((m["top"] + height + m["bottom"], width, 3), _PAPER, np.uint8)
    ramp = np.linspace(255, 0, height).astype(np.uint8)[:, None].repeat(14, axis=1)
    y0 = m["top"]
    img[y0:y0 + height, 0:14] = cv2.cvtColor(ramp, cv2.COLOR_GRAY2BGR)
    cv2.rectangle(img, (0, y0 - 1), (14, y0 + height), _FRAME, 1)
    for text, y in zip(labels, (y0, y0 + height // 2, y0 + height - 1)):
        cv2.line(img, (14, y), (19, y), _FRAME, 1)
        _text(img, text, (22, y + 5))
    _text(img, "value", (0, 18), scale=0.5)
    return img


def preview_image(volume):
    """The preview of ``volume`` [z, y, x] as a BGR image (see the module's description).

    Parameters
    ----------
    volume : numpy.ndarray
        A 3-D array, any real dtype.

    Returns
    -------
    numpy.ndarray
        uint8 BGR picture: axial (z = nz // 2), coronal (y = ny // 2) and sagittal (x = nx // 2) slices side by side,
        then the colour bar.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumr.ct.preview import preview_image
    >>> img = preview_image(np.random.default_rng(0).random((32, 32, 32), np.float32))
    >>> img.shape[0] >= 256, img.dtype
    (True, dtype('uint8'))
    """
    volume = np.asarray(volume)
    if volume.ndim != 3 or 0 in volume.shape:
        raise ValueError(f"a preview needs a 3-D volume, not one of shape {volume.shape}")
    nz, ny, nx = volume.shape
    shown = [volume[nz // 2], volume[:, ny // 2, :], volume[:, :, nx // 2]]
    finite = np.concatenate([v[np.isfinite(v)].ravel() for v in shown])
    lo, hi = np.percentile(finite, [LOW, HIGH]) if finite.size else (0.0, 1.0)
    hi = hi if hi > lo else lo + 1
    longest = max(nz, ny, nx)
    scale = MAX_SIDE / longest if longest > MAX_SIDE else max(1, -(-MIN_SIDE // longest))
    panels = [_panel(np.nan_to_num(shown[0]), lo, hi, scale, f"axial  z = {nz // 2}", "x (voxel)", "y"),
              _panel(np.nan_to_num(shown[1]), lo, hi, scale, f"coronal  y = {ny // 2}", "x (voxel)", "z"),
              _panel(np.nan_to_num(shown[2]), lo, hi, scale, f"sagittal  x = {nx // 2}", "y (voxel)", "z")]
    height = max(p.shape[0] for p in panels)
    panels = [np.pad(p, ((0, height - p.shape[0]), (0, 0), (0, 0)), constant_values=255) for p in panels]
    bar_height = int(round(max(nz, ny) * scale))
    bar = _colour_bar(min(bar_height, height - _MARGIN["top"] - _MARGIN["bottom"]), lo, hi)
    bar = np.pad(bar, ((0, height - bar.shape[0]), (0, 12), (0, 0)), constant_values=255)
    return np.concatenate([*panels, bar], axis=1)


def preview_png(volume):
    """:func:`preview_image` encoded as PNG bytes."""
    import cv2
    ok, buf = cv2.imencode(".png", preview_image(volume))
    if not ok:
        raise ValueError("OpenCV could not encode the preview as PNG")
    return buf.tobytes()
