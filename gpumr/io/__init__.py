"""I/O around SequenceFiles: input expansion, packing and unpacking, reading job output, URIs."""
