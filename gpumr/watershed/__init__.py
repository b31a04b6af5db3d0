"""Watershed segmentation: scikit-image's recipe (Otsu, distance transform, markers, watershed) as a workload."""
