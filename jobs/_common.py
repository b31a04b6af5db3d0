"""What every gpumr mrjob job shares: input paths, device options, the mapper and reducer.

A job class provides ``make_workload()``; this mixin wires it to the
record-processing core. Input is read either by the map task itself (each
task reads whole SequenceFiles with ``seqfile``; every runner) or, with
``--hadoop-splits`` on Hadoop/EMR, by Hadoop's ``SequenceFileAsTextInputFormat``
(``key<TAB>hex bytes`` lines; Hadoop splits at sync markers and places tasks
near the data). Both give the same output.
"""

from mrjob.protocol import RawValueProtocol
from mrjob.step import MRStep

TEXT_INPUT_FORMAT = "org.apache.hadoop.mapred.SequenceFileAsTextInputFormat"


class GpumrJobMixin:
    """Mapper over SequenceFile records through :class:`gpumr.core.Processor`; identity reducer."""

    INPUT_PROTOCOL = RawValueProtocol
    #: "seqfile": records are SequenceFile records; "lines": each input line is a record.
    INPUT_KIND = "seqfile"

    def add_common_args(self):
        self.add_passthru_arg("--device", choices=["auto", "cpu", "gpu"], default="auto",
                              help="auto: per record, a GPU if one is free now, else the CPU")
        self.add_passthru_arg("--gpu-slots", type=int, default=1, help="tasks sharing one GPU at once")
        self.add_passthru_arg("--gpu-memory", type=int, default=None, help="device memory a GPU batch needs")
        self.add_passthru_arg("--hadoop-splits", action="store_true",
                              help="let Hadoop split the SequenceFiles (hadoop/emr runners)")
        self.add_passthru_arg("--reducers", type=int, default=1,
                              help="reduce tasks; 0 gives a map-only run (output not sorted)")

    def _non_option_kwargs(self):
        # mrjob's sim runners give mapper_raw a local directory as one input;
        # list its SequenceFiles so that each becomes a map task of its own.
        import os
        from gpumr.packing import expand_inputs
        kwargs = super()._non_option_kwargs()
        if self.INPUT_KIND != "seqfile":
            return kwargs
        paths = []
        for p in kwargs["input_paths"]:
            paths += expand_inputs([p]) if "://" not in p and os.path.isdir(p) else [p]
        kwargs["input_paths"] = paths
        return kwargs

    # -- steps -----------------------------------------------------------
    def steps(self):
        mapper = dict(mapper_init=self.task_init, mapper_final=self.task_final)
        if self.INPUT_KIND == "lines":
            mapper["mapper"] = self.mapper_line
        elif self.options.hadoop_splits:
            mapper["mapper"] = self.mapper_text
        else:
            mapper["mapper_raw"] = self.mapper_raw
        if self.options.reducers == 0:
            return [MRStep(**mapper)]
        return [MRStep(reducer=self.reducer, **mapper)]

    def hadoop_input_format(self):
        return TEXT_INPUT_FORMAT if self.options.hadoop_splits else None

    def jobconf(self):
        conf = dict(super().jobconf())
        conf["mapreduce.job.reduces"] = str(self.options.reducers)
        return conf

    # -- tasks -----------------------------------------------------------
    def task_init(self):
        from gpumr.core import GROUP, Processor
        from gpumr.devices import DeviceChooser, describe
        workload = self.make_workload()
        memory = self.options.gpu_memory if self.options.gpu_memory is not None else workload.gpu_memory
        self.chooser = DeviceChooser(self.options.device, memory=memory, slots=self.options.gpu_slots)
        self.log(f"gpumr: {describe(self.chooser)}")
        self.processor = Processor(workload, self.chooser, log=self.log,
                                   count=lambda name, n=1: self.increment_counter(GROUP, name, n))

    def log(self, message):
        """One line to the task's log (stderr; mrjob's stream is binary)."""
        self.stderr.write((message + "\n").encode("utf-8", "replace"))
        self.stderr.flush()

    def task_final(self):
        yield from self.processor.flush()
        self.chooser.close()

    def mapper_raw(self, path, uri):
        """Read a whole SequenceFile here; a corrupt stretch (or file) is counted and skipped."""
        from seqfile import Reader, SequenceFileError
        from gpumr.core import BAD, GROUP

        def corrupt(exc):
            self.increment_counter(GROUP, BAD, 1)
            self.log(f"gpumr: skipping corrupt data in {uri}: {exc}")

        try:
            reader = Reader(path, on_error=corrupt)
        except SequenceFileError as exc:
            corrupt(exc)
            return
        with reader:
            for rec in reader:
                yield from self.processor.feed(rec.key, rec.value)

    def mapper_text(self, _, line):
        """One ``key<TAB>hex bytes`` line from SequenceFileAsTextInputFormat."""
        key, _, hexed = line.partition("\t")
        try:
            value = bytes.fromhex(hexed)
        except ValueError:
            yield self.processor.bad(key, "value is not the hex text SequenceFileAsTextInputFormat gives")
            return
        yield from self.processor.feed(key, value)

    def mapper_line(self, _, line):
        """One text line is one record (its own key, for error reports)."""
        yield from self.processor.feed(line, line)

    def reducer(self, key, values):
        for value in values:
            yield key, value
