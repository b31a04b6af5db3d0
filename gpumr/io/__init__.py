"""I/O around SequenceFiles: input expansion, packing and unpacking, reading job output, URIs.

One layer per promise: every file gpumr is given, a local path or a URI, is
listed, read and written through the filesystem layer :mod:`gpumr.io.remote`
(the only place that tells a URI from a path); every output gpumr writes is
kept under one ownership rule by the output transaction of
:mod:`gpumr.io.outputs`, whose proofs of authorship :mod:`gpumr.io.proofs`
reads and writes as streams.
"""
