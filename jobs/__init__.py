"""mrjob jobs of gpumr, installed as ``gpumr.jobs``: thin shells over the library."""
