"""The CPU backprojector's vectorised kernel: equal to the scalar kernel it replaced, its build cached by content.

The scalar kernel gpumr shipped before (commit 07ceced, ``gpumr/ct/backproject.py``) is restated here,
compiled without a cache, as the statement the new kernel must equal within 1e-6 relative.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit, prange

from gpumr.ct import geometry, phantom
from gpumr.ct.backproject import _axes, _scalars, backproject, pad
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


@pytest.mark.parametrize("off", [False, True])
def test_vectorised_kernel_equals_the_scalar_one_within_1e_6(off):
    d = geometry.simple(40, 48, n_detector=40).to_dict()
    if off:  # off-centre volume and detector, odd sizes, a volume partly outside the detector
        d.update(offOrigin=[3.7, -1.2, 0.4], offDetector=[4.5, -2.0], nVoxel=[23, 40, 37])
        d["nDetector"] = [30, 44]
    g = geometry.from_dict(d)
    proj = phantom.projections(g) if not off else \
        np.random.default_rng(1).standard_normal((g.n_angles, *g.nDetector)).astype(np.float32)
    f = filter_projections(proj, g)
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
    from gpumr.ct import geometry
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
