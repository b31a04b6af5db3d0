"""The watershed segmentation of one grey image, as scikit-image's gallery separates touching objects.

Examples
--------
>>> import numpy as np
>>> image = np.zeros((40, 60))
>>> image[10:30, 5:25] = image[10:30, 35:55] = 1.0   # two squares
>>> labels = segment(image)
>>> int(labels.max()), areas(labels)
(2, [400, 400])
"""

import numpy as np


def segment(gray, min_distance=1, footprint=3, dark=False):
    """The label image (int, 0 = background) of ``gray`` (a 2-D float or integer image).

    Parameters
    ----------
    gray : ndarray [rows, cols]
    min_distance : int
        ``peak_local_max``'s least distance between markers.
    footprint : int
        Side of the square neighbourhood a marker is the maximum of.
    dark : bool
        The objects are darker than the background (the foreground is at or below Otsu's threshold)."""
    from scipy import ndimage as ndi
    from skimage.feature import peak_local_max
    from skimage.filters import threshold_otsu
    from skimage.segmentation import watershed
    if np.ptp(gray) == 0:  # one grey level: no threshold separates anything
        return np.zeros(gray.shape, np.int32)
    level = threshold_otsu(gray)
    foreground = gray <= level if dark else gray > level
    distance = ndi.distance_transform_edt(foreground)
    coords = peak_local_max(distance, min_distance=min_distance, footprint=np.ones((footprint, footprint)),
                            labels=foreground)
    mask = np.zeros(distance.shape, dtype=bool)
    mask[tuple(coords.T)] = True
    markers, _ = ndi.label(mask)
    return watershed(-distance, markers, mask=foreground)


def areas(labels):
    """Pixels of each region ``1..labels.max()``, in label order."""
    return np.bincount(labels.ravel())[1:].tolist()
