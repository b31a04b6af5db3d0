"""The cost of a Haar stump on the GPU path (``cuda/haar.cu``): the cascade packed into 16-byte nodes in
constant memory where it fits, read from global memory where it does not, the rectangles' corner offsets
precomputed per level width; every path gives OpenCV's faces (on simulated GPUs, the kernels executed on
the host)."""

import os
import sys

import cv2
import numpy as np
import pytest

from gpumr.devices.nvml import simulated_gpus
from gpumr.faces.cascade import Cascade
from gpumr.faces.cpu import detect, load_cascade
from gpumr.faces.gpu import FaceGPU, cascade_features
from gpumr.gpu import kernels, launch

CASCADES = {c: os.path.join(cv2.data.haarcascades, f"haarcascade_frontalface_{c}.xml")
            for c in ("default", "alt", "alt2", "alt_tree")}
LAYOUT = kernels.defines("haar")


@pytest.fixture(scope="module")
def images(sample_frames):
    from skimage import data
    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    frames = [cv2.imread(os.path.join(sample_frames, n), cv2.IMREAD_GRAYSCALE)
              for n in sorted(os.listdir(sample_frames))[:2]]
    return [astro, cv2.resize(astro, (256, 256), interpolation=cv2.INTER_AREA)] + frames


def opencv(cascade, images, scale_factor=1.1, min_neighbors=3):
    clf = load_cascade(cascade)
    return [sorted(detect(clf, g, scale_factor=scale_factor, min_neighbors=min_neighbors)) for g in images]


def stage_kernels(fg, gpu):
    """The names of the stage kernels ``fg`` set up on ``gpu``, and whether its cascade went to constant memory."""
    st = fg._devices.get(gpu)
    return st["fns"]["first_stage"].name, st["fns"]["run_stages"].name, st["constant"] is not None


def walk(stages, nodes, feature_value, layout=LAYOUT):
    """The failing stage (or -1) of a window whose feature ``i`` has value ``feature_value(i)``, read from the
    packed arrays as the kernels read them."""
    f_bit, s_bit = layout["NODE_FEATURE_BIT"], layout["NODE_SIZE_BIT"]
    for si, (first, end, thr, _) in enumerate(stages):
        acc, root = 0.0, first
        while root < end:
            n = root
            while True:
                thr_n, meta, left, right = nodes[n]
                go_left = feature_value(meta >> f_bit) < np.int32(thr_n).view(np.float32)
                child, bit = (left, layout["NODE_LEFT_BIT"]) if go_left else (right, layout["NODE_RIGHT_BIT"])
                if not meta >> bit & 1:
                    acc += float(np.int32(child).view(np.float32))
                    root += (meta >> s_bit) & ((1 << (f_bit - s_bit)) - 1)
                    break
                n = root + child
        if acc < np.int32(thr).view(np.float32):
            return si
    return -1


def walk_flat(c, feature_value):
    """The same from the cascade's flat arrays, as the CPU reference reads them."""
    for si, (first_tree, count) in enumerate(c.stages):
        acc = 0.0
        for t in range(first_tree, first_tree + count):
            first_node, first_leaf = c.trees[t]
            idx = 0
            while True:
                f, left, right = c.nodes[first_node + idx]
                idx = left if feature_value(f) < c.node_thresholds[first_node + idx] else right
                if idx <= 0:
                    break
            acc += float(c.leaves[first_leaf - idx])
        if acc < c.stage_thresholds[si]:
            return si
    return -1


@pytest.mark.parametrize("name", ["default", "alt2"])
def test_packed_nodes_walk_as_the_flat_cascade(name):
    """Stumps (default) and trees of two nodes (alt2): the packed walk fails the same stage for random windows."""
    c = Cascade(CASCADES[name])
    stages, nodes = c.packed(LAYOUT)
    assert stages.shape == (len(c.stages), 4) and nodes.shape == (len(c.nodes), 4)
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(300):
        values = rng.normal(0, 0.05, len(c.rects)).astype(np.float32)
        # biased towards the thresholds, so that windows get past the first stages
        values = np.where(rng.random(len(values)) < 0.5, values, values * 0.01)
        got = walk(stages, nodes, values.__getitem__)
        assert got == walk_flat(c, values.__getitem__)
        outcomes.add(got)
    assert len(outcomes) > 2


def test_the_default_cascade_fits_constant_memory_and_alt_tree_does_not():
    """OpenCV's default frontal-face cascade, packed, is 47,008 bytes (2,913 nodes of 16 bytes, 25 stages);
    alt_tree's 8,468 nodes are 135 KiB, more than the 64 KiB of constant memory."""
    stages, nodes = Cascade(CASCADES["default"]).packed(LAYOUT)
    assert stages.nbytes + nodes.nbytes == 47008
    assert len(stages) <= LAYOUT["CONST_STAGES"] and len(nodes) <= LAYOUT["CONST_NODES"]
    assert 16 * (LAYOUT["CONST_STAGES"] + LAYOUT["CONST_NODES"]) <= 64 * 1024
    _, nodes = Cascade(CASCADES["alt_tree"]).packed(LAYOUT)
    assert len(nodes) > LAYOUT["CONST_NODES"]


