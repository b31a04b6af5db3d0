"""Launching gpumr's CUDA kernels: contexts, one launcher interface (PyCUDA or CuPy), fatbins."""
