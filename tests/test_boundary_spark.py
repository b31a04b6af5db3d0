"""Ctrl-C to ``gpumr spark`` (issue 25, class 7): one line, exit status 130, nothing left; no pyspark/Py4J traceback.

Before, SIGINT printed four tracebacks (pyspark's SIGINT handler calling into the JVM from inside the
interrupted Py4J call, and Py4J logging the interrupt through the root logger) above the one line.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from gpumr.errors import EXIT_INTERRUPTED

pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (the dev extra)")
pytestmark = pytest.mark.slow
if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="Spark needs Java 17 (java on PATH or JAVA_HOME)")]


def test_ctrl_c_to_gpumr_spark_is_one_line(sample_frames, tmp_path):
    from test_file_safety import tree_listing as listing

    from gpumr.io.packing import pack
    pack([sample_frames], str(tmp_path / "frames.seq"), progress=False)
    before = listing(tmp_path)
    # A terminal's Ctrl-C goes to the whole foreground process group: the driver, the JVM, the Python workers.
    proc = subprocess.Popen([sys.executable, "-m", "gpumr", "spark", "faces", "frames.seq", "-o", "out",
                             "--master", "local[1]", "--split-size", "1MiB", "--device", "cpu"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        t0 = time.monotonic()

        def writing():  # a task writes its part into the output's hidden stage
            for n in os.listdir(tmp_path):
                if n.startswith(".out.") and n.endswith(".tmp"):
                    stage = tmp_path / n / "out"
                    return stage.is_dir() and os.listdir(stage)
        while not writing() and proc.poll() is None and time.monotonic() - t0 < 240:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.killpg(proc.pid, signal.SIGINT)
    finally:
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "Traceback" not in err and "ERROR:root" not in err and "Py4J" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "gpumr: interrupted", err[-3000:]
    assert listing(tmp_path) == before


def test_the_accumulator_servers_failure_is_no_traceback(sc, capsys):
    """pyspark's accumulator server prints a traceback when its connection resets (the JVM ending on Ctrl-C, CI
    under load): gpumr's context says nothing of it but a debug line."""
    from gpumr.engines.spark import spark_context
    assert spark_context() is sc  # (the running context, given gpumr's handlers)
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        sc._accumulatorServer.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
