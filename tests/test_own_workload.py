"""A user's own workload (``docs/how-to/own-workload.rst``) on every engine, as its page says.

The page's examples are taken from the ``.rst`` as written and run: the
Sharpness workload on inline, local, Dask (a LocalCluster) and Spark (a
local-cluster), shipped to their tasks by content, with the same output;
installed from a small distribution and found by its entry point; the GPU
example on simulated GPUs. Then the promises around a user's code: a raising
record is an error line, a bad option value is one line, results stay
inside the output, and two jobs on one cluster never see each other's
module or side files.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import lines_of, run_workload

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOWTO = os.path.join(ROOT, "docs", "how-to", "own-workload.rst")


def example(caption):
    """The code block of the how-to captioned ``caption``, as written."""
    with open(HOWTO, encoding="utf-8") as f:
        text = f.read()
    found = re.search(r"^\.\. code-block:: python\n   :caption: " + re.escape(caption) + r"\n\n((?:   .*\n|\n)+)",
                      text, re.M)
    assert found, f"no code block captioned {caption} in {HOWTO}"
    return "\n".join(line[3:] for line in found.group(1).splitlines()).strip() + "\n"


def write(folder, name, text):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(text)
    return str(folder)


def gpumr(args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "gpumr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def results(out):
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t") for line in lines_of(str(out)))}


def sharpness(folder, ksize=3):
    """``{photo: {"sharpness": ...}}`` computed directly, as the example states it."""
    import cv2
    return {name: {"sharpness": float(cv2.Laplacian(cv2.imread(os.path.join(folder, name), cv2.IMREAD_GRAYSCALE),
                                                    cv2.CV_64F, ksize=ksize).var()), "device": "cpu"}
            for name in os.listdir(folder)}


@pytest.fixture
def forget_user_modules():
    """The user modules a test imports in this process are forgotten after it (each test writes its own)."""
    before = set(sys.modules)
    yield
    from gpumr import workloads
    for name in set(sys.modules) - before:
        if name.startswith(workloads.MODULE_PREFIX):
            del sys.modules[name]
    workloads._LOADED.clear()


def test_the_example_runs_as_written_on_every_engine_with_the_same_output(skimage_photos, tmp_path, monkeypatch, sc,
                                                                          dask_client, forget_user_modules):
    seq, folder = skimage_photos
    monkeypatch.chdir(write(tmp_path / "work", "sharp.py", example("sharp.py")))
    outputs = {}
    for engine, session, extra in (("inline", None, ["--no-conf"]), ("local", None, ["--no-conf"]),
                                   ("dask", dask_client, []), ("spark", sc, [])):
        counts, _ = run_workload("sharp:Sharpness", [seq, "-o", str(tmp_path / engine), *extra], engine, session)
        assert counts["records on CPU"] == len(os.listdir(folder)), (engine, counts)
        outputs[engine] = lines_of(str(tmp_path / engine))
    assert outputs["local"] == outputs["dask"] == outputs["spark"] == outputs["inline"]
    assert results(tmp_path / "inline") == sharpness(folder)


def test_the_launcher_says_it_shipped_the_module(skimage_photos, tmp_path):
    seq, folder = skimage_photos
    work = write(tmp_path / "work", "sharp.py", example("sharp.py"))
    proc = gpumr(["run", "sharp:Sharpness", seq, "-o", tmp_path / "out", "--ksize", "5"], work)
    assert proc.returncode == 0, proc.stderr
    assert "gpumr: workload sharpness from sharp.py, shipped to the tasks\n" in proc.stderr
    assert results(tmp_path / "out") == sharpness(folder, 5)
    proc = gpumr(["run", f"{work}/sharp.py:Sharpness", seq, "-o", tmp_path / "out2"], tmp_path)
    assert proc.returncode == 0 and f"from {work}/sharp.py, shipped to the tasks" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, said", [("40", "--ksize must be a whole number from 1 to 31, not 40"),
                                         ("0", "--ksize must be a whole number from 1 to 31, not 0"),
                                         ("three", "argument --ksize: invalid int value: 'three' (see gpumr run "
                                                   "sharp:Sharpness --help)")])
def test_a_bad_option_value_is_one_line(skimage_photos, tmp_path, value, said):
    work = write(tmp_path / "work", "sharp.py", example("sharp.py"))
    proc = gpumr(["run", "sharp:Sharpness", skimage_photos[0], "-o", tmp_path / "out", "--ksize", value], work)
    assert (proc.returncode, proc.stderr) == (1, f"gpumr: error: {said}\n")
    assert not os.path.exists(tmp_path / "out")


FLAKY = '''
from gpumr import Workload

class Flaky(Workload):
    name = "flaky"
    decode = "gray"

    def cpu(self, key, image, o):
        if key.startswith("coins"):
            raise ValueError(f"no coins here: {image.shape}")
        return {"mean": float(image.mean())}
'''


@pytest.mark.parametrize("engine", ["inline", "dask"])
def test_a_raising_record_is_an_error_line_and_the_job_goes_on(skimage_photos, tmp_path, monkeypatch, engine,
                                                               request, forget_user_modules):
    seq, folder = skimage_photos
    monkeypatch.chdir(write(tmp_path / "work", "flaky.py", FLAKY))
    session = request.getfixturevalue("dask_client") if engine == "dask" else None
    counts, _ = run_workload("flaky:Flaky", [seq, "-o", str(tmp_path / "out")], engine, session)
    got = results(tmp_path / "out")
    assert got.pop("coins.png") == {"error": "ValueError: no coins here: (120, 160)"}
    assert sorted(got) == sorted(n for n in os.listdir(folder) if n != "coins.png")
    assert all(set(v) == {"mean", "device"} for v in got.values())
    assert counts["bad records"] == 1 and counts["records on CPU"] == len(got)


ODD = '''
from gpumr import Workload

class Odd(Workload):
    name = "odd"
    decode = "gray"

    def cpu(self, key, image, o):
        if key.startswith("coins"):
            return {"mean": object()}
        if key.startswith("coffee"):
            return {"mean": float("nan")}
        if key.startswith("hubble"):
            return [float(image.mean())]
        return {"mean": float(image.mean())}
'''


@pytest.mark.parametrize("engine", ["inline", "dask"])
def test_a_result_that_cannot_be_written_is_that_records_error_line(skimage_photos, tmp_path, monkeypatch, engine,
                                                                    request, forget_user_modules):
    """Not JSON (an object, NaN) or not a dict: that record's error line, counted bad; the others are written. (The
    workload names its options argument ``o``, as workloads written before it was ``options`` do.)"""
    seq, folder = skimage_photos
    monkeypatch.chdir(write(tmp_path / "work", "odd.py", ODD))
    session = request.getfixturevalue("dask_client") if engine == "dask" else None
    counts, _ = run_workload("odd:Odd", [seq, "-o", str(tmp_path / "out")], engine, session)
    got = results(tmp_path / "out")
    assert got.pop("coins.png")["error"].startswith("the result is not JSON: a object is not JSON")
    assert got.pop("coffee.png") == {"error": "the result is not JSON: Out of range float values are not JSON "
                                              "compliant"}
    assert got.pop("hubble_deep_field.png") == {"error": "the workload returned a list, not a dict"}
    assert list(got) == ["immunohistochemistry.png"] and set(got["immunohistochemistry.png"]) == {"mean", "device"}
    assert counts["bad records"] == 3 and counts["records on CPU"] == 1


ESCAPE = '''
import numpy as np
from gpumr import Workload

class Escape(Workload):
    name = "escape"
    decode = "gray"

    def cpu(self, key, image, o):
        return {"../../../escaped": image, "/tmp/gpumr-escape-absolute": np.arange(3), "rows": image.shape[0]}
'''


def test_results_stay_inside_the_output_whatever_their_keys_and_fields(tmp_path, monkeypatch, forget_user_modules):
    """Record keys and result fields that are paths (``../``, absolute) name files inside ``OUT/arrays`` only."""
    import cv2

    import seqfile
    monkeypatch.chdir(write(tmp_path / "work", "escape.py", ESCAPE))
    png = cv2.imencode(".png", np.arange(30, dtype=np.uint8).reshape(5, 6))[1].tobytes()
    keys = ["../../outside.png", "/etc/absolute.png", "a/../../b.png", "plain.png"]
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        for key in keys:
            w.append(key, png)
    before = {os.path.join(d, f) for d, _, fs in os.walk(tmp_path.parent) for f in fs}
    counts, _ = run_workload("escape:Escape", [str(tmp_path / "in.seq"), "-o", str(tmp_path / "out")])
    assert counts["records on CPU"] == len(keys)
    made = {os.path.join(d, f) for d, _, fs in os.walk(tmp_path.parent) for f in fs} - before
    out = str(tmp_path / "out") + os.sep
    made.remove(str(tmp_path / ".out.gpumr"))  # the output's proof, beside it (the output transaction's)
    assert made and all(path.startswith(out) for path in made), sorted(made)
    assert not os.path.exists("/tmp/gpumr-escape-absolute") and not os.path.exists(tmp_path.parent / "escaped")
    got = results(tmp_path / "out")
    assert sorted(got) == sorted(keys)
    for key, value in got.items():
        image = np.load(tmp_path / "out" / value["../../../escaped"]["array"])
        assert np.array_equal(image, np.arange(30).reshape(5, 6)) and value["rows"] == 5
        assert np.array_equal(np.load(tmp_path / "out" / value["/tmp/gpumr-escape-absolute"]["array"]), np.arange(3))
    arrays = os.listdir(tmp_path / "out" / "arrays")
    assert len(arrays) == 2 * len(keys) and all("/" not in a for a in arrays)


TAGGER = '''
from gpumr import Option, Workload

VERSION = {version!r}

class Tagger(Workload):
    name = "tagger"
    decode = "raw"
    options = (Option("--table", "a table every task reads", side_file=True),)

    def setup(self, o):
        with open(o.table, encoding="utf-8") as f:
            self.table = f.read()

    def cpu(self, key, data, o):
        return {{"version": VERSION, "table": self.table}}
'''


def test_two_jobs_on_one_cluster_never_see_each_others_module_or_side_files(skimage_photos, tmp_path, monkeypatch,
                                                                           dask_client, forget_user_modules):
    """Same file names (tagger.py, table.txt), other contents, one after the other on the same Dask workers."""
    seq, folder = skimage_photos
    for job in ("a", "b", "a"):
        work = write(tmp_path / job, "tagger.py", TAGGER.format(version=f"module {job}"))
        write(tmp_path / job, "table.txt", f"table {job}")
        monkeypatch.chdir(work)
        out = tmp_path / job / "out"
        run_workload("tagger:Tagger", [seq, "-o", str(out), "--table", "table.txt"], "dask", dask_client)
        assert {v["version"] for v in results(out).values()} == {f"module {job}"}
        assert {v["table"] for v in results(out).values()} == {f"table {job}"}
        assert len(results(out)) == len(os.listdir(folder))


WHERE = """
import os
from gpumr import Option, Workload

