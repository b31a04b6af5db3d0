"""What the engines on a JVM share (Spark and Flink, both driven through Py4J): a quiet start, one line for a Java
failure, a quiet Ctrl-C."""

import atexit
import os
import tempfile

from ..errors import redact
from ..log import silence
from .mapreduce import one_line


def failure(exc, engine, what=None):
    """One line saying why ``engine``'s job failed (or ``what`` else did), from its Java error ``exc``.

    Parameters
    ----------
    exc : py4j.protocol.Py4JJavaError or Exception
    engine : str
        ``"spark"`` or ``"flink"``: named in the line.
    what : str, optional
        What failed where no task's error is found (default: "the Spark job failed").

    Examples
    --------
    >>> failure(RuntimeError("java.lang.OutOfMemoryError: heap\\n\\tat x"), "spark")
    'the Spark job failed: java.lang.OutOfMemoryError: heap (gpumr --debug shows the trace)'
    """
    java = getattr(exc, "java_exception", None)
    first = (str(java) if java is not None else str(exc)).strip().splitlines()
    what = what or f"the {engine.capitalize()} job failed"
    return one_line(exc, engine, f"{what}: {first[0] if first else type(exc).__name__} (gpumr --debug shows the trace)")


def last_words(f):
    """The last line a JVM wrote to ``f`` (a file, or None) that is not a warning or its log's set-up, or ""."""
    if f is None:
        return ""
    f.seek(0)
    lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("WARNING:", "Setting ", "To adjust", "Using Spark"))]
    return redact(lines[-1])[:300] if lines else ""


def quiet_log4j():
    """A log4j2 configuration file (in the temp folder, made once per process, removed at exit) that logs nothing."""
    global _QUIET_LOG4J
    if _QUIET_LOG4J is None:
        fd, path = tempfile.mkstemp(prefix="gpumr-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write("status = off\nappender.null.type = Null\nappender.null.name = null\n"
                    "rootLogger.level = off\nrootLogger.appenderRef.null.ref = null\n")
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        _QUIET_LOG4J = path
    return _QUIET_LOG4J


_QUIET_LOG4J = None


def quiet_interrupt():
    """On Ctrl-C: silence Py4J's and the framework's loggers and threads, so the boundary's line is the last."""
    import logging
    import threading
    # Py4J logs through the root logger too (logging.exception(...)): all but gpumr's own logger go quiet.
    silence("", "py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark", "pyflink")
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())  # (else logging.exception() would add one)
    threading.excepthook = lambda args: None
