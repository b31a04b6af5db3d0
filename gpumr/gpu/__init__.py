"""Launching gpumr's CUDA kernels: contexts, one launcher interface (PyCUDA or CuPy), fatbins.

Nothing here is imported on the CPU path.
"""
