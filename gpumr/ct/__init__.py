"""Cone-beam CT: geometry, phantom, FDK filtering and slab backprojection."""

#: The ramp filter's windows by name (:func:`gpumr.ct.fdk.window` defines each), here without numpy: ``gpumr``'s
#: parser offers them, and it is built before the Dask engine's fork server starts
#: (:func:`gpumr.launch.job.start_early`), which importing numpy first would hold back.
FILTERS = ("ram-lak", "shepp-logan", "cosine", "hamming", "hann")
