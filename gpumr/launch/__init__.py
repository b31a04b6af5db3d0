"""The launch layer: a command line in, one checked plan out (:mod:`.plan`), run by the one skeleton (:mod:`.job`)."""