class Where(Workload):
    name = "where"
    decode = "raw"
    options = (Option("--table", "a table every task reads", side_file=True),)

    def cpu(self, key, data, o):
        return {"table": o.table, "real": os.path.realpath(o.table), "text": open(o.table).read()}
"""


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_tasks_on_this_machine_read_the_side_files_where_the_launcher_keeps_them(skimage_photos, tmp_path, engine):
    """mrjob's inline and local runners copied every side file into their cache for the tasks (a 256^3 job's 125 MB
    of projections: 0.04 s and as much disk); the tasks now read the launcher's own copy, in the job's folder."""
    seq, _ = skimage_photos
    work = write(tmp_path, "where.py", WHERE)
    write(tmp_path, "table.txt", "the table")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = gpumr(["run", "where.py:Where", seq, "-o", "out", "--table", "table.txt", "--engine", engine, "-q"], work,
                 env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = list(results(tmp_path / "out").values())
    job = re.compile(re.escape(str(tmp)) + r"/gpumr-job-[^/]+/[0-9a-f]{24}-table.txt")
    assert found and all(v["text"] == "the table" and job.fullmatch(v["table"]) and v["real"] == v["table"]
                         for v in found), found[:2]
    assert os.listdir(tmp) == []


def test_an_installed_distribution_is_found_by_its_entry_point(skimage_photos, tmp_path):
    """A tiny distribution offering ``sharpness`` (the example) is installed into a folder on PYTHONPATH."""
    seq, folder = skimage_photos
    dist = write(tmp_path / "dist", "sharp.py", example("sharp.py"))
    write(dist, "pyproject.toml", '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
                                  '[project]\nname = "gpumr-sharpness-example"\nversion = "1.0"\n\n'
                                  '[tool.setuptools]\npy-modules = ["sharp"]\n\n'
                                  '[project.entry-points."gpumr.workloads"]\nsharpness = "sharp:Sharpness"\n')
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), dist], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(target))
    elsewhere = tmp_path / "elsewhere"  # no sharp.py here: only the installed one can be found
    elsewhere.mkdir()
    listed = gpumr(["run", "--help"], elsewhere, env)
    assert listed.returncode == 0 and re.search(r"^  sharpness +installed: sharp:Sharpness$", listed.stdout, re.M), \
        listed.stdout
    assert "sharpness" not in gpumr(["run", "--help"], elsewhere).stdout  # (not installed without that path)
    assert "--ksize KSIZE" in gpumr(["run", "sharpness", "--help"], elsewhere, env).stdout
    for engine in ("inline", "local"):
        proc = gpumr(["run", "sharpness", seq, "-o", tmp_path / engine, "--engine", engine, "--no-conf"], elsewhere,
                     env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("gpumr: workload sharpness from sharp:Sharpness, installed (entry point of gpumr.workloads): imported "
                "where the tasks run, not shipped\n") in proc.stderr
        assert results(tmp_path / engine) == sharpness(folder)


def test_the_gpu_example_runs_on_simulated_gpus(skimage_photos, tmp_path, monkeypatch, emulated_kernels,
                                                forget_user_modules):
    seq, folder = skimage_photos
    monkeypatch.chdir(write(tmp_path / "work", "bright.py", example("bright.py")))
    run_workload("bright:Bright", [seq, "-o", str(tmp_path / "cpu"), "--level", "100", "--device", "cpu"])
    monkeypatch.setenv("GPUMR_SIMULATE_GPUS", "1")
    counts, _ = run_workload("bright:Bright", [seq, "-o", str(tmp_path / "gpu"), "--level", "100", "--device", "gpu"])
    assert counts["records on GPU"] == len(os.listdir(folder)) and not counts.get("GPU fallbacks"), counts
    cpu, gpu = results(tmp_path / "cpu"), results(tmp_path / "gpu")
    assert all(v.pop("device") == "gpu:0" and v.pop("simulated") is True for v in gpu.values())
    assert all(v.pop("device") == "cpu" for v in cpu.values())
    assert gpu == cpu and any(0 < v["bright"] < v["pixels"] for v in cpu.values())


def dist_info(site, name, entry_points, modules=()):
    """A distribution installed by hand into ``site``: its ``.dist-info`` folder as pip writes it (METADATA,
    entry_points.txt as given) and its modules ``[(file name, text)]``."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for file, text in modules:
        (site / file).write_text(text)


