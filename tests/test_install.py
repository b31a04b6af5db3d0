"""The tests run against the installed package, as users get it."""

import configparser
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

import gpumr
import gpumr.conf
import gpumr.cuda
import gpumr.jobs
import seqfile


def test_imported_from_installed_package_not_source_tree():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for mod, source in ((gpumr, "gpumr"), (seqfile, "seqfile"), (gpumr.jobs, "jobs")):
        here = os.path.dirname(os.path.abspath(mod.__file__))
        assert here != os.path.join(repo, source), f"{mod.__name__} imported from the source tree"
        assert "site-packages" in here.split(os.sep), here


def test_package_data_installed():
    cuda_dir = os.path.dirname(gpumr.cuda.__file__)
    assert any(n.endswith(".cu") for n in os.listdir(cuda_dir)), "kernel sources missing from the install"
    conf_dir = os.path.dirname(gpumr.conf.__file__)
    assert any(n.endswith(".conf") for n in os.listdir(conf_dir)), "mrjob configs missing from the install"


# -- the install story: `make dist`, and the docs' pip lines true as written ---------------------------


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Tools the docs have the reader install beside gpumr (not gpumr's dependencies): PyPI's names.
TOOLS = {"awscli"}
#: The wheel ``make dist`` builds: pure Python, one file for every platform.
WHEEL = f"gpumr-{gpumr.__version__}-py3-none-any.whl"


def setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    return cfg


def requirement_names():
    """Every distribution setup.cfg names (dependencies and extras), lower-case, without versions or markers."""
    cfg = setup_cfg()
    lines = cfg["options"]["install_requires"].splitlines()
    lines += [ln for extra in cfg["options.extras_require"].values() for ln in extra.splitlines()]
    return {re.split(r"[\s<>=!;\[]", ln.strip(), 1)[0].lower() for ln in lines if ln.strip()}


def docs_pip_commands():
    """``(file, line number, [arguments])`` of every ``pip install`` the docs and the README show."""
    files = [os.path.join(REPO, "README.rst")] + glob.glob(os.path.join(REPO, "docs", "**", "*.rst"), recursive=True)
    files += [os.path.join(REPO, "gpumr", "troubleshooting.rst")]
    out = []
    for path in files:
        if os.sep + "_build" + os.sep in path:
            continue
        with open(path, encoding="utf-8") as f:
            # A command broken over two lines of a paragraph ("``pip install\n'...'``") is one command.
            text = re.sub(r"pip install\s*\n\s*", "pip install ", f.read())
            for n, line in enumerate(text.splitlines(), 1):
                for m in re.finditer(r"pip install ((?:[^`#)\n]|``)+?)\s*(?:$|``|`|\)|#)", line):
                    out.append((os.path.relpath(path, REPO), n, shlex.split(m.group(1).replace("``", ""))))
    return out


def test_every_pip_install_line_in_the_docs_is_true():
    """Each names what exists: the checkout (``.``), the wheel make dist builds, or a package setup.cfg names.

    gpumr is on no package index, so ``pip install gpumr`` would fail as written; ``'gpumr[dask]'`` (what a missing
    extra's error line says) adds the extra's packages where gpumr is installed: pip takes gpumr as satisfied.
    """
    extras = set(setup_cfg()["options.extras_require"])
    known = requirement_names()
    commands = docs_pip_commands()
    assert any(any(WHEEL in a for a in args) for _, _, args in commands), "no doc shows how to install the wheel"
    wrong = []
    for where, n, args in commands:
        for arg in (a for a in args if not a.startswith("-")):
            m = re.fullmatch(r"(\.|(?:\S*/)?gpumr-[^/\[]+\.whl|[A-Za-z0-9_.-]+)(?:\[([a-z0-9_,-]+)\])?", arg)
            if not m:
                wrong.append(f"{where}:{n}: {arg!r} is not a requirement pip takes")
                continue
            target, named = m.group(1), (m.group(2) or "").split(",")
            if target.endswith(".whl"):
                if os.path.basename(target) != WHEEL:
                    wrong.append(f"{where}:{n}: {target} is not the wheel make dist builds ({WHEEL})")
            elif target == ".":
                pass
            elif target.lower() == "gpumr":
                if not any(named):
                    wrong.append(f"{where}:{n}: {arg!r}: gpumr is on no package index (install the wheel: make dist)")
                    continue
            elif target.lower() not in known | TOOLS:
                wrong.append(f"{where}:{n}: {target} is not a dependency setup.cfg names")
            wrong += [f"{where}:{n}: no extra {e!r} in setup.cfg" for e in named if e and e not in extras]
    assert not wrong, "\n".join(wrong)


def checkout_copy(dest):
    """The checkout's files (tracked, and new ones git does not ignore) copied to ``dest``; skips without git."""
    if not os.path.isdir(os.path.join(REPO, ".git")) and not os.path.isfile(os.path.join(REPO, ".git")):
        pytest.skip("needs the source checkout (to build the wheel)")
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = os.path.join(REPO, name)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, name))


