"""I/O around SequenceFiles: input expansion, packing and unpacking, reading job output, URIs.

Every local file gpumr writes goes through :mod:`seqfile.atomic`; everything
at a URI goes through :mod:`gpumr.io.remote` (hidden name, then published).
"""
