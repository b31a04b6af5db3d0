"""URIs pyarrow cannot serve here, through the ``hadoop fs`` command (mrjob's wrapper); Hadoop's own log kept
from the user's stderr."""

import contextlib
import functools
import os
import posixpath
import subprocess
import tempfile

from ...errors import GpumrError, redact
from .base import first_line, hidden, shown


class Hadoop:
    """The ``hadoop fs`` command, where pyarrow cannot serve a URI (``reason`` says why)."""

    publish_mode = "hadoop"

    def __init__(self, reason):
        self.reason = reason

    def inner(self, loc):
        return loc.text

    def _run(self, args, loc, ok=(0,)):
        """Run ``hadoop fs ARGS``; its exit status; GpumrError naming ``loc`` when it fails."""
        with _hadoop_said() as said:
            try:
                return _hadoop_fs().invoke_hadoop(["fs", *args], ok_returncodes=list(ok))
            except (subprocess.CalledProcessError, OSError) as exc:
                raise GpumrError(f"{shown(loc)}: hadoop fs {args[0]} failed ({_why(said, exc)}), and {self.reason}") \
                    from None

    def stat(self, loc):
        if not self.exists(loc):
            return None, None
        return ("folder", None) if self._run(["-test", "-d", loc.text], loc, ok=(0, 1)) == 0 else ("file", None)

    def exists(self, loc):
        return self._run(["-test", "-e", loc.text], loc, ok=(0, 1)) == 0

    def list_files(self, loc):
        base = loc.text.rstrip("/")
        with _hadoop_said() as said:
            try:
                found = list(_hadoop_fs().ls(base))
            except (OSError, subprocess.CalledProcessError) as exc:  # mrjob asks `hadoop version` first
                raise GpumrError(f"{shown(loc)}: hadoop fs cannot list it ({_why(said, exc)}), and {self.reason}") \
                    from None
        if not found:
            raise GpumrError(f"{shown(loc)}: no such file or directory")
        if found == [base]:  # a file
            return [(loc, None)]
        direct = [u for u in found if u.startswith(base + "/") and "/" not in u[len(base) + 1:]]
        return [(loc.child(posixpath.basename(u)), None) for u in sorted(direct) if not hidden(posixpath.basename(u))]

    def entries(self, loc):
        raise GpumrError(f"{shown(loc)}: {self.reason}; gpumr lists folders there through pyarrow only")

    def remove_empty_folder(self, loc):
        self._run(["-rmdir", loc.text], loc, ok=(0, 1))
        return not self.exists(loc)

    @contextlib.contextmanager
    def open_input(self, loc, buffer_size, follow):
        with tempfile.TemporaryDirectory(prefix="gpumr-get-") as folder:
            local = os.path.join(folder, "copy")
            self._run(["-copyToLocal", loc.text, local], loc)
            with open(local, "rb") as f:
                yield f

    def create(self, loc):
        raise GpumrError(f"{shown(loc)}: {self.reason}; gpumr writes files there through pyarrow only")

    def make_folder(self, loc):
        self._run(["-mkdir", "-p", loc.text], loc)

    def upload(self, local, loc):
        self._run(["-put", local, loc.text], loc)

    def copy(self, src, dst):
        self._run(["-cp", src.text, dst.text], src)

    def move(self, src, dst):
        self._run(["-mv", src.text, dst.text], src)

    def delete(self, loc):
        self._run(["-rm", "-r", "-f", loc.text], loc)


@contextlib.contextmanager
def _hadoop_said():
    """What ``hadoop fs`` printed on stderr during the block (mrjob logs it line by line), kept from the user's
    stderr: a list of its lines. Hadoop's own WARN lines are not gpumr's to show."""
    import logging
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    log = logging.getLogger("mrjob.fs.hadoop")
    handler, was = Keep(), (log.propagate, log.level)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.propagate, _ = was
        log.setLevel(was[1])


def _why(said, exc):
    """The line that says why ``hadoop fs`` failed: its last stderr line that is not a WARN/INFO line, else ``exc``'s."""
    for text in reversed(said):
        text = text.replace("STDERR: ", "").strip()
        if text and not any(w in text for w in (" WARN ", " INFO ", "WARNING:")) and not text.startswith(">"):
            return redact(text)[:300]
    return first_line(exc)


@functools.lru_cache(maxsize=None)
def _hadoop_fs():
    """mrjob's ``hadoop fs`` wrapper (one per process: it remembers the Hadoop version it asked for)."""
    from mrjob.fs.hadoop import HadoopFilesystem
    return HadoopFilesystem()


