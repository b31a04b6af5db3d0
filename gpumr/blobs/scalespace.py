"""The scale space of ``skimage.feature.blob_log``, stated in parts so that a GPU can compute the middle one.

Examples
--------
>>> import numpy as np
>>> from skimage.feature import blob_log
>>> image = np.zeros((40, 40)); image[18:23, 18:23] = 1.0
>>> s = sigmas(1, 8, 5, False)
>>> found = peaks(log_cube(image, s), s, 0.1, 0.5)
>>> bool(np.array_equal(found, blob_log(image, 1, 8, 5, 0.1)))
True
"""

import numpy as np

#: scipy's default: Gaussian kernels reach ``int(4 * sigma + 0.5)`` pixels either side.
TRUNCATE = 4.0


def sigmas(min_sigma, max_sigma, num_sigma, log_scale):
    """The scales ``blob_log`` uses: ``[num_sigma, 2]`` (one sigma per image axis, equal), as it computes them."""
    lo = np.full(2, min_sigma, dtype=np.float64)
    hi = np.full(2, max_sigma, dtype=np.float64)
    if log_scale:
        return np.logspace(np.log10(lo), np.log10(hi), num_sigma)
    return np.linspace(lo, hi, num_sigma)


def scale_factor(sigma):
    """The factor ``blob_log`` multiplies scale ``sigma``'s Laplacian by (``np.mean(s) ** 2``)."""
    return float(np.mean(sigma) ** 2)


def radius(sigma):
    """How many pixels either side scipy's Gaussian kernel of ``sigma`` reaches."""
    return int(TRUNCATE * float(sigma) + 0.5)


def weights(sigma, order):
    """scipy's 1-D Gaussian kernel of ``sigma`` and derivative ``order`` (0 or 2), from its centre outwards.

    Examples
    --------
    >>> w = weights(1.0, 0)
    >>> len(w), round(float(w[0] + 2 * w[1:].sum()), 12)
    (5, 1.0)
    """
    from scipy import ndimage as ndi
    r = radius(sigma)
    impulse = np.zeros(2 * r + 1)
    impulse[r] = 1.0
    response = ndi.gaussian_filter1d(impulse, float(sigma), order=order, mode="constant", truncate=TRUNCATE)
    return np.ascontiguousarray(response[r:])


def log_cube(image, scales):
    """The scale-space cube ``[rows, cols, scales]`` of a float64 image, as ``blob_log`` stacks it (scipy, CPU)."""
    from scipy import ndimage as ndi
    cube = np.empty(image.shape + (len(scales),), dtype=np.float64)
    for i, s in enumerate(scales):
        cube[..., i] = -ndi.gaussian_laplace(image, s) * np.mean(s) ** 2
    return cube


def peaks(cube, scales, threshold, overlap):
    """The blobs ``[[row, col, sigma], ...]`` (float64 array) of a scale-space cube, as ``blob_log`` finds them."""
    from skimage.feature import peak_local_max
    found = peak_local_max(cube, threshold_abs=threshold, threshold_rel=None, exclude_border=(0, 0, 0),
                           footprint=np.ones((3, 3, 3)))
    if found.size == 0:
        return np.empty((0, 3))
    blobs = np.hstack([found[:, :-1].astype(np.float64), scales[found[:, -1]][:, 0:1]])
    return prune()(blobs, overlap, sigma_dim=1)


def prune():
    """scikit-image's pruning of overlapping blobs (``skimage.feature.blob._prune_blobs``, which ``blob_log`` ends
    with; not public, so looked up here, in one place). Raises ``ImportError`` if this scikit-image has none (the GPU
    path then says so and is not used)."""
    from skimage.feature import blob
    found = getattr(blob, "_prune_blobs", None)
    if found is None:
        import skimage
        raise ImportError(f"scikit-image {skimage.__version__} has no skimage.feature.blob._prune_blobs, which "
                          "blob_log's peaks are pruned with")
    return found
