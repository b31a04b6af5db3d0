"""Trusted paths, kernel cache (issue 25, class 1): only builds gpumr made and can vouch for are loaded.

Real processes: jobs on a simulated GPU (its kernels built for and run on
the host, from the kernel cache), a real second user (``useradd``) planting a
library in a shared cache, and a process that may not write in the cache
(root without CAP_DAC_OVERRIDE, through ``setpriv``).
"""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
from conftest import warns

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("gcc"),
                                reason="needs root (a second user) and gcc (host builds of the kernels)")


@pytest.fixture
def shared_tmp():
    """A folder in /tmp that other users may enter (pytest's own tmp folders are root's alone)."""
    top = tempfile.mkdtemp(prefix="gpumr-trust-")
    os.chmod(top, 0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def frames_seq(tmp_path_factory):
    from gpumr.faces.sample import make_frames
    from gpumr.io.packing import pack
    d = tmp_path_factory.mktemp("trust-frames")
    make_frames(str(d / "frames"), count=4)
    pack([str(d / "frames")], str(d / "f.seq"), progress=False)
    return str(d / "f.seq")


def _env(cache):
    return dict(os.environ, GPUMR_SIMULATE_GPUS="1", GPUMR_KERNEL_CACHE=cache)


def _job(seq, out, cache, prefix=(), runner="local"):
    return subprocess.run([*prefix, sys.executable, "-m", "gpumr.jobs.face_detect", "-r", runner, seq,
                           "--output-dir", out, "--device", "gpu"], env=_env(cache), capture_output=True,
                          text=True, timeout=600)


def _all_on_gpu(proc, n=4):
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"gpumr: {n} records: 0 on CPU, {n} on GPU, 0 bad"), proc.stderr[-3000:]


def _build(cache, prefix=()):
    """``emulate.build('haar')`` in a fresh process: (its path, the process)."""
    code = "from gpumr.gpu import emulate; print(emulate.build('haar')[0])"
    proc = subprocess.run([*prefix, sys.executable, "-c", code], env=_env(cache), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc


def _proof(path):
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.gpumr")


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_read_only_cache_still_runs_every_record_on_the_gpu_and_says_why(frames_seq, shared_tmp, tmp_path, runner):
    cache = os.path.join(shared_tmp, "ro")
    os.mkdir(cache, 0o555)
    no_override = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]  # root obeys 0555 then
    proc = _job(frames_seq, str(tmp_path / "out"), cache, no_override, runner)
    _all_on_gpu(proc)  # before: "4 on CPU, 0 on GPU, 4 GPU fallbacks", and no line saying why
    said = [ln for ln in proc.stderr.splitlines() if cache in ln]
    assert len(said) == 1 and "you may not write in it (read-only)" in said[0], proc.stderr[-3000:]
    assert "private temporary folder" in said[0]
    assert os.listdir(cache) == []


def test_planted_library_of_another_user_in_a_shared_cache_is_never_loaded(frames_seq, shared_tmp, tmp_path,
                                                                           other_user):
    # What a genuine build is called, and what its proof says (to forge a matching one).
    genuine, _ = _build(os.path.join(shared_tmp, "genuine"))
    name = os.path.basename(genuine)
    output = json.load(open(_proof(genuine)))["output"]
    # The planted library: its constructor runs at load time, as the loading job's user (root here).
    marker = os.path.join(shared_tmp, "planted-code-ran")
    src = os.path.join(shared_tmp, "evil.c")
    with open(src, "w") as f:
        f.write('#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n'
                f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran\\n", f); fclose(f); }}\n}}\n')
    evil = os.path.join(shared_tmp, "evil.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", evil, src], check=True)
    data = open(evil, "rb").read()
    forged = os.path.join(shared_tmp, "forged.json")
    with open(forged, "w") as f:
        json.dump({"gpumr": "0", "output": output,
                   "versions": [{"": [len(data), hashlib.sha256(data).hexdigest()]}]}, f)
    os.chmod(evil, 0o755)
    os.chmod(forged, 0o644)
    # A shared cache (sticky, like /tmp); the second user plants the library and its forged proof there.
    cache = os.path.join(shared_tmp, "cache")
    os.mkdir(cache)
    os.chmod(cache, 0o1777)
    for what, dest in ((evil, name), (forged, f".{name}.gpumr")):
        subprocess.run(["/bin/cp", what, os.path.join(cache, dest)], user=other_user, group=other_user, check=True)
    planted = os.path.join(cache, name)
    assert os.stat(planted).st_uid == other_user

    proc = _job(frames_seq, str(tmp_path / "out"), cache)
    assert not os.path.exists(marker), "the planted library was loaded: its constructor ran as root"
    _all_on_gpu(proc)  # built privately instead, and used
    assert open(planted, "rb").read() == data and os.stat(planted).st_uid == other_user  # left alone

    path, built = _build(cache)  # the same, seen from one process: one warning naming the file and why
    assert not os.path.exists(marker) and path != planted and not path.startswith(cache)
    said = [ln for ln in built.stderr.splitlines() if planted in ln]
    assert len(said) == 1 and f"of uid {other_user}" in said[0] and "private temporary kernel cache" in said[0], \
        built.stderr


