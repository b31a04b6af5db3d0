"""gpumr on a real SLURM: dask-jobqueue's ``SLURMCluster`` submits batch jobs whose Dask workers run both workloads.

The SLURM is the one-node one ``tests/slurm/up.sh`` starts on this machine
(``.ci/run`` starts it before the suite; the module's fixture starts it too,
or finds it running). Where it cannot start (not root, no apt-get) the tests
skip with its reason, and fail under ``CI=true``.

What runs is ``docs/how-to/slurm.rst``, taken from the page so that the page
cannot drift: its cluster script, word for word, with only the site's values
that the page itself gives for one machine (partition, sizes, interface,
number of jobs); and its ``gpumr run ... --engine dask --scheduler ADDRESS``
commands as written, with the site's shared folder replaced by the test's
folder and the example address by the one the script printed. The outputs
equal ``gpumr run ... --engine inline --device cpu``'s on the same inputs. A
worker's batch job cancelled (``scancel``) mid-run, and every record still
comes out exactly once. One cluster serves the module (two jobs of one core).
"""

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import assert_shellcheck_passes, ct_phantom, lines_of

from gpumr.cli import main
from gpumr.io.packing import pack

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
UP = os.path.join(HERE, "slurm", "up.sh")
PAGE = os.path.join(HERE, os.pardir, "docs", "how-to", "slurm.rst")
#: up.sh's exit status for "SLURM cannot run here" (its one line says why).
CANNOT = 77
#: What the page's commands name that is the reader's own: their shared folder and the address the script printed.
SITE_FOLDER = "/lustre/project"
SITE_ADDRESS = "tls://10.1.2.3:8786"
#: Runs the page's ``slurm_cluster.py`` as written, with ``SLURMCluster``'s site values and ``scale``'s jobs replaced
#: by the page's values for one machine (argv: those values as JSON, the number of jobs).
SHIM = """
import json, runpy, sys
import dask_jobqueue

VALUES, JOBS = json.loads(sys.argv[1]), int(sys.argv[2])


class OneMachine(dask_jobqueue.SLURMCluster):
    def __init__(self, **kwargs):
        if set(VALUES) - set(kwargs):
            sys.exit(f"slurm_cluster.py does not set {sorted(set(VALUES) - set(kwargs))}")
        super().__init__(**{**kwargs, **VALUES})

    def scale(self, n=None, jobs=0, memory=None, cores=None):
        if jobs:  # the script's scale(jobs=N); the cluster's own scale(0) on closing stays
            return super().scale(jobs=JOBS)
        return super().scale(n, jobs, memory, cores)


dask_jobqueue.SLURMCluster = OneMachine
sys.argv = ["slurm_cluster.py"]
runpy.run_path("slurm_cluster.py", run_name="__main__")
"""


def unavailable(why):
    if os.environ.get("CI"):
        pytest.fail(f"the SLURM tests must run in CI: {why}")
    pytest.skip(why)


def code_blocks(text, language):
    """The bodies of ``text``'s ``.. code-block:: LANGUAGE`` directives, dedented, in order."""
    found = re.finditer(rf"^\.\. code-block:: {language}[ \t]*\n((?:[ \t]*\n|[ \t]+\S.*\n)+)", text, re.M)
    return [textwrap.dedent(m.group(1)).strip("\n") + "\n" for m in found]


def page():
    """``(script, commands, values, jobs)``: the page's cluster script and command block, its values for one machine."""
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    (script,) = code_blocks(text, "python")
    (commands,) = [b for b in code_blocks(text, "bash") if "gpumr run" in b]  # (the others: gpumr, TLS)
    m = re.search(r"change the\s+site's values to ``(.+?)``\s+and\s+``scale\(jobs=(\d+)\)``", text, re.S)
    assert m, "the page gives no values for one machine"
    call = ast.parse(f"f({' '.join(m.group(1).split())})", mode="eval").body
    return script, commands, {k.arg: ast.literal_eval(k.value) for k in call.keywords}, int(m.group(2))


def tls_blocks():
    """The page's shell blocks that make the TLS certificate and tell Dask's clients of it."""
    with open(PAGE, encoding="utf-8") as f:
        blocks = code_blocks(f.read(), "bash")
    (make,) = [b for b in blocks if "openssl" in b]
    (tell,) = [b for b in blocks if "DASK_DISTRIBUTED__COMM__TLS" in b]
    return make, tell


def env_with_gpumr(home=None):
    """This environment with this interpreter's ``gpumr`` and ``python`` first on ``PATH`` (and ``home`` as HOME)."""
    return {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            **({"HOME": str(home)} if home else {})}


def squeue(job_ids):
    """``{job id: state}`` of those of ``job_ids`` that SLURM still lists."""
    r = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True)
    return dict(line.split() for line in r.stdout.splitlines())


