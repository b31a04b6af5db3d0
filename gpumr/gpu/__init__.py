"""Launching gpumr's CUDA kernels: contexts, one launcher interface (PyCUDA or CuPy), fatbins.

Nothing here that needs CUDA is imported on the CPU path (tasks log :func:`kernels.describe`).
"""
