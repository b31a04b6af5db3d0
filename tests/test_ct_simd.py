"""The CPU backprojector: its vectorised numba kernel equal to the scalar kernel it replaced, its build cached by
content; the same loops in C (``gpumr/ct/backproject.c``), built by the system compiler into the kernel cache,
which task processes use without importing numba.

The scalar kernel gpumr shipped before (commit 07ceced, ``gpumr/ct/backproject.py``) is restated here,
compiled without a cache, as the statement the numba kernel must equal within 1e-6 relative.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit, prange

from gpumr.ct import geometry, native, phantom
from gpumr.ct.backproject import _axes, _scalars, backproject, backproject_reference, pad
from gpumr.ct.fdk import filter_projections


@njit(parallel=True, fastmath=True, nogil=True)
def scalar_kernel(flat, width, cosb, sinb, zs, ys, xs, dso, dsd, cu, cv, inv_du, inv_dv, nv, nu, out):
    # Per row of voxels (fixed y) and angle, everything that depends on x
    # alone (the division, the column, the weight) is computed once and
    # reused for every slice of the slab; only the row depends on z.
    # Unsigned flat indices spare numba's negative-index checks.
    na = flat.shape[0]
    nzs, ny, nx = out.shape
    one, zero = np.float32(1.0), np.float32(0.0)
    col_max, row_max = np.float32(nu + 1), np.float32(nv + 1)
    w_u = np.uint32(width)
    for iy in prange(ny):
        y = ys[iy]
        acc = np.zeros((nzs, nx), np.float32)
        base = np.empty(nx, np.uint32)
        fc = np.empty(nx, np.float32)
        w2 = np.empty(nx, np.float32)
        rmag = np.empty(nx, np.float32)
        for a in range(na):
            c = cosb[a]
            s = sinb[a]
            p = flat[a]
            for ix in range(nx):
                x = xs[ix]
                inv = one / (dso - (x * c + y * s))
                mag = dsd * inv
                col = min(max((-x * s + y * c) * mag * inv_du + cu + one, zero), col_max)
                i = min(np.uint32(col), np.uint32(nu))
                base[ix] = i
                fc[ix] = col - np.float32(i)
                w = dso * inv
                w2[ix] = w * w
                rmag[ix] = mag * inv_dv
            for iz in range(nzs):
                z = zs[iz]
                for ix in range(nx):
                    row = min(max(z * rmag[ix] + cv + one, zero), row_max)
                    ir = min(np.uint32(row), np.uint32(nv))
                    fr = row - np.float32(ir)
                    k = ir * w_u + base[ix]
                    f = fc[ix]
                    p00 = p[k]
                    p01 = p[k + np.uint32(1)]
                    p10 = p[k + w_u]
                    p11 = p[k + w_u + np.uint32(1)]
                    top = p00 + f * (p01 - p00)
                    bot = p10 + f * (p11 - p10)
                    acc[iz, ix] += w2[ix] * (top + fr * (bot - top))
        for iz in range(nzs):
            out[iz, iy, :] = acc[iz]


def scalar(filtered, g, z0, z1):
    padded = pad(filtered)
    na, h, w = padded.shape
    k = _scalars(g)
    zs, ys, xs = (a.astype(np.float32) for a in _axes(g))
    b = np.asarray(g.angles, np.float64)
    f32 = np.float32
    out = np.empty((z1 - z0, len(ys), len(xs)), np.float32)
    scalar_kernel(padded.reshape(na, h * w), w, np.cos(b).astype(f32), np.sin(b).astype(f32), zs[z0:z1], ys, xs,
                  f32(k["dso"]), f32(k["dsd"]), f32(k["cu"]), f32(k["cv"]), f32(k["inv_du"]), f32(k["inv_dv"]),
                  k["nv"], k["nu"], out)
    return out


def case(off):
    """A geometry and filtered projections: the phantom, centred; or random projections of an off-centre volume and
    detector of odd sizes, the volume partly outside the detector."""
    d = geometry.simple(40, 48, n_detector=40).to_dict()
    if off:
        d.update(offOrigin=[3.7, -1.2, 0.4], offDetector=[4.5, -2.0], nVoxel=[23, 40, 37])
        d["nDetector"] = [30, 44]
    g = geometry.from_dict(d)
    proj = phantom.projections(g) if not off else \
        np.random.default_rng(1).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    return g, filter_projections(proj, g)


@pytest.fixture
def numba_kernel(monkeypatch):
    """backproject() with the numba kernel, whether or not the C one can be built here."""
    monkeypatch.setattr(native, "ENABLED", False)
    monkeypatch.setattr(native, "_loaded", [])


@pytest.mark.parametrize("off", [False, True])
def test_vectorised_kernel_equals_the_scalar_one_within_1e_6(off, numba_kernel):
    g, f = case(off)
    for z0, z1 in ((0, g.nVoxel[0]), (5, 12)):
        new, old = backproject(f, g, z0, z1), scalar(f, g, z0, z1)
        assert new.shape == old.shape
        assert np.abs(new - old).max() <= 1e-6 * np.abs(old).max()


def _run(code, env, cwd):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


PROBE = """
    import numpy as np
    import gpumr
    from gpumr.ct import geometry, native
    native.ENABLED = False  # the numba kernel
    from gpumr.ct.backproject import _compile, backproject
    g = geometry.simple(8, 4)
    backproject(np.zeros((4, *g.nDetector), np.float32), g)
    s = _compile().stats
    print(gpumr.__file__, sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


@pytest.mark.slow
def test_a_new_process_loads_the_kernel_from_the_trusted_cache_even_from_another_copy(tmp_path):
    """The first process compiles and keeps the build in the kernel cache; the next ones, one of them running
    gpumr from a copy at another path (as an unpacked bundle does), load it: no compile."""
    import gpumr
    import seqfile
    cache = tmp_path / "cache"
    env = dict(os.environ, GPUMR_KERNEL_CACHE=str(cache))
    where, hits, misses = _run(PROBE, env, str(tmp_path))
    assert (hits, misses) == ("0", "1")
    where, hits, misses = _run(PROBE, env, str(tmp_path))
    assert (hits, misses) == ("1", "0")
    copy = tmp_path / "copy"
    for mod in (gpumr, seqfile):
        shutil.copytree(os.path.dirname(mod.__file__), copy / mod.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    where, hits, misses = _run(PROBE, dict(env, PYTHONPATH=str(copy)), str(tmp_path))
    assert where.startswith(str(copy)) and (hits, misses) == ("1", "0")
    folders = [p for p in cache.iterdir() if p.name.startswith("numba-")]
    assert len(folders) == 1 and (folders[0].stat().st_mode & 0o777) == 0o700
    assert not list((copy / "gpumr" / "ct").glob("__pycache__/*.nbi"))  # nothing beside the source


def test_an_untrusted_cache_is_never_used(tmp_path):
    """A kernel cache others may write in is refused (one warning) and the build goes to a private folder."""
    cache = tmp_path / "open"
    cache.mkdir()
    cache.chmod(0o777)
    env = dict(os.environ, GPUMR_KERNEL_CACHE=str(cache), PYTHONWARNINGS="default")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lets others write in it" in proc.stderr
    assert list(cache.iterdir()) == []


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler to build the C backprojector")


@needs_cc
@pytest.mark.parametrize("off", [False, True])
def test_the_c_kernel_is_the_numba_kernel_to_float32_rounding(off, monkeypatch):
    """The C kernel and the numba kernel, on whole volumes, slabs, a band of rows and a window: within 2e-6
    (relative L2) of each other on the phantom; on random projections (cancelling sums), within 1e-5; each as far
    from the float64 reference as the other.

    2e-6 is float32's own rounding here: on the phantom each kernel is 6.5e-7 from the float64 reference, and the
    two are 7.7e-7 to 1.07e-6 apart on a processor with AVX-512 (its wider vectors fuse and sum in another order;
    under 1e-6 with AVX2). A wrong index or weight is 1e-3 or more."""
    g, f = case(off)
    ref = backproject_reference(f.astype(np.float64), g)
    got = {}
    for which in ("c", "numba"):
        monkeypatch.setattr(native, "ENABLED", which == "c")
        monkeypatch.setattr(native, "_loaded", [])
        assert (native.kernel() is not None) == (which == "c")
        got[which] = [backproject(f, g), backproject(f, g, 5, 12),
                      backproject(f[:, 3:20], g, 2, 6, row0=3), backproject(f, g, 0, 9, window=(4, 21, 7, 30))]
    for c, n in zip(got["c"], got["numba"]):
        assert c.shape == n.shape and rel_l2(c, n) <= (1e-5 if off else 2e-6)
    # each as far from float64 as float32's rounding takes it (on the phantom 5.8e-7 and 6.5e-7 on an AMD EPYC with
    # AVX-512, the C kernel 1.11x numba's distance there; 2.6e-6 both on random projections): a wrong weight is 1e-3
    assert max(rel_l2(got["c"][0], ref), rel_l2(got["numba"][0], ref)) <= (1e-5 if off else 2e-6)
    assert rel_l2(got["c"][0], ref) <= 1.5 * rel_l2(got["numba"][0], ref)


@needs_cc
def test_a_task_process_backprojects_without_numba(tmp_path):
    """A new process backprojects with the C kernel from the kernel cache (built once, its proof beside it):
    numba is never imported; without a C compiler, numba's kernel serves."""
    code = """
        import sys
        import numpy as np
        from gpumr.ct import geometry
        from gpumr.ct.backproject import backproject
        g = geometry.simple(8, 4)
        v = backproject(np.ones((4, *g.nDetector), np.float32), g)
        print("numba" in sys.modules, bool(np.isfinite(v).all() and v.any()))
    """
    env = dict(os.environ, GPUMR_KERNEL_CACHE=str(tmp_path / "cache"))
    for _ in range(2):
        assert _run(code, env, str(tmp_path)) == ["False", "True"]
    built = [p.name for p in (tmp_path / "cache").iterdir()]
    assert any(n.startswith("backproject-cpu-") and n.endswith(".so") for n in built)
    assert any(n.startswith(".backproject-cpu-") and n.endswith(".gpumr") for n in built)  # its proof
    assert _run(code, dict(env, CC=str(tmp_path / "no-such-compiler"), PATH=os.path.dirname(sys.executable)),
                str(tmp_path)) == ["True", "True"]