@pytest.mark.slow
def test_make_dist_builds_a_wheel_that_installs_into_a_fresh_environment(tmp_path):
    """``make dist``'s build, then the wheel alone (``--no-deps``) in a new venv: gpumr, its data and command work."""
    pytest.importorskip("build", reason="make dist needs the build package (the dev extra)")
    src = tmp_path / "src"
    checkout_copy(src)
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert set(os.listdir(tmp_path / "dist")) == {f"gpumr-{gpumr.__version__}.tar.gz", WHEEL}
    names = zipfile.ZipFile(tmp_path / "dist" / WHEEL).namelist()
    for needed in ("gpumr/troubleshooting.rst", "gpumr/conf/mrjob.emr.conf", "gpumr/conf/bootstrap-gpu-node.sh",
                   "gpumr/jobs/face_detect.py", "seqfile/reader.py"):
        assert needed in names, needed
    assert any(n.startswith("gpumr/cuda/") and n.endswith(".cu") for n in names)

    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                        "--no-index", str(tmp_path / "dist" / WHEEL)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # The dependencies come from this environment (after the fresh one's own site-packages: its gpumr wins).
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    deps = os.path.dirname(os.path.dirname(gpumr.__file__))
    with open(os.path.join(site, "zz-deps.pth"), "w") as f:
        f.write(deps + "\n")
    out = tmp_path / "elsewhere"
    out.mkdir()
    r = subprocess.run([str(py), "-c", "import gpumr, gpumr.jobs, gpumr.conf; print(gpumr.__file__)"], cwd=out,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(str(env_dir)), r.stdout + r.stderr
    for args, said in ((["--version"], f"gpumr {gpumr.__version__}"), (["help", "no-files"], "What to do."),
                       (["conf"], "mrjob.emr.conf")):
        r = subprocess.run([str(env_dir / "bin" / "gpumr"), *args], cwd=out, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and said in r.stdout, (args, r.stdout, r.stderr)


@pytest.mark.slow
def test_make_dist_says_what_it_built_in_a_few_lines(tmp_path):
    """``make dist`` prints the files it built, not setuptools' hundreds of lines (those go to build/dist.log)."""
    pytest.importorskip("build", reason="make dist needs the build package (the dev extra)")
    if shutil.which("make") is None:
        pytest.skip("needs make")
    src = tmp_path / "src"
    checkout_copy(src)
    venv_dir = sys.prefix  # this environment, as `make install` made it (its .ready taken as made: -o)
    r = subprocess.run(["make", "--no-print-directory", "dist", f"VENV={venv_dir}", f"PYTHON={sys.executable}",
                        "-o", os.path.join(venv_dir, ".ready")], cwd=src, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = (r.stdout + r.stderr).splitlines()
    assert len(lines) <= 6, lines
    assert any(WHEEL in line for line in lines), lines
    assert (src / "dist" / WHEEL).is_file() and (src / "build" / "dist.log").stat().st_size > 1000
