"""The mrjob job of any declared workload (``--workload NAME``): the script ``gpumr run`` hands to mrjob.

mrjob runs a job's module as its task script (``python mrjob_task.py
--mapper ...``); the workload's name travels to the tasks with the other
options. ``jobs/`` keeps one named class per workload for mrjob users.
"""

from gpumr.engines.streaming import GpumrJob


class MRWorkload(GpumrJob):
    """A gpumr workload (``--workload NAME``) over its inputs; per record a free GPU or the CPU."""


if __name__ == "__main__":
    MRWorkload.run()
