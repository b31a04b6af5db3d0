"""Cone-beam CT: geometry, phantom, FDK filtering and slab backprojection.

Conventions (all units mm, angles radians): the source turns about the z
axis at distance ``DSO``; at angle ``b`` it sits at ``DSO * (cos b, sin b, 0)``
and the flat detector, ``DSD`` from the source, is centred on the opposite
side, its columns along ``(-sin b, cos b, 0)`` and its rows along z. Arrays
are indexed ``[z, y, x]`` for volumes and ``[row, col]`` for projections.
"""

#: The ramp filter's windows by name (:func:`gpumr.ct.fdk.window` defines each), here without numpy: ``gpumr``'s
#: parser offers them, and it is built before the Dask engine's fork server starts
#: (:func:`gpumr.launch.job.start_early`), which importing numpy first held back by 0.1 s.
FILTERS = ("ram-lak", "shepp-logan", "cosine", "hamming", "hann")
