"""The face detector's pyramid built on the GPU: byte for byte OpenCV's ``INTER_LINEAR_EXACT`` resize.

The ``pyramid`` kernel (``cuda/haar.cu``) runs under the host emulation of
CUDA (the build simulated GPUs use) from the tables ``FaceGPU`` prepares,
and every level it writes is compared with ``cv2.resize`` of the frame;
then the driver is checked to send, per part, one copy of its tables (made
once per run of parts of the same frame sizes) and its frames.
"""

import cv2
import numpy as np
import pytest

from gpumr.devices.nvml import simulated_gpus
from gpumr.faces import gpu as face_gpu
from gpumr.faces.cpu import cascade_path
from gpumr.faces.gpu import BLOCK, FaceGPU, resize_taps
from gpumr.gpu import emulate, launch

#: Frame sizes (width, height): odd, tiny (the window itself, one pixel over it), VGA and 720p.
SIZES = [(24, 24), (25, 24), (31, 57), (101, 77), (333, 211), (97, 480), (640, 480), (1280, 720)]
SCALE_FACTORS = [1.05, 1.1, 1.3, 2.0]


@pytest.fixture(scope="module")
def haar():
    """The haar kernels built for the host, on an emulated device of 1 GiB."""
    lx = emulate.EmulatedLauncher(0, 1 << 30)
    return lx, lx.module("haar").get_function("pyramid")


