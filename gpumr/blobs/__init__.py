"""Blob detection: scikit-image's ``blob_log`` as a gpumr workload, with its scale space on a GPU."""
