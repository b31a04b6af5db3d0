"""Built-in sample data: video-like frames made from real photographs."""

import os

import numpy as np

from seqfile.atomic import write_bytes

from .. import limits
from ..io.outputs import FolderOutput

FRAME_SIZE = (640, 480)
_BACKGROUNDS = ("coffee", "chelsea", "rocket", "hubble_deep_field", "astronaut",
                "retina", "immunohistochemistry", "coffee")


def _rgb(img):
    import cv2
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    img = img[..., :3]
    if img.dtype != np.uint8:
        img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
    return cv2.cvtColor(img, cv2.COLOR_RGB2BGR)


def _mosaic(height=960):
    """Real photos side by side at a common height, as one wide strip."""
    import cv2
    from skimage import data
    tiles = []
    for name in _BACKGROUNDS:
        img = _rgb(getattr(data, name)())
        scale = height / img.shape[0]
        tiles.append(cv2.resize(img, (int(img.shape[1] * scale), height), interpolation=cv2.INTER_CUBIC))
    return np.concatenate(tiles, axis=1)


def _faces():
    """Face crops: the astronaut's face and the LFW faces (the first 100 of lfw_subset)."""
    from skimage import data
    astro = _rgb(data.astronaut())[40:190, 160:290]
    lfw = (data.lfw_subset()[:100] * 255).astype(np.uint8)
    return [astro] + [_rgb(f) for f in lfw]


def frame_count(count):
    """``count`` (``gpumr sample -n``, ``gpumr demo --frames``) if it is a whole number from 1 to
    :data:`gpumr.limits.MAX_SAMPLE_FRAMES`. Raises ``GpumrError`` otherwise.

    Examples
    --------
    >>> frame_count(48)
    48
    """
    return limits.number("sample frames (-n, --frames)", count, 1, limits.MAX_SAMPLE_FRAMES, integer=True)


def make_frames(dest, count=48, seed=0, quality=90):
    """Write ``count`` sample frames ``frame_00000.jpg``... (JPEG ``quality`` 0 to 100) as the folder ``dest``; return
    their paths in order. The same ``seed`` (where the faces are placed and how they move) gives the same frames.
    Raises ``GpumrError``: ``count`` over :data:`gpumr.limits.MAX_SAMPLE_FRAMES`, or a negative ``seed``."""
    count = frame_count(count)
    limits.number("--seed", seed, least=0, integer=True)
    with FolderOutput(dest, "gpumr sample") as stage:
        names = _write_frames(stage, count, seed, quality)
    return [os.path.join(dest, n) for n in names]


def _write_frames(folder, count, seed, quality):
    """Write the frames into ``folder``; return their names."""
    import cv2
    rng = np.random.default_rng(seed)
    strip = _mosaic()
    faces = _faces()
    w, h = FRAME_SIZE
    # Each frame shows 1..3 faces, each drifting across a few frames.
    tracks = []
    for _ in range(max(1, count // 4)):
        tracks.append(dict(face=faces[rng.integers(len(faces))], start=int(rng.integers(count)),
                           size=int(rng.integers(90, 170)), x=float(rng.uniform(20, w - 200)),
                           y=float(rng.uniform(20, h - 200)), dx=float(rng.uniform(-6, 6)),
                           dy=float(rng.uniform(-4, 4))))
    names = []
    pan = max(1, (strip.shape[1] - 2 * w) // max(count, 1))
    for i in range(count):
        x0 = (i * pan) % (strip.shape[1] - 2 * w)
        view = cv2.resize(strip[:, x0:x0 + 2 * w], (w, h), interpolation=cv2.INTER_AREA)
        frame = view.copy()
        for t in tracks:
            age = (i - t["start"]) % count
            if age >= 6:
                continue
            s = t["size"]
            fx = int(np.clip(t["x"] + age * t["dx"], 0, w - s))
            fy = int(np.clip(t["y"] + age * t["dy"], 0, h - s))
            frame[fy:fy + s, fx:fx + s] = cv2.resize(t["face"], (s, s), interpolation=cv2.INTER_CUBIC)
        noise = rng.normal(0, 2.0, frame.shape)
        frame = np.clip(frame + noise, 0, 255).astype(np.uint8)
        name = f"frame_{i:05d}.jpg"
        ok, buf = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        write_bytes(os.path.join(folder, name), buf.tobytes())
        names.append(name)
    return names