COUNTER = '''
from gpumr import Workload

class Counter(Workload):
    name = "counter"
    summary = "bytes of each record"
    decode = "raw"

    def cpu(self, key, data, o):
        return {"bytes": len(data)}
'''


def test_a_distribution_with_broken_entry_points_is_passed_over_with_one_warning(tmp_path):
    """Another package's malformed entry_points.txt (a line with no ``=``) breaks neither ``gpumr run --help`` nor
    ``gpumr run NAME``: it is named in one warning; an installed workload beside it is found and runs."""
    import seqfile
    site = tmp_path / "site"
    dist_info(site, "broken-thing", "[console_scripts]\nbroken-thing\n")
    dist_info(site, "gpumr-counter", "[gpumr.workloads]\ncounter = counter_mod:Counter\n",
              [("counter_mod.py", COUNTER)])
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        for i in range(3):
            w.append(f"r{i}", b"x" * i)
    env = dict(os.environ, PYTHONPATH=str(site))
    warning = re.compile(r"gpumr: warning: passing over the installed distribution broken-thing \(" +
                         re.escape(str(site)) + r"/broken_thing-1\.0\.dist-info\): its entry points cannot be read "
                         r"\(\w+Error: .+\)\n")
    listed = gpumr(["run", "--help"], tmp_path, env)
    assert listed.returncode == 0 and re.search(r"^  counter +installed: counter_mod:Counter$", listed.stdout, re.M), \
        (listed.stdout, listed.stderr)
    assert warning.fullmatch(listed.stderr), listed.stderr
    proc = gpumr(["run", "counter", "in.seq", "-o", "out"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert warning.match(proc.stderr) and proc.stderr.count("broken-thing") == 1, proc.stderr
    assert results(tmp_path / "out") == {f"r{i}": {"bytes": i, "device": "cpu"} for i in range(3)}
    proc = gpumr(["run", "nothing"], tmp_path, env)
    assert proc.returncode != 0 and warning.match(proc.stderr), proc.stderr
    assert proc.stderr.splitlines()[1:] == ["gpumr: error: no workload 'nothing': choose one of faces, backproject, "
                                            "blobs, watershed, counter, or give your own as MODULE:CLASS (see gpumr run "
                                            "--help)"]


NAMER = '''
from gpumr import Workload

class Namer(Workload):
    name = "namer"
    decode = "raw"

    def cpu(self, key, data, o):
        return {{"r0": {{"error": 0.25, "device": "camera-3", "size": len(data)}}, "r1": {{"lost": [1, 2]}},
                "r2": {{"simulated": False, "size": 2}}}}.get(key, {{"size": len(data), "errors": 0}})
'''


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_a_result_naming_a_key_of_the_output_format_is_that_records_error_line(tmp_path, engine):
    """``{"error": 0.25, "device": "camera-3"}`` (a residual, a camera) is never written as a good record with its
    device overwritten, which every reader's ``"error" in value`` would count as failed: it is the record's error
    line, saying which keys to rename, and counted as bad."""
    import seqfile
    work = write(tmp_path, "namer.py", NAMER.format())
    with seqfile.Writer(str(tmp_path / "in.seq")) as w:
        for i in range(5):
            w.append(f"r{i}", b"x" * i)
    proc = gpumr(["run", "namer:Namer", "in.seq", "-o", "out", "--engine", engine], work)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("gpumr: 5 records: 2 on CPU, 0 on GPU, 3 bad"), proc.stderr
    kept = "which the output format keeps for itself (error, device, lost, simulated)"
    assert results(tmp_path / "out") == {
        "r0": {"error": f"the result has keys 'error' and 'device', {kept}: rename them in the workload"},
        "r1": {"error": f"the result has key 'lost', {kept}: rename it in the workload"},
        "r2": {"error": f"the result has key 'simulated', {kept}: rename it in the workload"},
        "r3": {"size": 3, "errors": 0, "device": "cpu"},
        "r4": {"size": 4, "errors": 0, "device": "cpu"}}