def test_truncated_cached_library_is_rebuilt_and_the_job_succeeds(frames_seq, tmp_path):
    cache = str(tmp_path / "cache")
    path, _ = _build(cache)
    whole = open(path, "rb").read()
    os.truncate(path, len(whole) // 3)
    proc = _job(frames_seq, str(tmp_path / "out"), cache)
    _all_on_gpu(proc)  # before: killed by SIGBUS loading it (exit 135, no message)
    assert open(path, "rb").read() == whole  # built again, in place
    aside = os.path.join(cache, f".{os.path.basename(path)}.bad")
    assert os.path.getsize(aside) == len(whole) // 3  # the damaged one kept aside, not loaded
    with open(path, "r+b") as f:  # changed in place, same size: the proof's hash tells
        f.seek(len(whole) // 2)
        f.write(b"\0" * 64)
    again, proc = _build(cache)
    assert again == path and open(path, "rb").read() == whole
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpumr: warning: ")]
    assert len(said) == 1 and path in said[0] and "does not match its proof" in said[0], proc.stderr


@pytest.mark.parametrize("how", ["another user's", "group-writable", "a symlink"])
def test_a_cache_folder_the_rule_refuses_is_one_warning_and_a_private_cache(shared_tmp, other_user, how):
    cache = os.path.join(shared_tmp, "cache")
    if how == "a symlink":
        os.mkdir(os.path.join(shared_tmp, "real"), 0o700)
        os.symlink(os.path.join(shared_tmp, "real"), cache)
    else:
        os.mkdir(cache)
        os.chmod(cache, 0o775 if how == "group-writable" else 0o755)
        if how == "another user's":
            os.chown(cache, other_user, other_user)
    path, proc = _build(cache)
    assert not path.startswith(cache) and not path.startswith(os.path.join(shared_tmp, "real"))
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpumr: warning: ")]
    why = {"another user's": f"belongs to uid {other_user}", "group-writable": "lets others write in it",
           "a symlink": "it is a symlink"}[how]
    assert len(said) == 1 and cache in said[0] and why in said[0], proc.stderr
    assert not os.listdir(os.path.join(shared_tmp, "real") if how == "a symlink" else cache)


def test_a_fatbin_in_the_cache_without_its_proof_is_not_used(tmp_path, monkeypatch):
    from gpumr.gpu import kernels
    from gpumr.io.outputs import write_file
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(tmp_path / "none"))
    name = f"haar-{kernels._digest('haar')}.fatbin"
    os.makedirs(tmp_path / "cache", mode=0o700)
    (tmp_path / "cache" / name).write_bytes(b"planted")
    if os.path.exists(os.path.join(os.path.dirname(kernels.source_path("haar")), name)):
        pytest.skip("a fatbin ships beside the sources here")
    with warns("has no proof beside it"):
        assert kernels.locate("haar") == (None, "nowhere")
    write_file(str(tmp_path / "cache" / name), b"genuine", kernels._made_by("haar"))
    assert kernels.locate("haar") == (str(tmp_path / "cache" / name), "the per-user cache")
    assert stat.S_ISREG(os.lstat(tmp_path / "cache" / f".{name}.bad").st_mode)


def test_a_fatbin_of_another_user_in_a_shared_cache_is_not_used_even_with_its_proof(shared_tmp, monkeypatch,
                                                                                   other_user):
    from gpumr.gpu import kernels
    from gpumr.io.outputs import write_file
    cache = os.path.join(shared_tmp, "cache")
    os.mkdir(cache)
    os.chmod(cache, 0o1777)
    monkeypatch.setenv(kernels.CACHE_ENV, cache)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, os.path.join(shared_tmp, "none"))
    name = f"haar-{kernels._digest('haar')}.fatbin"
    if os.path.exists(os.path.join(os.path.dirname(kernels.source_path("haar")), name)):
        pytest.skip("a fatbin ships beside the sources here")
    write_file(os.path.join(cache, name), b"planted", kernels._made_by("haar"))  # a proof that vouches for it
    os.chown(os.path.join(cache, name), other_user, other_user)
    assert kernels.locate("haar") == (None, "nowhere")
    assert open(os.path.join(cache, name), "rb").read() == b"planted"  # left alone