def frame(width, height, seed):
    """A grey frame with edges, gradients and noise: every interpolation weight shows in its bytes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:height, :width]
    img = (x * 7 + y * 3) % 256 ^ rng.integers(0, 256, (height, width))
    img[::5] = 255
    img[:, ::7] = 0
    return img.astype(np.uint8)


def run_pyramid(haar, table, sources, taps, frames):
    """The kernel over a level table (only its pixel offsets and sizes are read): the packed levels' pixels."""
    lx, fn = haar
    n_pix = int((table[:, 2] * table[:, 3]).sum())
    img = lx.zeros(n_pix, np.uint8)
    lx.launch(fn, ((n_pix + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1), lx.to_device(frames), lx.to_device(table),
              lx.to_device(sources), np.int32(len(table)), np.int32(n_pix), lx.to_device(taps), img)
    return lx.to_host(img)


@pytest.mark.parametrize("scale_factor", SCALE_FACTORS)
def test_every_level_equals_opencvs_resize(haar, scale_factor):
    """One part holding frames of every size in SIZES (a few twice): each level of each frame, as the
    detector scans it, equals cv2.resize(frame, level size, INTER_LINEAR_EXACT) byte for byte."""
    det = FaceGPU(cascade_path(), scale_factor=scale_factor, min_size=None)
    grays = [frame(w, h, i) for i, (w, h) in enumerate(SIZES + SIZES[1:4])]
    part = det.pyramid(grays)
    assert part.frames.tobytes() == b"".join(g.tobytes() for g in grays)  # the frames, all that is sent
    got = run_pyramid(haar, part.table, part.sources, part.taps, part.frames)
    assert got.size == part.n_pix
    checked = set()
    for row, (i, _, _) in zip(part.table, part.meta):
        off, w, h = row[0], row[2], row[3]
        want = cv2.resize(grays[i], (int(w), int(h)), interpolation=cv2.INTER_LINEAR_EXACT)
        level = got[off:off + w * h].reshape(h, w)
        bad = np.argwhere(level != want)
        assert not len(bad), (grays[i].shape, (w, h), bad[:3].tolist(), level[tuple(bad[0])], want[tuple(bad[0])])
        checked.add((grays[i].shape, (int(w), int(h))))
    assert {shape for shape, _ in checked} == {g.shape for g in grays}  # every frame size, and its levels:
    assert len(checked) >= 2 * len(SIZES)  # dozens of distinct resizes


def test_any_size_to_any_size_equals_opencvs_resize(haar):
    """The taps and the kernel for sizes a pyramid may not reach: upscaling, an exact halving (OpenCV's 2x2
    area shortcut), an equal size (its copy), one-pixel sources and destinations, odd ratios."""
    rng = np.random.default_rng(7)
    pairs = [((640, 480), (320, 240)), ((641, 481), (320, 240)), ((37, 29), (37, 29)), ((37, 29), (74, 58)),
             ((1, 9), (5, 4)), ((9, 1), (4, 3)), ((16, 16), (1, 1)), ((5, 7), (13, 2)), ((1280, 720), (853, 480))]
    pairs += [((int(rng.integers(1, 300)), int(rng.integers(1, 300))),
               (int(rng.integers(1, 300)), int(rng.integers(1, 300)))) for _ in range(40)]
    frames, table, sources, taps, want = [], [], [], [], []
    src_off = img_off = n_taps = 0
    for k, ((sw, sh), (dw, dh)) in enumerate(pairs):
        g = frame(sw, sh, 100 + k)
        frames.append(g.ravel())
        taps += [resize_taps(sw, dw), resize_taps(sh, dh)]
        table.append((img_off, 0, dw, dh, 0, 0, 1, 0, 0, 0))
        sources.append((src_off, sw, n_taps, n_taps + dw))
        want.append(cv2.resize(g, (dw, dh), interpolation=cv2.INTER_LINEAR_EXACT).ravel())
        src_off, img_off, n_taps = src_off + g.size, img_off + dw * dh, n_taps + dw + dh
    got = run_pyramid(haar, np.array(table, np.int32), np.array(sources, np.int32), np.concatenate(taps),
                      np.concatenate(frames))
    differ = [pair for pair, a, b in zip(pairs, np.split(got, np.cumsum([len(w) for w in want])[:-1]), want)
              if not np.array_equal(a, b)]
    assert not differ


def test_taps_are_opencvs_coefficients():
    """Halving: every destination pixel halfway between two sources (128/128); equal sizes: the source pixel
    alone; upscaling 1 -> n: the one pixel; the destination's first and last pixels outside the sources'
    centres take the edge pixel alone."""
    assert resize_taps(8, 4).tolist() == [[0, 128], [2, 128], [4, 128], [6, 128]]
    assert resize_taps(5, 5).tolist() == [[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]]
    assert resize_taps(1, 3).tolist() == [[0, 0]] * 3
    up = resize_taps(4, 8)
    assert up[0].tolist() == [0, 0] and up[-1].tolist() == [3, 0] and up[1].tolist() == [0, 64]


def test_a_part_is_one_upload_of_its_tables_and_frames(sample_frames, monkeypatch):
    """19 frames of one size in 3 parts: each part one copy to the device, of its tables (made once for the
    parts of the same shapes: the taps among them) and its frames' bytes (no pyramid level), nothing else
    sent; the faces are OpenCV's."""
    import os

    from gpumr.faces.cpu import detect, load_cascade
    frames = [cv2.resize(cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE), (200, 150))
              for n in sorted(os.listdir(sample_frames))[:3]] * 7
    frames = frames[:19]
    gpu = simulated_gpus("1")[0]
    det = FaceGPU(cascade_path())
    det.run([cv2.resize(frames[0], (160, 120))], gpu)  # set up and self-checked, on other sizes
    lx = launch.launcher(gpu)
    sent, made = [], []
    for name in ("to_device", "to_device_async"):
        real = getattr(type(lx), name)
        monkeypatch.setattr(type(lx), name, lambda self, host, *a, real=real, name=name: sent.append(
            (name, np.array(host))) or real(self, host, *a))
    make = FaceGPU._make_plan
    monkeypatch.setattr(FaceGPU, "_make_plan", lambda self, shapes: made.append(len(shapes)) or make(self, shapes))
    got = det.run(frames, gpu)
    p = face_gpu.PART
    assert [name for name, _ in sent] == ["to_device_async"] * 3 and made == [p, 19 - 2 * p]
    for (_, up), first in zip(sent, range(0, 19, p)):
        plan = det.plan([g.shape for g in frames[first:first + p]])
        lay = plan.layout
        at = lay.slot["frames"][0]
        assert len(up) == lay.upload and np.array_equal(up[:at], plan.tables)
        n = sum(g.size for g in frames[first:first + p])
        assert up[at:at + n].tobytes() == b"".join(g.tobytes() for g in frames[first:first + p])
        taps = lay.slot["taps"][0]
        assert np.array_equal(up[taps:taps + plan.taps.nbytes].view(np.int32).reshape(-1, 2), plan.taps)
        assert not up[lay.slot["head"][0]:].any()  # the counters start at zero
    clf = load_cascade(cascade_path())
    assert [sorted(f) for f in got] == [sorted(detect(clf, g)) for g in frames]
