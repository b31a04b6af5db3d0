"""The code ``gpumr run`` runs is trusted like any file gpumr trusts (issue 64, class 4).

Real processes and a real second local user (``useradd``): a module that
user planted in a folder anyone may write (1777), or in one with no sticky
bit, is refused before any of it runs; an installed module comes before a
same-named file of the current folder unless the file is named; a user's
module named like another (``json.py``) never replaces that module, in the
launcher or in the tasks.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT, reason="needs root (to make a second local user with useradd)")

#: A workload whose module, when it runs at all, leaves a file at MARKER: what the tests look for.
MODULE = '''
open({marker!r}, "a").close()
import sys
from gpumr import Workload

class W(Workload):
    name = "w"
    decode = "raw"

    def cpu(self, key, data, o):
        json = sys.modules["json"]
        return {{"from": {tag!r}, "module": __name__, "json_is_the_library": hasattr(json, "JSONDecoder")}}
'''


@pytest.fixture
def shared(tmp_path):
    """A folder anyone may write in, with the sticky bit (as /tmp is), outside pytest's root-only folders."""
    top = tempfile.mkdtemp(prefix="gpumr-code-")
    os.chmod(top, 0o1777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    import seqfile
    path = str(tmp_path_factory.mktemp("code-in") / "in.seq")
    with seqfile.Writer(path) as w:
        for i in range(3):
            w.append(f"r{i}", b"x" * i)
    return path


def plant(folder, name, tag, marker, owner=None):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(MODULE.format(marker=str(marker), tag=tag))
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def gpumr(args, cwd, env=None, script=False):
    """``gpumr ARGS`` in ``cwd``: as ``python -m gpumr`` (the current folder on sys.path), or the installed script."""
    command = [os.path.join(os.path.dirname(sys.executable), "gpumr")] if script else [sys.executable, "-m", "gpumr"]
    return subprocess.run([*command, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=env)


def results(out):
    from conftest import lines_of
    return {json.loads(k): json.loads(v) for k, v in (line.split("\t") for line in lines_of(str(out)))}


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "script"])
@pytest.mark.parametrize("spec", ["mod:W", "mod.py:W", "./mod.py:W"])
def test_a_module_another_user_planted_in_a_shared_folder_is_refused_before_it_runs(other_user, shared, records,
                                                                                   tmp_path, spec, script):
    marker = tmp_path / "ran"
    plant(shared, "mod.py", "planted", marker, owner=other_user)
    proc = gpumr(["run", spec, records, "-o", tmp_path / "out"], shared, script=script)
    assert (proc.returncode, proc.stderr) == (1, f"gpumr: error: {shared}/mod.py: refusing a workload module of uid "
                                                 f"{other_user}, not yours (uid 0) or root's\n")
    assert not marker.exists() and not (tmp_path / "out").exists()
    proc = gpumr(["run", spec, "--help"], shared, script=script)  # (the module is imported for its options too)
    assert proc.returncode == 1 and "refusing a workload module of uid" in proc.stderr and not marker.exists()


def test_your_own_module_in_a_sticky_shared_folder_runs(shared, records, tmp_path):
    """The sticky bit keeps others from replacing a file of yours: the rule trusts it, as it trusts /tmp's."""
    marker = tmp_path / "ran"
    plant(shared, "mod.py", "mine", marker)
    proc = gpumr(["run", "mod:W", records, "-o", tmp_path / "out"], shared)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and {v["from"] for v in results(tmp_path / "out").values()} == {"mine"}


