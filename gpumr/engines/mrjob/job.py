"""The mrjob job of gpumr's jobs (``gpumr.jobs``), for mrjob's own API; the launcher makes the same runner without
it (:func:`gpumr.engines.mrjob.runner.make_runner`)."""

import inspect

from mrjob.job import MRJob
from mrjob.protocol import RawProtocol, RawValueProtocol
from mrjob.step import MRStep

from . import task as mrjob_task
from .runner import import_runners
from .task import OPTIONS, TEXT_INPUT_FORMAT, MapTask


def _pairs(lines):
    for text in lines:
        key, _, value = text.partition("\t")
        yield key, value


class MRWorkload(MRJob):
    """Any gpumr workload, through mrjob: its tasks run the task runtime over the launcher's task files."""

    INPUT_PROTOCOL = RawValueProtocol
    INTERNAL_PROTOCOL = RawProtocol
    OUTPUT_PROTOCOL = RawProtocol

    @classmethod
    def mr_job_script(cls):
        """The script mrjob's runners start for each task: :mod:`gpumr.engines.mrjob.task` (not this module)."""
        return inspect.getsourcefile(mrjob_task)

    def configure_args(self):
        super().configure_args()
        for switch, kind, kwargs in OPTIONS:
            (self.add_file_arg if kind == "file" else self.add_passthru_arg)(switch, **kwargs)

    def make_runner(self):
        """mrjob's runner for this job, its module imported with pyspark hidden from it
        (:func:`gpumr.engines.mrjob.runner.import_runners`)."""
        import_runners()
        return super().make_runner()

    def steps(self):
        mapper = dict(mapper_init=self.task_init, mapper_final=self.task_final, mapper=self.mapper)
        if self.options.reducers == 0:
            return [MRStep(**mapper)]
        if self.options.cat_reducer:
            # The identity reducer as a command: the sorted lines pass as they are, with no Python started per
            # reduce task (the same bytes as :meth:`reducer` writes through RawProtocol).
            return [MRStep(reducer_cmd="cat", **mapper)]
        return [MRStep(reducer=self.reducer, **mapper)]

    def hadoop_input_format(self):
        return TEXT_INPUT_FORMAT if self.options.hadoop_splits else None

    def jobconf(self):
        return dict(super().jobconf(), **{"mapreduce.job.reduces": str(self.options.reducers)})

    # -- tasks in this process (the inline runner): the task's lines as mrjob's (key, value) pairs ----
    def task_init(self):
        self.map_task = MapTask(self.options, self.increment_counter)

    def mapper(self, _, line):
        yield from _pairs(self.map_task.map(line))

    def task_final(self):
        yield from _pairs(self.map_task.close())

    def reducer(self, key, values):
        for value in values:
            yield key, value
