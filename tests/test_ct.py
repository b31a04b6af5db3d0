"""CT: geometry checks, filters, backprojector vs reference, phantom accuracy, parallel-beam peer check."""

import io
import json

import numpy as np
import pytest
from scipy import ndimage

from gpumr.ct import geometry, phantom
from gpumr.ct.backproject import backproject, backproject_reference
from gpumr.ct.fdk import FILTERS, filter_projections, ramp
from gpumr.ct.projections import Layout, decode, encode_tiff
from gpumr.errors import GpumrError


def test_geometry_roundtrip_and_validation(tmp_path):
    g = geometry.simple(32, 10)
    path = str(tmp_path / "g.json")
    g.save(path)
    again = geometry.load(path)
    assert again.to_dict() == g.to_dict()
    base = json.load(open(path))
    cases = [
        ({k: v for k, v in base.items() if k != "DSD"}, r"missing field\(s\) DSD"),
        (dict(base, DSO=-5), "DSO must be a number over 0 and at most 1e.06, not -5"),
        (dict(base, DSD=base["DSO"] / 2), "must exceed DSO"),
        (dict(base, offDetector=[0, 300]), "misses the volume's shadow at every angle"),
        (dict(base, DSO=float("nan")), "DSO must be a number over 0 .*, not nan"),
        (dict(base, dVoxel=[1, float("inf"), 1]), r"dVoxel\[1\] must be a number over 0 .*, not inf"),
        (dict(base, nVoxel=[32, 32]), "nVoxel must be a list of 3 numbers"),
        (dict({k: v for k, v in base.items() if k != "angles"}, nAngles="ten"),
         "nAngles must be a whole number from 1 to 65,536, not 'ten'"),
    ]
    for d, msg in cases:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(d))
        with pytest.raises(GpumrError, match=msg) as err:
            geometry.load(str(bad))
        assert "bad.json" in str(err.value)
    (tmp_path / "nojson.json").write_text("{")
    with pytest.raises(GpumrError, match="not JSON"):
        geometry.load(str(tmp_path / "nojson.json"))


def test_volume_partly_outside_the_field_of_view_is_a_warning_not_an_error(tmp_path, capsys):
    """A square volume whose corners leave the detector at some angles is normal cone-beam CT: warn, once."""
    g = geometry.simple(32, 36)
    d = dict(g.to_dict(), dDetector=[g.dDetector[0], g.dDetector[1] * 0.75])  # sees the inscribed circle, not the corners
    narrow = geometry.from_dict(d, "narrow.json")
    geometry.from_dict(d, "narrow.json")  # (again: said once)
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpumr: warning: ")]
    assert len(said) == 1, said
    assert "narrow.json" in said[0] and "outside the field of view" in said[0] and "of 36 angles" in said[0]
    assert narrow.nDetector == g.nDetector
    geometry.from_dict(g.to_dict(), "covering.json")  # the covering detector: no warning
    assert "gpumr: warning" not in capsys.readouterr().err


def test_geometry_command_sets_every_scanner_field(tmp_path, capsys):
    from gpumr.cli import main
    out = tmp_path / "g.json"
    assert main(["ct", "geometry", "-o", str(out), "--voxels", "16", "20", "24", "--voxel-size", "0.5",
                 "--dso", "300", "--dsd", "450", "--detector", "40", "60", "--pitch", "0.4", "0.5",
                 "--off-detector", "1.5", "-2", "--off-origin", "0.5", "0", "-1", "--angles", "90",
                 "--arc", "200", "--start", "10"]) == 0
    g = geometry.load(str(out))
    assert g.nVoxel == (16, 20, 24) and g.dVoxel == (0.5, 0.5, 0.5) and (g.DSO, g.DSD) == (300, 450)
    assert g.nDetector == (40, 60) and g.dDetector == (0.4, 0.5) and g.offDetector == (1.5, -2)
    assert g.offOrigin == (0.5, 0, -1) and g.n_angles == 90
    assert np.isclose(g.angles[0], np.radians(10)) and np.isclose(g.angles[1] - g.angles[0], np.radians(200) / 90)
    assert main(["ct", "geometry", "-o", str(out), "--voxels", "32", "--angles", "60", "--short-scan"]) == 0
    short = geometry.load(str(out))
    nu, du = short.nDetector[1], short.dDetector[1]
    fan = 2 * np.arctan(nu * du / 2 / short.DSD)
    span = (short.angles[1] - short.angles[0]) * short.n_angles
    assert np.pi + fan <= span < np.pi + fan + 1e-4
    filter_projections(np.zeros((60, *short.nDetector), np.float32), short)  # Parker accepts the arc