def wait_gone(job_ids, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and squeue(job_ids):
        time.sleep(0.2)
    return squeue(job_ids)


def test_page_gives_the_recipe_and_its_values_for_one_machine():
    script, commands, values, jobs = page()
    tree = ast.parse(script)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SLURMCluster"]
    assert len(calls) == 1 and "from dask_jobqueue import SLURMCluster" in script
    given = {k.arg for k in calls[0].keywords}
    # Every value given for one machine replaces one the recipe sets; the rest (the GPU resource) runs as written.
    assert set(values) <= given and given - set(values) == {"worker_extra_args", "walltime", "protocol", "security",
                                                           "scheduler_options"}
    assert jobs >= 2 and "cluster.scale(jobs=" in script and "print(cluster.scheduler_address" in script
    for workload in ("faces", "backproject"):
        assert re.search(rf"gpumr run {workload} .*--engine dask --scheduler {SITE_ADDRESS}$",
                         commands.replace("\\\n", " "), re.M), workload
    assert "gpumr ct assemble" in commands and commands.count(SITE_FOLDER) == 6


def test_up_script_passes_shellcheck():
    assert_shellcheck_passes(UP)


def test_up_says_in_one_line_why_it_cannot_start():
    """Not root: one line, and the status the tests read as "skip with this reason"."""
    if os.geteuid() == 0:
        if not shutil.which("runuser"):
            pytest.skip("no runuser to try it as another user")
        argv = ["runuser", "-u", "nobody", "--", "bash", "-s"]
    else:
        argv = ["bash", "-s"]
    with open(UP, "rb") as script:
        r = subprocess.run(argv, stdin=script, capture_output=True, text=True, timeout=60)
    assert r.returncode == CANNOT and not r.stderr
    assert re.fullmatch(r"slurm: not started: this one-node SLURM runs its daemons as root, and this is \S+\n", r.stdout)


@pytest.fixture(scope="module")
def slurm():
    """The one-node SLURM, started (or found running) by ``tests/slurm/up.sh``; its line."""
    if not shutil.which("bash"):
        unavailable("no bash to run tests/slurm/up.sh")
    r = subprocess.run(["bash", UP], capture_output=True, text=True, timeout=600)
    line = (r.stdout + r.stderr).strip()
    if r.returncode == CANNOT:
        unavailable(line)
    assert r.returncode == 0, line
    try:
        import dask_jobqueue  # noqa: F401 (only whether it imports)
    except ImportError as exc:
        unavailable(f"no dask-jobqueue ({exc}): pip install -e '.[dev]'")
    return line


@pytest.fixture(scope="module")
def cluster(slurm, tmp_path_factory):
    """The page's cluster script, running in a folder of its own: its address, its SLURM jobs, a client of it.

    The page's TLS certificate is made as the page says, in a home folder of the test's own (``home``)."""
    from distributed import Client
    from distributed.security import Security
    script, _, values, jobs = page()
    site = tmp_path_factory.mktemp("site")
    home = tmp_path_factory.mktemp("home")
    make, tell = tls_blocks()
    r = subprocess.run(["bash", "-e", "-c", make], cwd=home, env=env_with_gpumr(home), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    tls = home / "dask-tls"
    assert oct(tls.stat().st_mode & 0o777) == "0o700" and (tls / "key.pem").stat().st_mode & 0o077 == 0
    (site / "slurm_cluster.py").write_text(script)
    log = open(site / "slurm_cluster.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", SHIM, json.dumps(values), str(jobs)], cwd=site,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                            env=env_with_gpumr(home))
    printed = []
    reader = threading.Thread(target=lambda: printed.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    client = None
    try:
        assert printed and re.fullmatch(r"tls://127\.0\.0\.1:\d+\n", printed[0]), \
            f"the cluster script printed {printed}; its log:\n{(site / 'slurm_cluster.log').read_text()[-3000:]}"
        address = printed[0].strip()
        cert, key = str(tls / "cert.pem"), str(tls / "key.pem")
        client = Client(address, timeout=30, security=Security(tls_ca_file=str(tls / "ca.pem"), tls_client_cert=cert,
                                                               tls_client_key=key, require_encryption=True))
        client.wait_for_workers(jobs, timeout=300)
        # Each worker is a SLURM batch job of the script's, running; the scheduler has no other worker.
        job_of = client.run(lambda: os.environ.get("SLURM_JOB_ID"))
        assert len(job_of) == jobs and all(job_of.values()), job_of
        assert set(squeue(list(job_of.values())).values()) == {"RUNNING"}
        yield SimpleNamespace(address=address, client=client, job_of=job_of, site=site, home=home, tell=tell)
    finally:
        if client is not None:
            client.close()
        try:
            proc.communicate("\n", timeout=120)  # the script's Enter: it closes the cluster, which cancels its jobs
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    assert proc.returncode == 0, (site / "slurm_cluster.log").read_text()[-3000:]
    assert not wait_gone(list(job_of.values())), "the cluster's batch jobs outlived it"


def test_up_a_second_time_finds_it_running(slurm):
    r = subprocess.run(["bash", UP], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not r.stderr
    assert re.fullmatch(r"slurm: already running: node \S+ (idle|mixed|allocated) in partition debug \(\S+\)\n",
                        r.stdout), r.stdout


def test_the_pages_commands_give_inline_output(cluster, sample_frames, tmp_path):
    """The page's commands as written, on SLURM's workers: faces lines equal to inline's, the same volume."""
    site = str(cluster.site)
    pack([sample_frames], os.path.join(site, "frames.seq"), shards=2, progress=False)
    ct_phantom(cluster.site, 32, 24, name="proj")
    _, commands, _, _ = page()
    r = subprocess.run(["bash", "-e", "-c", cluster.tell + commands.replace(SITE_FOLDER, site).replace(SITE_ADDRESS,
                                                                                                    cluster.address)],
                       cwd=tmp_path, env=env_with_gpumr(cluster.home), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"--- stdout\n{r.stdout}\n--- stderr\n{r.stderr[-5000:]}"
    # (the summaries: a job slow enough also prints progress lines, "gpumr: faces: 0% of the input, ...")
    summaries = [line for line in r.stderr.splitlines() if line.startswith("gpumr: ") and " records: " in line]
    assert [s.split(" in ")[0] for s in summaries] == ["gpumr: 12 records: 12 on CPU, 0 on GPU, 0 bad",
                                                       "gpumr: 2 records: 2 on CPU, 0 on GPU, 0 bad"], r.stderr

    ref = tmp_path / "inline"
    assert main(["run", "faces", os.path.join(site, "frames.seq"), "-o", str(ref / "faces"), "--engine", "inline",
                 "--device", "cpu"]) == 0
    assert lines_of(os.path.join(site, "faces")) == lines_of(str(ref / "faces")) and len(lines_of(str(ref / "faces"))) == 12
    assert main(["run", "backproject", "--projections", os.path.join(site, "proj.seq"), "--slab", "16", "-o",
                 str(ref / "slices"), "--engine", "inline", "--device", "cpu"]) == 0
    assert main(["ct", "assemble", str(ref / "slices"), "-o", str(ref / "volume.npy")]) == 0
    got, want = np.load(os.path.join(site, "volume.npy")), np.load(ref / "volume.npy")
    assert got.shape == want.shape == (32, 32, 32) and np.abs(want).max() > 0
    # Equal to float32 rounding: the CPU backprojector is numba's parallel fastmath loop, whose vectorised sums may
    # round differently in another process.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_workers_job_cancelled_mid_run_every_record_once(cluster, sample_frames, tmp_path):
    """``scancel`` the batch job of a worker that is running a task: the job still gives every record exactly once.

    Last in the module: the cluster has one job fewer after it.
    """
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(2):
        for name in sorted(os.listdir(sample_frames)):
            os.link(os.path.join(sample_frames, name), frames / f"{i}-{name}")
    seq = str(tmp_path / "seq")
    pack([str(frames)], seq, shards=2, progress=False)
    fast = ["--min-size", "60"]  # the same options on both sides: the smallest scales' cost spared
    assert main(["run", "faces", seq, "-o", str(tmp_path / "inline"), "--engine", "inline", "--device", "cpu", *fast]) == 0
    want = lines_of(str(tmp_path / "inline"))
    tls = {k: os.path.expanduser(v.replace("~", str(cluster.home))) for k, v in
           re.findall(r"export (\w+)=(\S+)", cluster.tell)}
    proc = subprocess.Popen(["gpumr", "run", "faces", seq, "-o", str(tmp_path / "out"), "--engine", "dask",
                             "--scheduler", cluster.address, "--split-size", "64KiB", *fast],
                            cwd=tmp_path, env={**env_with_gpumr(cluster.home), **tls}, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        if glob.glob(str(tmp_path / ".out.*" / "out" / "map-*")):  # a task has written its file: the job is mid-run
            busy = [w for w, keys in cluster.client.processing().items()
                    if any(str(k).startswith("gpumr-") and "-map-" in str(k) for k in keys)]
            victim = busy[0] if busy else None
        time.sleep(0.01)
    assert victim is not None and proc.poll() is None, "the job ended before a worker could be cancelled mid-run"
    job = cluster.job_of[victim]
    subprocess.run(["scancel", job], check=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-5000:]
    assert not wait_gone([job]) and victim not in cluster.client.scheduler_info()["workers"]
    got = lines_of(str(tmp_path / "out"))
    keys = [json.loads(line.split("\t", 1)[0]) for line in got]
    assert got == want and len(keys) == len(set(keys)) == 24
    assert err.strip().splitlines()[-1].startswith("gpumr: 24 records: 24 on CPU, 0 on GPU, 0 bad in "), err[-3000:]
