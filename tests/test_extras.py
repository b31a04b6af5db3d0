"""Every engine and optional feature, run where its extra is not installed: one line naming the extra (issue 66,
finding 2).

Where: a real virtual environment (``python -m venv --without-pip``) whose
site-packages reaches the dev environment's through a ``.pth`` file, so it
has gpumr and every base requirement, and whose ``sitecustomize`` takes
the extra's packages away: it replaces the path finder (the one that finds
installed packages) by one that finds nothing of the names listed in
``hidden.txt`` beside it. To gpumr they are then exactly as absent as never
installed: ``import`` raises ``ModuleNotFoundError`` and
``importlib.util.find_spec`` says None, in the launcher and in every Python
it starts. (Their metadata stays, as pip's would for a broken install;
gpumr never decides by metadata.)
"""

import os
import subprocess
import sysconfig

import pytest

HIDE = '''
import importlib.machinery, os, sys
_hidden = set(open(os.path.join(os.path.dirname(__file__), "hidden.txt")).read().split())


class _Absent(importlib.machinery.PathFinder):
    """The path finder, blind to the packages of hidden.txt."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in _hidden:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [_Absent if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """``run(hidden, *args)``: ``python -m gpumr ARGS`` in the venv with the packages ``hidden`` absent."""
    import sys
    root = tmp_path_factory.mktemp("noextra")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "dev-environment.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(HIDE)

    def run(hidden, *args, cwd=root, code=None):
        with open(os.path.join(site, "hidden.txt"), "w") as f:
            f.write(" ".join(hidden))
        argv = ["-c", code] if code else ["-m", "gpumr", *map(str, args)]
        return subprocess.run([str(python), *argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert "gpumr" in run(["pyspark"], code="import gpumr, sys; print(gpumr.__name__, sys.prefix)").stdout
    return run


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("gpumr: error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("engine, hidden, extra", [
    ("spark", ["pyspark", "py4j"], "spark"),
    ("spark", ["py4j"], "spark"),  # (pyspark installed without its dependencies)
    ("dask", ["distributed", "dask"], "dask"),
    ("dask", ["distributed"], "dask"),
    ("radical", ["radical"], "radical"),
    ("flink", ["pyflink"], "flink"),
])
def test_an_engine_without_its_extra_is_one_line_naming_it(bare, packed, tmp_path, engine, hidden, extra):
    more = ["--allow-open-ports"] if engine in ("radical", "flink") else []  # (a second user's processes: their
    line = one_line(bare(hidden, "run", "faces", packed, "-o", tmp_path / "out", "--engine", engine, *more))  # refusal)
    assert line.endswith(f"pip install 'gpumr[{extra}]'"), line
    assert not (tmp_path / "out").exists()


def test_the_mrjob_runners_here_need_no_extra(bare, packed, tmp_path):
    """inline and local (the default engines) run with every extra absent."""
    proc = bare(["pyspark", "py4j", "distributed", "dask", "radical", "pyflink", "boto3", "botocore", "cramjam",
                 "backports", "cupy", "pycuda"], "run", "faces", packed, "-o", tmp_path / "out", "--engine", "local",
                "--device", "cpu")
    assert proc.returncode == 0 and "12 records: 12 on CPU" in proc.stderr, proc.stderr[-3000:]


def test_emr_without_boto3_is_one_line_naming_its_extra(bare, s3, packed, tmp_path):
    """mrjob's EMR runner calls AWS through boto3: without it, "You must install boto3" was called a bug."""
    from s3server import BUCKET
    for f in sorted(os.listdir(packed)):
        s3.put(f"noboto/{f}", open(os.path.join(packed, f), "rb").read())
    line = one_line(bare(["boto3", "botocore"], "run", "faces", f"s3://{BUCKET}/noboto/", "-o",
                         f"s3://{BUCKET}/noboto-out/", "--engine", "emr", "--dry-run"))
    assert line == "gpumr: error: --engine emr needs boto3: pip install 'gpumr[emr]'"


@pytest.mark.parametrize("codec, hidden", [("snappy", ["cramjam"]), ("lz4", ["cramjam"]),
                                           ("zstd", ["cramjam", "backports", "compression"])])
def test_a_codec_without_its_extra_is_one_line_naming_it(bare, sample_frames, tmp_path, codec, hidden):
    line = one_line(bare(hidden, "pack", sample_frames, "-o", tmp_path / "out.seq", "--codec", codec))
    assert "pip install 'gpumr[codecs]'" in line, line
    assert not (tmp_path / "out.seq").exists()


def test_the_gpu_path_without_cupy_or_pycuda_names_the_extras(bare):
    """Where a GPU is found, the GPU path needs CuPy or PyCUDA: the reason a task gives for running on the CPU (or
    ``--device gpu``'s error) names the extras."""
    code = "from gpumr.gpu.launch import available; print(available(False)[1])"
    why = bare(["cupy", "pycuda"], code=code).stdout.strip()
    assert "pip install 'gpumr[cupy]'" in why and "'gpumr[gpu]'" in why, why
    code = "from gpumr.gpu.context import driver\ntry:\n    driver()\nexcept RuntimeError as e:\n    print(e)"
    assert "pip install 'gpumr[gpu]'" in bare(["pycuda"], code=code).stdout
