"""I/O around SequenceFiles: input expansion, packing and unpacking, reading job output, URIs.

Every output gpumr writes, local or at a URI, is kept under one ownership
rule by :mod:`gpumr.io.outputs`; local files are written through
:mod:`seqfile.atomic`, everything at a URI through the filesystem layer
:mod:`gpumr.io.remote`.
"""
