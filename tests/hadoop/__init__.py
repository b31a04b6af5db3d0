"""Hadoop's own SequenceFile classes, driven from Python for tests and benchmarks.

Compiles ``HadoopSeq.java`` against the Hadoop jars that pyspark bundles and
runs it with the machine's Java 17. Each call is one JVM run.
"""

import json
import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


class HadoopUnavailable(RuntimeError):
    """Java or pyspark's Hadoop jars are missing."""


def _jars():
    try:
        import pyspark
    except ImportError:
        raise HadoopUnavailable("pyspark is not installed (pip install -e '.[dev]')") from None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    if not any(j.startswith("hadoop-client-api") for j in os.listdir(jars)):
        raise HadoopUnavailable(f"no Hadoop client jar in {jars}")
    return os.path.join(jars, "*")


def write_framing(path, records):
    """Write ``(key str, value bytes)`` records in HadoopSeq's plain framing."""
    with open(path, "wb") as f:
        for k, v in records:
            kb = k.encode("utf-8")
            f.write(struct.pack(">i", len(kb)) + kb + struct.pack(">i", len(v)))
            f.write(v)


def read_framing(data, pos=0, count=None):
    """Parse framed records from ``data``; returns (records, position after)."""
    out = []
    while (count is None and pos < len(data)) or (count is not None and len(out) < count):
        (kl,) = struct.unpack_from(">i", data, pos)
        k = data[pos + 4:pos + 4 + kl].decode("utf-8")
        pos += 4 + kl
        (vl,) = struct.unpack_from(">i", data, pos)
        out.append((k, data[pos + 4:pos + 4 + vl]))
        pos += 4 + vl
    return out, pos


class Hadoop:
    """Hadoop 3's ``SequenceFile`` writer, reader and record readers.

    Parameters
    ----------
    workdir : str
        Where the compiled helper class and scratch files go.
    """

    def __init__(self, workdir):
        if not shutil.which("java") or not shutil.which("javac"):
            raise HadoopUnavailable("java/javac not found (Java 17 is needed for the Hadoop interop tests)")
        self.classpath = _jars()
        self.workdir = workdir
        classes = os.path.join(workdir, "classes")
        os.makedirs(classes, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", self.classpath, "-d", classes,
                        os.path.join(HERE, "HadoopSeq.java")], check=True, capture_output=True)
        self.classpath = classes + os.pathsep + self.classpath
        self._n = 0

    def _tmp(self, suffix):
        self._n += 1
        return os.path.join(self.workdir, f"io-{self._n}{suffix}")

    def run(self, *args):
        """Run the helper; returns its stdout. Raises CalledProcessError with Java's stderr."""
        proc = subprocess.run(["java", "-Xmx2g", "-cp", self.classpath, "HadoopSeq", *map(str, args)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return proc.stdout

    def write(self, path, records, compression="NONE", codec=None):
        """Write ``records`` with Hadoop's ``SequenceFile.Writer`` (Text keys, BytesWritable values)."""
        src = self._tmp(".frames")
        write_framing(src, records)
        self.run("write", path, compression, codec or "-", src)

    def read(self, path):
        """All records of ``path`` as Hadoop's ``SequenceFile.Reader`` returns them."""
        out = self._tmp(".frames")
        self.run("read", path, out)
        with open(out, "rb") as f:
            return read_framing(f.read())[0]

    @staticmethod
    def _spec(splits):
        return ",".join(f"{s}:{e - s}" for s, e in splits)

    def splits(self, path, splits):
        """Records per ``(start, end)`` split from ``mapred.SequenceFileRecordReader``."""
        out = self._tmp(".frames")
        self.run("splits", path, out, self._spec(splits))
        with open(out, "rb") as f:
            data = f.read()
        result, pos = [], 0
        for _ in splits:
            (n,) = struct.unpack_from(">i", data, pos)
            recs, pos = read_framing(data, pos + 4, n)
            result.append(recs)
        return result

    def astext(self, path, splits):
        """Lines ``key<TAB>value`` that ``SequenceFileAsTextInputFormat`` hands a streaming mapper."""
        out = self._tmp(".txt")
        self.run("astext", path, out, self._spec(splits))
        with open(out, encoding="utf-8") as f:
            return f.read().splitlines()

    def bench(self, path, records_path, repeat):
        """Best-of-``repeat`` seconds for Hadoop writing and reading the framed records."""
        return json.loads(self.run("bench", path, records_path, repeat))
