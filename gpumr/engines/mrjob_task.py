"""The mrjob job of any declared workload (``--workload NAME``): the script ``gpumr run`` hands to mrjob.

mrjob runs a job's module as its task script (``python mrjob_task.py
--mapper ...``); the workload's name travels to the tasks with the other
options. ``jobs/`` keeps one named class per workload for mrjob users.
"""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run as a script: this folder's modules (dask.py, spark.py) must not hide the packages

from gpumr.engines.streaming import GpumrJob  # noqa: E402


class MRWorkload(GpumrJob):
    """A gpumr workload (``--workload NAME``) over its inputs; per record a free GPU or the CPU."""


if __name__ == "__main__":
    MRWorkload.run()
