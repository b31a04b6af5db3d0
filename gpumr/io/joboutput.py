"""Reading job output: ``"key"<TAB>{json}`` lines, as every gpumr job writes them."""

import io
import json

from ..errors import GpumrError
from .inputs import expand_inputs
from .remote import locate


def read_job_output(paths):
    """Yield ``(key, value)`` from job output files or folders (local paths or URIs), in file order, duplicates kept.
    Raises ``GpumrError`` for a line that is not a job output line (file and line named)."""
    for path in expand_inputs(paths):
        loc = locate(path)
        with loc.open_input() as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
            try:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        k, v = line.rstrip("\n").split("\t", 1)
                        yield json.loads(k), json.loads(v)
                    except ValueError:
                        raise GpumrError(f"{loc.shown}: line {n} is not a job output line (\"key\"<TAB>{{json}})") \
                            from None
            except UnicodeDecodeError as exc:
                raise GpumrError(f"{loc.shown}: not UTF-8 text ({exc.reason}), not a job's output") from None
