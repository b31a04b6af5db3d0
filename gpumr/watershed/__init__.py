"""Watershed segmentation: scikit-image's recipe (Otsu, distance transform, markers, watershed) as a workload.

``segment`` (the segmentation of one grey image), ``workload`` (the record
flow's plug; CPU only).
"""
