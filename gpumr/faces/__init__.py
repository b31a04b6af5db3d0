"""Face detection: Haar cascades as arrays, OpenCV's procedure restated, CPU and GPU paths, pictures.

``decode`` (image bytes to grey arrays, with a pixel limit), ``cpu``
(OpenCV's detector), ``cascade`` and ``reference`` (the cascade as arrays
and the detection procedure restated: the GPU kernel's CPU reference),
``gpu`` (the CUDA path), ``workload`` (the record flow's plug),
``render`` and ``sample`` (pictures of results; the built-in frames).
"""
