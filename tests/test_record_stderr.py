"""What a library writes to fd 2 while a record runs is that record's (issue 64, class 10).

Before, a truncated PNG made OpenCV (or libpng, by version) write its own
line straight to the process's fd 2 on the inline and Dask engines, naming
no record, through ``-q``. Real jobs in processes of their own, on inline
(the launcher's process) and Dask (a LocalCluster's workers): a truncated
PNG, and a workload of the test's whose C library call writes to fd 2 while
its records succeed; ``-q`` then prints nothing at all, the library's words
are in the record's error line, or in a debug line naming the record under
``-v``. And the capture itself from several threads at once.
"""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

ENGINES = ["inline", pytest.param("dask", marks=pytest.mark.slow)]

CHATTY = """
import ctypes
from gpumr import Workload

class Chatty(Workload):
    name = "chatty"
    summary = "each record's size, its C library chatting on stderr"
    decode = "raw"

    def cpu(self, key, value, o):
        libc = ctypes.CDLL(None)
        libc.dprintf(2, b"libchatty: warning: %s looked at\\n", key.encode())
        return {"bytes": len(value)}
"""


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    """A SequenceFile of two PNGs, the second cut in half."""
    import cv2

    from gpumr.io.packing import pack
    d = tmp_path_factory.mktemp("pngs")
    (d / "frames").mkdir()
    image = (np.random.default_rng(0).random((64, 64)) * 255).astype(np.uint8)
    data = cv2.imencode(".png", image)[1].tobytes()
    (d / "frames" / "a_good.png").write_bytes(data)
    (d / "frames" / "b_truncated.png").write_bytes(data[:len(data) // 2])
    pack([str(d / "frames")], str(d / "frames.seq"), progress=False)
    return d


def gpumr(args, cwd):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def output(folder):
    return {json.loads(k): json.loads(v) for name in sorted(os.listdir(folder)) if name.startswith("part-")
            for k, v in (line.split("\t") for line in open(os.path.join(folder, name)).read().splitlines())}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_truncated_png_is_its_error_line_and_quiet_is_quiet(pngs, tmp_path, engine):
    proc = gpumr(["run", "faces", pngs / "frames.seq", "-o", tmp_path / "out", "--engine", engine, "-q"], tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # before: the library's line, naming no record
    got = output(tmp_path / "out")
    assert "faces" in got["a_good.png"]
    error = got["b_truncated.png"]["error"]
    assert error.startswith("not a decodable image (") and error.endswith(")") and len(error) > 25, error
    assert "incomplete" in error  # (the decoder's own words: libpng's or OpenCV's, by version)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_library_chatting_while_records_succeed_is_a_debug_line_naming_each(pngs, tmp_path, engine):
    """``-q``: nothing at all; ``-v``: never the library's line raw, and on Dask (whose tasks' own lines reach the
    terminal; mrjob's inline runner keeps them) one debug line per record naming it."""
    (tmp_path / "chatty.py").write_text(CHATTY)
    args = ["run", "chatty.py:Chatty", pngs / "frames.seq", "--engine", engine]
    quiet = gpumr([*args, "-o", tmp_path / "q", "-q"], tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert sorted(output(tmp_path / "q")) == ["a_good.png", "b_truncated.png"]
    loud = gpumr([*args, "-o", tmp_path / "v", "-v"], tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert all(line.startswith("gpumr: debug: record '") for line in loud.stderr.splitlines() if "libchatty" in line)
    if engine == "inline":
        return
    for key in ("a_good.png", "b_truncated.png"):
        line = f"gpumr: debug: record '{key}': written to stderr while it ran: libchatty: warning: {key} looked at"
        assert loud.stderr.splitlines().count(line) == 1, loud.stderr


def test_blocks_of_several_threads_each_get_their_own_and_fd_2_comes_back(tmp_path):
    """Eight threads each write their line inside a block, blocks overlapping or not: each block holds its own line
    (and, where blocks overlapped, what the others wrote meanwhile); a ``gpumr:`` line written meanwhile reaches the
    real fd 2 once; after the last block fd 2 is where it was."""
    code = r"""
import os, sys, threading, time
from gpumr.tasks.stderr import captured
got, start = {}, threading.Barrier(8)
def run(i):
    start.wait()
    for n in range(50):
        with captured() as text:
            os.write(2, f"lib {i} {n}\n".encode())
            if i == 0 and n == 10:
                os.write(2, b"gpumr: from another thread\n")
            time.sleep(0.0005 * (i % 3))
        got.setdefault(i, []).append(text[0])
threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
os.write(2, b"after\n")
# (each block holds its own line; where blocks overlapped, others' too, and a long text is cut at SAID_CHARS)
mine = all(f"lib {i} {n}" in texts[n].split("; ") or texts[n].endswith("...") for i, texts in got.items()
           for n in range(50))
print(mine, sum(len(t) for t in got.values()))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "400"], proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == ["gpumr: from another thread", "after"], proc.stderr


def test_a_block_in_this_thread_while_another_thread_writes_no_record_line(tmp_path):
    """What the block holds is what was written while it ran: before it, or after it, nothing."""
    from gpumr.tasks.stderr import captured
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)
    try:
        os.write(2, b"before\n")
        with captured() as text:
            t = threading.Thread(target=lambda: os.write(2, b"libx: during\n"))
            t.start()
            t.join()
        os.write(2, b"after\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    assert text == ["libx: during"]
    assert os.read(r, 1000) == b"before\nafter\n"
    os.close(r)
