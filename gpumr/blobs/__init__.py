"""Blob detection: scikit-image's ``blob_log`` as a gpumr workload, with its scale space on a GPU.

``scalespace`` (the scales, scipy's filter weights, the scale-space cube
and its peaks as ``blob_log`` finds them: the CPU reference), ``gpu`` (the
cube by ``cuda/blobs.cu``), ``workload`` (the record flow's plug).
"""
