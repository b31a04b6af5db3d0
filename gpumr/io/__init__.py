"""I/O around SequenceFiles: input expansion, packing and unpacking, reading job output.

Every file gpumr writes goes through :mod:`seqfile.atomic`.
"""
