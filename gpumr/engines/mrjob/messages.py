"""What gpumr says of a run of mrjob's runners (:mod:`gpumr.engines.mrjob`): what it keeps of mrjob's log, the one
line of a runner's failure, and a dry run's description of the EMR cluster a job would start."""

import contextlib
import logging
import os
import re
import sys

from ... import __version__
from ...errors import GpumrError, redact
from .bundle import wheel_name

_MRJOB_ROLE = "mrjob's own (made if missing)"


def emr_lines(cluster, plan, configs):
    """The dry run's lines on the EMR cluster a job would start and pay for (:func:`gpumr.engines.mrjob.runner.emr_plan`), secrets
    hidden: release, region, nodes, bootstrap, what is uploaded from where, what the tasks read, logs, access."""
    c = {k: redact(v) if isinstance(v, str) else v for k, v in cluster.items()}
    if c["cluster_id"]:
        lines = [f"EMR: the running cluster {c['cluster_id']} (region {c['region']}): no cluster is started"]
    else:
        nodes = ", ".join(f"{role} {count} x {kind}{' (spot)' if market == 'SPOT' else ''}"
                          for role, count, kind, market in c["groups"]) or f"instance fleets {c['fleets']}"
        lines = [f"EMR cluster: release {c['release']} in region {c['region']}, started for this job and ended "
                 "after it", f"EMR nodes: {nodes}"]
    lines += [f"EMR bootstrap, as root on every node: {b}" for b in c["bootstrap"]]
    built = os.path.join(plan.folder, wheel_name())
    uploads = [f"{os.path.basename(p)} (" + (f"a wheel of this gpumr {__version__}, built for the job" if p == built
                                              else f"from {redact(os.path.dirname(p))}") + ")" for p in c["uploads"]]
    lines.append(f"EMR uploads to {c['tmp']}: " + ", ".join(uploads + ["the job's spec, task files and side files"]))
    inputs = [path for path, _ in plan.inputs]
    if inputs:
        more = f" and {len(inputs) - 1} more" if len(inputs) > 1 else ""
        lines.append(f"EMR tasks read {redact(inputs[0])}{more} ({plan.input_bytes} bytes) from S3; output "
                     f"{plan.out.shown}")
    lines.append(f"EMR tasks run {' '.join(c['python'] or ['python3'])}; the cluster's logs (a failed task's "
                 f"stderr among them) go to {c['logs']}")
    lines.append(f"EMR access: key pair {c['key_pair'] or 'none (no SSH to the nodes)'}; subnet "
                 f"{c['subnet'] or 'none named (the default VPC)'}; roles {c['instance_profile'] or _MRJOB_ROLE} "
                 f"(the nodes') and {c['service_role'] or _MRJOB_ROLE} (EMR's)")
    lines.append(f"EMR config: {', then '.join(redact(c) for c in configs)}")
    return lines


def framework_error(name, exc):
    """The one line of a failure of mrjob's runner ``name`` (not a task's refusal): what failed, and the fix."""
    from ...core.processor import reason_of
    text = redact(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    if name == "hadoop" and isinstance(exc, OSError) and exc.errno is not None:  # (the hadoop command itself)
        return GpumrError(f"--engine hadoop: {exc.strerror or exc} running {exc.filename or 'hadoop'} (is Hadoop's "
                          "client installed and on PATH?)")
    if name == "hadoop" and "mkdir" in text and "hdfs:" in text:
        return GpumrError(f"--engine hadoop: {text}: mrjob keeps its scratch files in HDFS, which this Hadoop does "
                          "not have (local mode?): give --hadoop-tmp-dir file:///A/FOLDER, or "
                          "-c \"$(gpumr conf mrjob.local.conf)\"")
    aws = aws_refusal(exc)
    if aws is not None:
        return GpumrError(f"--engine {name}: {aws}")
    return GpumrError(f"a task of the {name} job failed: {redact(reason_of(exc))}")


#: AWS operations that concern the EMR roles (IAM): their refusal names the roles, not a task.
_IAM_WORDS = ("Role", "InstanceProfile", "Policy")


def aws_refusal(exc):
    """What an AWS service refused or failed (botocore's errors: mrjob's EMR runner calls S3, IAM and EMR), in one
    line; None for any other error."""
    errors = sys.modules.get("botocore.exceptions")
    if errors is None or not isinstance(exc, (errors.ClientError, errors.BotoCoreError)):
        return None
    if not isinstance(exc, errors.ClientError):
        return redact(" ".join(str(exc).split()))
    error = exc.response.get("Error", {})
    line = redact(f"AWS refused {exc.operation_name} ({error.get('Code', '?')}): {' '.join(str(error.get('Message', '')).split())}")
    if any(word in (exc.operation_name or "") for word in _IAM_WORDS):
        line += ("; the cluster's roles: aws emr create-default-roles makes EMR's default ones, or name yours with "
                 "iam_instance_profile and iam_service_role in the config")
    return line


class Said(list):
    """What mrjob said during a run that gpumr keeps (:func:`mrjob_said`): its warnings and the tasks' error lines
    (the list), and its report of the job's counters (:attr:`counters`)."""

    def __init__(self):
        super().__init__()
        self.counters = []


#: A Hadoop job's, application's or task attempt's id in what mrjob relays of Hadoop's output.
HADOOP_ID = re.compile(r"(?<![/\w])(?:job|application|attempt)_[0-9a-zA-Z]+(?:_[0-9a-zA-Z]+)+")  # (not in a path)


@contextlib.contextmanager
def mrjob_said(lines, debug, name="mrjob"):
    """What mrjob logs during the block, kept (``lines``, a :class:`Said`) from the user's stderr unless ``debug``: a
    failed step's "probable cause" holds the task's own one-line error, which the job's one line then says; its
    counters report is kept for the job's end. With ``-v``, the first line naming each Hadoop job and task attempt id
    is shown as it comes (``gpumr: debug: hadoop: Running job: job_...``)."""
    gpumr_log = logging.getLogger("gpumr.engines.mrjob")
    show_ids = not debug and gpumr_log.isEnabledFor(logging.DEBUG)
    seen = set()

    class Keep(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if text.strip().startswith("Counters: "):
                lines.counters.append(text.strip("\n"))
            # mrjob's warnings whole; of what it relays at INFO (a local Hadoop's task stderr), the tasks' errors
            if record.levelno >= logging.WARNING or "gpumr: error: " in text:
                lines.append(text)
            if show_ids:
                for line in text.splitlines():
                    new = set(HADOOP_ID.findall(line)) - seen
                    if new and "gpumr: " not in line:
                        seen.update(new)
                        gpumr_log.debug("%s: %s", name, " ".join(line.split()))
    log = logging.getLogger("mrjob")
    handler, propagate, level = Keep(logging.INFO), log.propagate, log.level
    log.addHandler(handler)
    log.propagate = debug
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)  # (kept here, shown only with --debug)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
        log.setLevel(level)