def test_ramp_filter_is_a_ramp():
    tau = 0.5
    H = ramp(128, tau)
    f = np.fft.fftfreq(len(H))
    mid = (np.abs(f) > 0.05) & (np.abs(f) < 0.4)
    assert np.allclose(H[mid], np.abs(f[mid]) / tau, rtol=0.03)
    assert abs(H[0]) < 0.01 / tau
    for name in FILTERS:
        Hw = ramp(128, tau, name)
        assert Hw.shape == H.shape and np.all(Hw <= H + 1e-9)


@pytest.mark.parametrize("seed, off", [(0, False), (1, True)])
def test_fast_backprojector_equals_reference(seed, off):
    d = geometry.simple(20, 24).to_dict()
    if off:
        d.update(offOrigin=[0.7, -1.2, 0.4], offDetector=[1.5, -2.0], nVoxel=[9, 20, 17])
        d["nDetector"] = [40, 44]
    g = geometry.from_dict(d)
    q = np.random.default_rng(seed).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    for z0, z1 in ((0, g.nVoxel[0]), (3, 7)):
        ref = backproject_reference(q, g, z0, z1)
        fast = backproject(q, g, z0, z1)
        assert fast.shape == ref.shape
        assert np.linalg.norm(fast - ref) / np.linalg.norm(ref) < 1e-5


def test_the_kernel_calls_in_blocks_of_slices_give_the_volume_of_one_call_bit_for_bit(monkeypatch):
    """``backproject`` calls the kernel on :data:`~gpumr.ct.backproject.Z_BLOCK` slices at a time (the caches'
    size): a slab that is not a multiple of it, into a given ``out``, is the one-call slab, bit for bit."""
    import gpumr.ct.backproject as bp
    g = geometry.simple(40, 12)
    q = np.random.default_rng(5).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    z0, z1 = 3, 3 + 2 * bp.Z_BLOCK + 5
    out = np.full((z1 - z0, 40, 40), np.nan, np.float32)
    assert backproject(q, g, z0, z1, out=out) is out
    monkeypatch.setattr(bp, "Z_BLOCK", 10 ** 6)
    assert np.array_equal(out, backproject(q, g, z0, z1))
    assert np.array_equal(out[4:9], backproject(q, g, z0 + 4, z0 + 9))


def test_filtering_and_backprojection_say_their_progress_and_give_the_same_volume(monkeypatch):
    """``progress`` hears every angle filtered (from the filtering threads) and every slice backprojected, in
    blocks, once each; the results are those of calls without it, bit for bit."""
    import threading

    import gpumr.ct.fdk as fdk
    monkeypatch.setattr(fdk, "FILTER_BUFFER", 1)  # (one angle per block: many calls from both threads)
    g = geometry.simple(40, 30)
    q = np.random.default_rng(6).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    heard, callers = [], set()

    def hear(n):
        heard.append(n)
        callers.add(threading.get_ident())
    filtered = filter_projections(q, g, threads=2, progress=hear)
    # (from the pool's threads: one of them may run both shares when the first ends before the second starts)
    assert sum(heard) == g.n_angles and len(heard) == g.n_angles and threading.get_ident() not in callers
    assert np.array_equal(filtered, filter_projections(q, g, threads=2))
    heard.clear()
    vol = backproject(filtered, g, 3, 40, progress=heard.append)
    assert heard == [16, 16, 5]
    assert np.array_equal(vol, backproject(filtered, g, 3, 40))


