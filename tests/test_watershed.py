"""``gpumr run watershed``: scikit-image's watershed segmentation per record, CPU only.

Each expected answer comes from the direct calls (Otsu's threshold,
scipy's distance transform, ``peak_local_max`` markers, ``watershed``) on
``rgb2gray`` of the decoded photo, written here again rather than taken
from gpumr.
"""

import json
import os

import numpy as np
import pytest
from conftest import lines_of, run_workload, skimage_gray

from gpumr.cli import main


def direct(path, min_distance=1, footprint=3, dark=False):
    """``(regions, areas)`` of the photo at ``path``, by the direct calls."""
    from scipy import ndimage as ndi
    from skimage.feature import peak_local_max
    from skimage.filters import threshold_otsu
    from skimage.segmentation import watershed
    gray = skimage_gray(path)
    binary = gray <= threshold_otsu(gray) if dark else gray > threshold_otsu(gray)
    distance = ndi.distance_transform_edt(binary)
    coords = peak_local_max(distance, min_distance=min_distance, footprint=np.ones((footprint, footprint)),
                            labels=binary)
    mask = np.zeros(distance.shape, bool)
    mask[tuple(coords.T)] = True
    labels = watershed(-distance, ndi.label(mask)[0], mask=binary)
    return int(labels.max()), [int((labels == i).sum()) for i in range(1, labels.max() + 1)]


def results(out):
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t") for line in lines_of(str(out)))}


@pytest.mark.parametrize("options, kw", [([], {}),
                                         (["--min-distance", "4", "--footprint", "7", "--dark"],
                                          dict(min_distance=4, footprint=7, dark=True))])
def test_label_counts_and_areas_equal_the_direct_calls(skimage_photos, tmp_path, monkeypatch, options, kw):
    """With simulated GPUs about: a CPU-only workload runs every record on the CPU all the same."""
    seq, folder = skimage_photos
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counts, _ = run_workload("watershed", [seq, "-o", str(tmp_path / "out"), *options])
    assert counts["records on CPU"] == len(os.listdir(folder)) and not counts.get("records on GPU"), counts
    got = results(tmp_path / "out")
    for name in os.listdir(folder):
        regions, areas = direct(os.path.join(folder, name), **kw)
        assert (got[name]["regions"], got[name]["areas"]) == (regions, areas), name
        assert got[name]["device"] == "cpu" and regions == len(areas) > 1


def test_a_flat_image_has_no_regions(tmp_path):
    import cv2

    from gpumr.io.packing import pack
    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "flat.png"), np.full((20, 30, 3), 90, np.uint8))
    pack([str(tmp_path / "in")], str(tmp_path / "in.seq"), progress=False)
    run_workload("watershed", [str(tmp_path / "in.seq"), "-o", str(tmp_path / "out")])
    assert results(tmp_path / "out") == {"flat.png": {"regions": 0, "areas": [], "device": "cpu"}}


@pytest.mark.parametrize("args, said", [
    (["--footprint", "0"], "--footprint must be a whole number from 1 to 255, not 0"),
    (["--min-distance", "2.5"], "argument --min-distance: invalid int value: '2.5' (see gpumr run watershed --help)"),
    (["--max-pixels", "-3"], "--max-pixels must be a whole number from 1 to 134,217,728, not -3"),
])
def test_options_out_of_their_limits_are_one_line(skimage_photos, tmp_path, capsys, args, said):
    assert main(["run", "watershed", skimage_photos[0], "-o", str(tmp_path / "out"), *args]) == 1
    assert capsys.readouterr().err == f"gpumr: error: {said}\n"