def test_a_shipped_kernel_folder_named_through_a_link_is_judged_by_the_folder_it_names(shared_tmp, monkeypatch,
                                                                                      other_user):
    """Hadoop's distributed cache shows ``--dirs DIR#kernels`` as a link in the task's folder: followed once, then
    the rule applies to the folder it names (yours: loaded; another user's: refused, one warning)."""
    from gpumr.gpu import kernels
    name = f"haar-{kernels._digest('haar')}.fatbin"
    if os.path.exists(os.path.join(os.path.dirname(kernels.source_path("haar")), name)):
        pytest.skip("a fatbin ships beside the sources here")
    monkeypatch.setenv(kernels.CACHE_ENV, os.path.join(shared_tmp, "cache"))
    for owner in ("mine", "theirs"):
        folder = os.path.join(shared_tmp, owner)
        os.mkdir(folder, 0o755)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"fatbin")
        os.symlink(folder, os.path.join(shared_tmp, f"link-{owner}"))
    os.chown(os.path.join(shared_tmp, "theirs"), other_user, other_user)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, os.path.join(shared_tmp, "link-mine"))
    assert kernels.locate("haar") == (os.path.join(shared_tmp, "mine", name), "$GPUMR_KERNEL_DIR")  # (not the link)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, os.path.join(shared_tmp, "link-theirs"))
    with warns(f"{shared_tmp}/theirs: refusing it for kernels to load: it belongs to uid"):
        assert kernels.locate("haar") == (None, "nowhere")


def test_a_shipped_kernel_folder_is_opened_once_and_a_chain_of_links_is_refused(shared_tmp, monkeypatch, other_user):
    """The folder named through a link was checked, then every fatbin opened through the link again: repointing it
    after the check served another user's fatbin. Now the folder is opened once and its files read relative to it;
    and a link to a link (the docs say "followed once") is refused."""
    from gpumr.gpu import kernels
    name = f"haar-{kernels._digest('haar')}.fatbin"
    if os.path.exists(os.path.join(os.path.dirname(kernels.source_path("haar")), name)):
        pytest.skip("a fatbin ships beside the sources here")
    monkeypatch.setenv(kernels.CACHE_ENV, os.path.join(shared_tmp, "cache"))
    monkeypatch.setattr(kernels, "_FOLDERS", {})
    for owner, data in (("mine", b"my fatbin"), ("theirs", b"their fatbin")):
        folder = os.path.join(shared_tmp, owner)
        os.mkdir(folder, 0o755)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    theirs = os.path.join(shared_tmp, "theirs")
    os.chown(theirs, other_user, other_user)
    os.chown(os.path.join(theirs, name), other_user, other_user)
    link = os.path.join(shared_tmp, "kernels")
    os.symlink(os.path.join(shared_tmp, "mine"), link)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, link)
    assert kernels.image("haar") == b"my fatbin"  # judged and opened: mine
    os.unlink(link)
    os.symlink(theirs, link)  # repointed at another user's folder after the check
    assert kernels.image("haar") == b"my fatbin"  # still the folder that was judged
    # A chain of two links is refused, with one warning, and nothing is read through it.
    monkeypatch.setattr(kernels, "_FOLDERS", {})
    chain = os.path.join(shared_tmp, "chain")
    os.symlink(link, chain)
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, chain)
    with warns(f"{link}: a link on the way"):
        assert kernels.locate("haar") == (None, "nowhere")