def test_reconstruct_draws_its_progress_on_a_terminal_only(tmp_path):
    """On a terminal ``gpumr ct reconstruct`` draws a bar while it filters and one while it backprojects (a
    1024^3 volume runs for minutes); into a pipe, or with ``-q``, it draws none."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from gpumr.cli import main
    assert main(["ct", "phantom", "--voxels", "48", "--angles", "60", "-o", str(tmp_path / "p.seq"), "-q"]) == 0

    def reconstruct(*flags, terminal=True):
        argv = [sys.executable, "-m", "gpumr", "ct", "reconstruct", "p.seq", "-o", f"v{len(flags)}{terminal}.npy",
                *flags]
        if not terminal:
            proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
            return proc.stderr
        ours, theirs = pty.openpty()
        fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # (a new pty is 0 wide)
        proc = subprocess.Popen(argv, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=theirs)
        os.close(theirs)
        said = b""
        while True:
            try:
                chunk = os.read(ours, 65536)
            except OSError:  # (the other end closed: EIO)
                break
            if not chunk:
                break
            said += chunk
        os.close(ours)
        assert proc.wait(timeout=300) == 0, said
        return said.decode("utf-8", "replace")
    shown = reconstruct()
    assert "filtering:" in shown and "/60 [" in shown and "backprojecting:" in shown and "/48 [" in shown, shown
    assert reconstruct("-q") == ""
    assert reconstruct(terminal=False) == ""


def test_reconstruct_holds_one_copy_of_the_projections(tmp_path, monkeypatch):
    """``gpumr ct reconstruct`` reads the projections into the zero-bordered buffer the kernel reads and filters
    them there: its peak is that buffer, the volume and a bounded filter buffer, not three copies (read,
    filtered, padded: 532 MB at 256^3 before, 410 MB after). What else it holds does not grow with them
    (5.5 MB here): 1.25 copies in all, against 1.9 before."""
    import tracemalloc

    import gpumr.ct.fdk as fdk
    from gpumr.cli import main
    seq = str(tmp_path / "p.seq")
    assert main(["ct", "phantom", "--voxels", "24", "--angles", "6000", "-o", seq, "-q"]) == 0
    g = geometry.load(str(tmp_path / "p.geometry.json"))
    monkeypatch.setattr(fdk, "FILTER_BUFFER", 1 << 16)  # (the filter's own bounded buffer, small beside them)
    padded = g.n_angles * (g.nDetector[0] + 2) * (g.nDetector[1] + 2) * 4
    volume = int(np.prod(g.nVoxel)) * 4
    assert main(["ct", "reconstruct", seq, "-o", str(tmp_path / "v0.npy"), "-q"]) == 0  # (its imports done)
    tracemalloc.start()
    try:
        assert main(["ct", "reconstruct", seq, "-o", str(tmp_path / "v.npy"), "-q"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert padded > 100 * volume and peak < 1.5 * padded, (peak, padded, volume)


def _interior(truth):
    edges = ndimage.morphological_gradient(truth, size=3) > 0
    return ndimage.binary_erosion(truth > 0, iterations=2) & ~ndimage.binary_dilation(edges, iterations=2)


@pytest.mark.slow
def test_phantom_reconstruction_accuracy():
    """128^3 from 180 exact projections: interior relative RMSE and small-feature contrast."""
    g = geometry.simple(128, 180)
    truth = phantom.volume(g)
    vol = backproject(filter_projections(phantom.projections(g), g), g)
    inside = _interior(truth)
    rel = np.sqrt(np.mean((vol[inside] - truth[inside]) ** 2)) / np.sqrt(np.mean(truth[inside] ** 2))
    assert rel < 0.03  # measured 0.012 with ram-lak
    A, c, _, _ = phantom.ellipsoids(g)[5]  # a small ellipsoid, +0.1 over the brain
    iz, iy, ix = (int(round(c[i] / g.dVoxel[2 - i] + (g.nVoxel[2 - i] - 1) / 2)) for i in (2, 1, 0))
    contrast = vol[iz, iy - 1:iy + 2, ix - 1:ix + 2].mean() - vol[iz, iy - 1:iy + 2, ix - 8:ix - 5].mean()
    assert 0.085 < contrast < 0.115  # true 0.1, measured 0.096


@pytest.mark.parametrize("direction", [1, -1])
def test_short_scan_with_parker_weights(direction):
    """pi + 2 x fan angle (either rotation sense) reconstructs about as well as a full turn."""
    g = geometry.simple(64, 120)
    truth = phantom.volume(g)
    inside = _interior(truth)

    def rel(v):
        return np.sqrt(np.mean((v[inside] - truth[inside]) ** 2)) / np.sqrt(np.mean(truth[inside] ** 2))

    full = rel(backproject(filter_projections(phantom.projections(g), g), g))
    nu, du = g.nDetector[1], g.dDetector[1]
    span = (np.pi + 2 * np.arctan((nu - 1) / 2 * du / g.DSD)) * 1.02
    short = geometry.from_dict(dict(g.to_dict(), angles=list(0.3 + direction * np.arange(120) * span / 119)))
    got = rel(backproject(filter_projections(phantom.projections(short), short), short))
    assert got < 0.03 and got < 1.5 * full  # measured 0.019 against 0.017 for the full turn
    too_short = geometry.from_dict(dict(g.to_dict(), angles=list(np.linspace(0, np.pi, 60))))
    with pytest.raises(GpumrError, match="Parker weighting needs at least"):
        filter_projections(np.zeros((60, nu, nu), np.float32), too_short)


def test_nearly_parallel_beam_agrees_with_skimage_iradon():
    """Far source: our central slice vs iradon of the parallel-beam sinogram of the same slice.

    The sinogram is the central detector row of our own exact projections,
    resampled to iradon's unit spacing; iradon's angle is 270 - ours in
    degrees (its rotation sense and zero differ). Odd sizes keep both
    image centres on a pixel.
    """
    from skimage.transform import iradon
    n = 65
    g = geometry.simple(n, 180, dso=n * 5000.0, n_detector=97)
    nv, nu = g.nDetector
    central = geometry.from_dict(dict(g.to_dict(), nDetector=[1, nu], nVoxel=[1, n, n], dVoxel=[0.5, 1, 1]))
    proj = np.stack([phantom.project(g, a)[nv // 2:nv // 2 + 1] for a in g.angles])
    ours = backproject(filter_projections(proj, central, "shepp-logan"), central)[0]
    u = (np.arange(nu) - (nu - 1) / 2) * g.dDetector[1] * g.DSO / g.DSD
    m = 2 * int(np.ceil(n * np.sqrt(2)) / 2) + 1
    grid = np.arange(m) - (m - 1) / 2
    sinogram = np.stack([np.interp(grid, u, p[0], left=0, right=0) for p in proj], axis=1)
    peer = iradon(sinogram, 270 - np.degrees(g.angles), filter_name="shepp-logan", circle=False, output_size=n)
    r = np.corrcoef(ours.ravel(), peer.ravel())[0, 1]
    assert r >= 0.99, r  # measured 0.994


def test_projection_formats_and_i0():
    import cv2
    import tifffile
    img = (np.random.default_rng(0).random((6, 8)) * 1000 + 10).astype(np.float32)
    assert np.array_equal(decode("p.tif", encode_tiff(img)), img)
    buf = io.BytesIO()
    tifffile.imwrite(buf, img.astype(np.uint16))
    assert np.array_equal(decode("p.tiff", buf.getvalue()), img.astype(np.uint16).astype(np.float32))
    ok, png = cv2.imencode(".png", img.astype(np.uint16))
    assert np.array_equal(decode("p.png", png.tobytes()), img.astype(np.uint16).astype(np.float32))
    buf = io.BytesIO()
    np.save(buf, img)
    assert np.allclose(decode("p.npy", buf.getvalue(), i0=2000.0), -np.log(img / 2000.0), rtol=1e-5)
    with pytest.raises(GpumrError, match="p.jpg: projections must be"):
        decode("p.jpg", b"")
    with pytest.raises(GpumrError, match="bad.tif: cannot decode"):
        decode("bad.tif", b"garbage")


def test_a_sets_tiffs_read_through_the_layout_learnt_from_the_first_are_tifffiles_own_decoding(tmp_path):
    """A set's projections of one layout are read from their bytes (the parse was half of reading a set);
    files of another layout among them (big-endian of the same length, 16-bit) are decoded by tifffile, each right."""
    import tifffile

    from gpumr.ct.projections import read_set
    from seqfile import Writer
    g = geometry.simple(8, 6, n_detector=12)
    rng = np.random.default_rng(5)
    images = [rng.random(tuple(g.nDetector), np.float32) * 7 for _ in range(6)]
    files = [encode_tiff(im) for im in images]
    buf = io.BytesIO()
    tifffile.imwrite(buf, images[2], byteorder=">")  # (the same length: a different head)
    files[2] = buf.getvalue()
    buf = io.BytesIO()
    tifffile.imwrite(buf, (images[4] * 1000).astype(np.uint16))
    files[4] = buf.getvalue()
    images[4] = (images[4] * 1000).astype(np.uint16).astype(np.float32)
    assert len(files[2]) == len(files[0]) and files[2][:8] != files[0][:8]
    with Writer(str(tmp_path / "p.seq")) as w:
        for i, data in enumerate(files):
            w.append(f"proj_{i:04d}.tif", data)
    got = read_set([str(tmp_path / "p.seq")], g)
    assert np.array_equal(got, np.stack(images))
    layout = Layout()
    for i, data in enumerate(files):
        assert np.array_equal(decode(f"p{i}.tif", data, shape=tuple(g.nDetector), layout=layout), images[i])
    assert layout.head is not None and layout.pixels(files[2]) is None and layout.pixels(files[4]) is None
    assert layout.pixels(files[5]) is not None


def test_a_layout_is_never_learnt_from_a_tiff_whose_directory_follows_its_pixels():
    """There the bytes before the pixels are only the file's header: two such files of one length can say
    different shapes, and a layout learnt from the first would read the second wrong."""
    from crafted import tiff_directory_after_pixels
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    first, second = tiff_directory_after_pixels(a), tiff_directory_after_pixels(a.reshape(6, 4) + 1)
    assert len(first) == len(second) and first[:8] == second[:8]
    layout = Layout()
    assert np.array_equal(decode("a.tif", first, layout=layout), a) and layout.head is None
    assert np.array_equal(decode("b.tif", second, layout=layout), a.reshape(6, 4) + 1)