@pytest.mark.parametrize("constant", [True, False])
def test_both_cascade_memories_give_opencvs_faces(images, constant):
    """The default cascade from constant memory (where it fits), and forced to global memory."""
    want = opencv(CASCADES["default"], images)
    fg, gpu = FaceGPU(CASCADES["default"], constant=constant), simulated_gpus("1")[0]
    assert [sorted(f) for f in fg.run(images, gpu)] == want
    assert stage_kernels(fg, gpu) == (("first_stage", "run_stages", True) if constant else
                                      ("first_stage_global", "run_stages_global", False))
    assert sum(map(len, want)) >= 3


@pytest.mark.timeout(600)
def test_a_cascade_too_large_for_constant_memory_runs_from_global_memory(images):
    want = opencv(CASCADES["alt_tree"], images[:2], min_neighbors=1)
    fg, gpu = FaceGPU(CASCADES["alt_tree"], min_neighbors=1), simulated_gpus("1")[0]
    assert [sorted(f) for f in fg.run(images[:2], gpu)] == want
    assert stage_kernels(fg, gpu) == ("first_stage_global", "run_stages_global", False)
    assert sum(map(len, want)) >= 1


def test_detectors_of_different_cascades_share_the_emulators_constant_memory_in_turns(images):
    """One host build of the kernels (one constant memory) serves a process's simulated GPUs: two
    detectors of different cascades, used in turns, each get their own cascade's faces."""
    gpu = simulated_gpus("1")[0]
    runs = {name: FaceGPU(CASCADES[name], min_neighbors=0) for name in ("default", "alt2")}
    want = {name: opencv(CASCADES[name], images[1:2], min_neighbors=0) for name in runs}
    assert want["default"] != want["alt2"]
    for name in ("default", "alt2", "default", "alt2"):
        assert [sorted(f) for f in runs[name].run(images[1:2], gpu)] == want[name], name


def test_feature_offsets_are_the_corners_at_each_row_length():
    """``feature_offsets``: each rectangle's corners (y * W + x) at each width, its weights and count."""
    c = Cascade(CASCADES["default"])
    lx = launch.launcher(simulated_gpus("1")[0])
    fn = lx.function(lx.module("haar"), "feature_offsets")
    widths = np.array([25, 61, 641], np.int32)
    nf = len(c.rects)
    out = lx.zeros(len(widths) * nf * 16, np.int32)
    lx.launch(fn, (-(-len(widths) * nf // 256), 1, 1), (256, 1, 1), lx.to_device(c.rects.reshape(-1, 4)),
              lx.to_device(c.weights.reshape(-1)), np.int32(nf), lx.to_device(widths), np.int32(len(widths)), out)
    got = lx.to_host(out).reshape(len(widths), nf, 16)
    x, y, w, h = (c.rects[..., k].astype(np.int64) for k in range(4))
    for t, W in enumerate(widths):
        corners = np.stack([y * W + x, y * W + x + w, (y + h) * W + x, (y + h) * W + x + w], -1)
        assert np.array_equal(got[t, :, :12].reshape(nf, 3, 4), corners)
        assert np.array_equal(got[t, :, 12:15].view(np.float32), c.weights)
        assert np.array_equal(got[t, :, 15], np.where(c.weights[:, 2] != 0, 3, 2))


def test_declared_memory_counts_the_feature_tables():
    from gpumr.faces.gpu import ALIGN, FEATURE_BYTES, batch_memory, levels
    nf = cascade_features(CASCADES["default"])
    assert nf == 2913
    shapes = [(480, 640)] * 8
    plain = batch_memory(shapes, (24, 24), 1.1)
    with_tables = batch_memory(shapes, (24, 24), 1.1, features=nf)
    widths = {lv[1][0] for lv in levels((480, 640), (24, 24), 1.1)}
    # a table per distinct level width, not per frame (less the one table's room an empty cascade still has, its
    # alignment included)
    assert 0 <= FEATURE_BYTES * nf * len(widths) - (with_tables - plain) <= ALIGN


@pytest.mark.skipif(kernels.nvcc() is None, reason="needs nvcc (SASS of the kernels)")
def test_a_stump_costs_at_most_60_sass_instructions(tmp_path):
    """The fast path of a two-rectangle stump in run_stages, counted as bench/gpu_model.py counts it: 117
    instructions on sm_90 before its corners were precomputed, its indices made 32-bit and the cascade moved
    to constant memory; 55 after."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import gpu_model
    if gpu_model.tool("cuobjdump") is None:
        pytest.skip("needs cuobjdump (pip install 'gpumr[model]')")
    cubin, _ = gpu_model.compile_cubin("haar", "90", str(tmp_path))
    sass = gpu_model.sass(cubin)
    for name in ("run_stages", "first_stage", "run_stages_global"):
        counts = gpu_model.haar_counts(sass[name])
        assert counts["stump2"] <= 60 and counts["stump3"] <= 85, (name, counts)