def test_a_module_in_a_folder_others_may_write_without_the_sticky_bit_is_refused(other_user, records, tmp_path):
    """Your own file, but anyone could replace it (mode 0777, no sticky bit): refused, naming the folder."""
    folder = tempfile.mkdtemp(prefix="gpumr-code-open-")
    try:
        os.chmod(folder, 0o777)
        marker = tmp_path / "ran"
        plant(folder, "mod.py", "mine", marker)
        proc = gpumr(["run", "mod:W", records, "-o", tmp_path / "out"], folder)
        assert (proc.returncode, proc.stderr) == (
            1, f"gpumr: error: {folder}: refusing it for a workload module: mode 0777 lets others write in it "
               "without the sticky bit, so they could replace the files gpumr uses there (chmod +t it, e.g. 1770 "
               "or 3770 for a group)\n")
        assert not marker.exists() and not (tmp_path / "out").exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_module_that_is_a_link_is_refused(other_user, shared, records, tmp_path):
    """A link the other user made in the shared folder, to a module of theirs: never followed."""
    marker = tmp_path / "ran"
    theirs = plant(tempfile.mkdtemp(prefix="gpumr-code-theirs-"), "target.py", "planted", marker, owner=other_user)
    try:
        os.symlink(theirs, os.path.join(shared, "mod.py"))
        os.lchown(os.path.join(shared, "mod.py"), other_user, -1)
        proc = gpumr(["run", "mod.py:W", records, "-o", tmp_path / "out"], shared)
        assert (proc.returncode, proc.stderr) == (1, f"gpumr: error: {shared}/mod.py: refusing a workload module "
                                                     "that is a symlink\n")
        assert not marker.exists()
    finally:
        shutil.rmtree(os.path.dirname(theirs), ignore_errors=True)


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_an_installed_module_comes_before_a_same_named_file_here_unless_the_file_is_named(records, tmp_path,
                                                                                          engine):
    """``mod`` installed (on PYTHONPATH) and a ``mod.py`` here: ``mod:W`` runs the installed one, in the launcher
    and in the tasks, and says the file here is not used; ``./mod.py:W`` runs the file."""
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    plant(site, "mod.py", "installed", tmp_path / "ran-installed")
    plant(work, "mod.py", "here", tmp_path / "ran-here")
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = gpumr(["run", "mod:W", records, "-o", tmp_path / "a", "--engine", engine], work, env)
    assert proc.returncode == 0, proc.stderr
    assert ("gpumr: workload w from module mod, installed: imported where the tasks run, not shipped (mod.py here is "
            "not used: an installed module comes first; run the file as mod.py:W)\n") in proc.stderr
    got = results(tmp_path / "a")
    assert len(got) == 3 and {v["from"] for v in got.values()} == {"installed"}, got
    assert not (tmp_path / "ran-here").exists()
    proc = gpumr(["run", "./mod.py:W", records, "-o", tmp_path / "b", "--engine", engine], work, env)
    assert proc.returncode == 0 and "gpumr: workload w from ./mod.py, shipped to the tasks\n" in proc.stderr, \
        proc.stderr
    got = results(tmp_path / "b")
    assert len(got) == 3 and {v["from"] for v in got.values()} == {"here"}, got


@pytest.mark.parametrize("engine", ["inline", "local"])
def test_a_module_named_like_another_never_replaces_it(records, tmp_path, engine):
    """A user's ``json.py`` runs as a module of its own name: ``json`` stays the library's for gpumr and the
    workload, in the launcher (inline: the tasks too) and in the tasks' own processes (local)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    plant(work, "json.py", "mine", tmp_path / "ran")
    proc = gpumr(["run", work / "json.py:W", records, "-o", tmp_path / "out", "--engine", engine], elsewhere)
    assert proc.returncode == 0, proc.stderr
    got = results(tmp_path / "out")
    assert len(got) == 3 and all(v["json_is_the_library"] and v["from"] == "mine" for v in got.values()), got
    assert all(v["module"].startswith("_gpumr_workload_json_") for v in got.values()), got


def test_the_module_is_loaded_under_its_own_name_in_a_task(tmp_path):
    """A task's :func:`gpumr.workloads.load` of the shipped copy (named by its content, as the launcher ships it)."""
    code = ("import json, sys\nfrom gpumr.workloads import Ref, load\n"
            f"cls = load(Ref('w', 'json:W', 'abc-json.py', 'shipped'), file={str(tmp_path / 'abc-json.py')!r})\n"
            "print(sys.modules['json'] is json, cls.__module__, sys.modules[cls.__module__].__file__)")
    plant(tmp_path, "abc-json.py", "shipped", tmp_path / "ran")
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    same, name, path = proc.stdout.split()
    assert same == "True" and name.startswith("_gpumr_workload_json_") and path == str(tmp_path / "abc-json.py")