def _fatbins(shared_tmp, other_user, name):
    """``mine`` and ``theirs`` folders in ``shared_tmp``, each holding a fatbin named ``name`` (theirs: the second
    user's folder and file); a sticky folder ``shared`` (1777, as /tmp) where anyone may make a link."""
    for owner, data in (("mine", b"my fatbin"), ("theirs", b"their fatbin")):
        folder = os.path.join(shared_tmp, owner)
        os.mkdir(folder, 0o755)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    theirs = os.path.join(shared_tmp, "theirs")
    os.chown(theirs, other_user, other_user)
    os.chown(os.path.join(theirs, name), other_user, other_user)
    shared = os.path.join(shared_tmp, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    return os.path.join(shared_tmp, "mine"), theirs, shared


def test_the_kernel_folder_is_named_by_one_link_of_yours_and_nothing_is_loaded_through_it(shared_tmp, monkeypatch,
                                                                                         other_user):
    """Issue 64, class 9. Before: a link of another user in a sticky shared folder was followed (it chose which folder
    the kernels came from); ``locate()`` and ``fatbin()`` gave a path through the link, which, repointed after the
    check, served another user's fatbin; a link whose target ends ``l2/.`` or passes through another link was
    followed (two links, where the docs say one)."""
    from gpumr.gpu import kernels
    name = f"haar-{kernels._digest('haar')}.fatbin"
    if os.path.exists(os.path.join(os.path.dirname(kernels.source_path("haar")), name)):
        pytest.skip("a fatbin ships beside the sources here")
    monkeypatch.setenv(kernels.CACHE_ENV, os.path.join(shared_tmp, "cache"))
    mine, theirs, shared = _fatbins(shared_tmp, other_user, name)

    def use(path):
        monkeypatch.setattr(kernels, "_FOLDERS", {})
        monkeypatch.setattr("gpumr.log._SAID", set())
        monkeypatch.setenv(kernels.KERNEL_DIR_ENV, path)

    # A link of another user, in the sticky folder, to a folder of mine: refused, and said once.
    theirs_link = os.path.join(shared, "kernels-theirs")
    subprocess.run(["ln", "-s", mine, theirs_link], user=other_user, group=other_user, check=True)
    assert os.lstat(theirs_link).st_uid == other_user
    use(theirs_link)
    with warns(f"{theirs_link}: refusing it for kernels to load: a link of uid {other_user}, "
                                         "not yours"):
        assert kernels.locate("haar") == (None, "nowhere")

    # A link of mine: followed once; what locate() and fatbin() give is not through it, and still the folder that was
    # judged once the link is repointed at another user's folder.
    link = os.path.join(shared, "kernels")
    os.symlink(mine, link)
    use(link)
    path, place = kernels.locate("haar")
    assert (path, place) == (os.path.join(mine, name), "$GPUMR_KERNEL_DIR")
    loadable = kernels.fatbin("haar")
    assert not loadable.startswith(link) and open(loadable, "rb").read() == b"my fatbin"
    os.unlink(link)
    os.symlink(theirs, link)  # repointed after the check
    assert open(kernels.fatbin("haar"), "rb").read() == b"my fatbin"
    assert kernels.image("haar") == b"my fatbin" and kernels.locate("haar")[0] == os.path.join(mine, name)

    # Two links, however written: refused, one warning, nothing read.
    os.symlink(mine, os.path.join(shared, "l2"))
    os.mkdir(os.path.join(mine, "sub"), 0o755)
    os.symlink(os.path.join(mine, "sub"), os.path.join(shared_tmp, "mine-sub"))
    for target, why in (("l2/.", "l2: a link on the way"), ("l2/", "l2: a link on the way"),
                        ("l2", "l2: a link on the way"), (os.path.join(shared_tmp, "mine-sub", ".."),
                                                          "mine-sub: a link on the way")):
        chain = os.path.join(shared, "chain")
        if os.path.lexists(chain):
            os.unlink(chain)
        os.symlink(target, chain)
        use(chain)
        with warns(f"{chain}: refusing it for kernels to load: .*{why}"):
            assert kernels.locate("haar") == (None, "nowhere")
