"""Read SequenceFiles in a child process under a memory limit, for the limits and fuzz tests.

Run as ``python seqfile_child.py AS_LIMIT_BYTES`` with a JSON list of jobs on
stdin, each ``[path, reader keyword arguments]``. Sets ``RLIMIT_AS``, then reads
every file with :class:`seqfile.Reader` and prints one JSON line per file:
``{"records": N, "errors": [[type, message, lost], ...]}`` (errors passed to
``on_error``), plus ``"raised": [type, message]`` when a
:class:`SequenceFileError` ended the reading, and finally
``{"maxrss_kb": ...}``, the child's own peak resident memory. Any other
exception is not caught: it ends the child with a traceback and a non-zero
status, which the tests report.
"""

import json
import resource
import sys
import time


def main():
    limit = int(sys.argv[1])
    jobs = json.load(sys.stdin)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import seqfile
    from seqfile import SequenceFileError

    for path, kwargs in jobs:
        errors = []
        out = {"records": 0, "errors": errors}
        on_error = kwargs.pop("on_error", True)
        t0 = time.perf_counter()

        def note(exc):
            errors.append([type(exc).__name__, str(exc), exc.lost])

        try:
            with seqfile.Reader(path, on_error=note if on_error else None, **kwargs) as reader:
                for rec in reader:
                    out["records"] += 1
                    out.setdefault("sizes", []).append(rec.value if isinstance(rec.value, int) else len(rec.value or b""))
        except SequenceFileError as exc:
            out["raised"] = [type(exc).__name__, str(exc)]
        if len(out.get("sizes", [])) > 50:
            del out["sizes"]
        out["secs"] = round(time.perf_counter() - t0, 4)
        print(json.dumps(out), flush=True)
    print(json.dumps({"maxrss_kb": peak_rss_kb()}), flush=True)


def peak_rss_kb():
    """This process's peak resident memory in KiB: ``VmHWM``, which (unlike ``ru_maxrss``) does not
    carry over the parent's peak across ``exec``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    main()
