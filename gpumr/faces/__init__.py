"""Face detection: Haar cascades as arrays, OpenCV's procedure restated, CPU and GPU paths, pictures."""
