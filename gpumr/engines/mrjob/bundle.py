"""What a plain cluster's tasks need, as one archive for Hadoop's distributed cache.

How to run it: :doc:`/how-to/hadoop`."""

import configparser
import fnmatch
import importlib.metadata
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

from ...errors import GpumrError, printable
from ...io.inputs import READ_FLAGS
from ...io.outputs import FileOutput

#: The archive's file name, and the folder Hadoop unpacks it to in each task.
ARCHIVE = "gpumr-python.zip"
NAME = "gpumr-python"
#: Distributions the map tasks import (both workloads, CPU path), pinned to the versions installed here.
#: scikit-image (built-in sample frames, the GPU self-check) and tqdm (the launcher's display) stay out.
RUNTIME = ("numpy", "opencv-python-headless", "Pillow", "nvidia-ml-py", "mrjob", "PyYAML")
#: What the CT job's tasks add (numba's CPU backprojector; llvmlite alone is ~170 MB unpacked).
CT_RUNTIME = ("numba", "llvmlite", "tifffile")
#: manylinux tags accepted for the nodes (glibc 2.17 and later, which every supported distribution has).
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
#: The top-level packages of gpumr (jobs, cuda and conf are installed inside gpumr).
PACKAGES = ("gpumr", "seqfile")


def mrjob_options(archive):
    """The mrjob options that ship ``archive`` and make the tasks import from it."""
    return ["--archives", f"{archive}#{NAME}", "--cmdenv", f"PYTHONPATH={NAME}", "--python-bin", "python3"]


def requirements(names=RUNTIME):
    """``name==version`` of each runtime distribution as installed here."""
    reqs = []
    for name in names:
        try:
            reqs.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise GpumrError(f"{name} is not installed here: the bundle pins what this gpumr runs with") from None
    return reqs


def _pip_install(target, reqs, python_version, platforms):
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
           "--no-deps", "--only-binary", ":all:", "--target", target, "--implementation", "cp",
           "--python-version", python_version]
    for p in platforms:
        cmd += ["--platform", p]
    proc = subprocess.run(cmd + list(reqs), capture_output=True, text=True)
    if proc.returncode:
        raise GpumrError(f"pip could not fetch the wheels for Python {python_version} "
                         f"({', '.join(platforms)}): {proc.stderr.strip()[-1500:]}")


def _setup_cfg(root):
    """``root/setup.cfg`` read with option names kept as written (package names)."""
    cfg = configparser.ConfigParser()
    cfg.optionxform = str
    cfg.read(os.path.join(root, "setup.cfg"))
    return cfg


def _source_root():
    """The source tree gpumr runs from (a folder whose setup.cfg declares gpumr), or None when installed."""
    import gpumr
    root = os.path.dirname(os.path.dirname(os.path.abspath(gpumr.__file__)))
    return root if _setup_cfg(root).get("metadata", "name", fallback=None) == "gpumr" else None


def _found_packages(root, package_dir):
    """The packages setup.py installs from ``root``: every folder with an ``__init__.py`` under the top-level
    packages (:data:`PACKAGES`), then those ``package_dir`` maps into them (``gpumr.jobs = jobs``)."""
    found = []
    for top in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            if "__init__.py" in files:
                found.append(os.path.relpath(folder, root).replace(os.sep, "."))
    return found + [name for name in package_dir if name and name not in found]


def _declared_in_tree(root):
    """``(name in the bundle, path)`` of what ``root/setup.cfg`` declares: packages' modules and package data."""
    cfg = _setup_cfg(root)
    package_dir = {k.strip(): v.strip() for k, eq, v in
                   (ln.partition("=") for ln in cfg.get("options", "package_dir", fallback="").splitlines()) if eq}
    data = {}
    if cfg.has_section("options.package_data"):
        data = {k: [p.strip() for p in v.split(",") if p.strip()] for k, v in cfg.items("options.package_data")}
    packages = cfg.get("options", "packages", fallback="").split() or _found_packages(root, package_dir)
    out = []
    for package in packages:
        parts = package.split(".")
        for i in range(len(parts), -1, -1):  # the longest mapped prefix ("" maps the root)
            prefix = ".".join(parts[:i])
            if prefix in package_dir or i == 0:
                folder = os.path.join(root, package_dir.get(prefix, ""), *parts[i:])
                break
        patterns = data.get(package, []) + data.get("*", []) + data.get("", [])
        for p in patterns:
            if "/" in p:
                raise GpumrError(f"setup.cfg: package_data pattern {p!r} of {package} names a folder; the bundle "
                                 "takes only files directly in a package folder")
        for e in sorted(os.scandir(folder), key=lambda e: e.name):
            if e.name.startswith(".") or not e.is_file(follow_symlinks=False):
                continue  # hidden files, links, folders (a subpackage is declared on its own)
            if e.name.endswith(".py") or any(fnmatch.fnmatchcase(e.name, p) for p in patterns):
                out.append(("/".join(parts + [e.name]), e.path))
    return out


def _declared_installed():
    """``(name in the bundle, path)`` of the installed gpumr's own files, as its RECORD lists them."""
    try:
        dist = importlib.metadata.distribution("gpumr")
    except importlib.metadata.PackageNotFoundError:
        raise GpumrError("gpumr is neither installed nor run from its source tree: the bundle cannot tell its "
                         "own files") from None
    out = []
    for f in dist.files or ():
        parts = f.parts
        if parts[0] in PACKAGES and "__pycache__" not in parts and not any(p.startswith(".") for p in parts):
            path = str(f.locate())
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append(("/".join(parts), path))
    return sorted(out)


def declared_files(root=None):
    """gpumr's own files for the bundle: ``(name in the bundle, path)``, sorted."""
    root = root or _source_root()
    return sorted(_declared_in_tree(root)) if root else _declared_installed()


def copy_declared(target, root=None):
    """Copy :func:`declared_files` into folder ``target`` (as they lie in the bundle), never through a link."""
    for name, path in declared_files(root):
        dest = os.path.join(target, *name.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            src = open(os.open(path, READ_FLAGS), "rb")
        except OSError as exc:
            raise GpumrError(f"{printable(path)}: cannot read: {exc.strerror}") from None
        with src, open(dest, "xb") as out:
            shutil.copyfileobj(src, out)


def write_archive(site, f):
    """Zip every regular file under folder ``site`` into the open file ``f``; links are never followed."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for folder, dirs, files in os.walk(site):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d)))
            for name in sorted(files):
                full = os.path.join(folder, name)
                if stat.S_ISREG(os.lstat(full).st_mode):
                    z.write(full, os.path.relpath(full, site))


#: The tag of gpumr's wheel: pure Python, any platform.
WHEEL_TAG = "py3-none-any"


def wheel_name():
    """The file name of this gpumr's wheel (``gpumr-0.1.0-py3-none-any.whl``)."""
    from ... import __version__
    return f"gpumr-{__version__}-{WHEEL_TAG}.whl"


def build_wheel(folder):
    """Write a wheel of the gpumr that runs here into ``folder`` (private to the job); its path.

    Examples
    --------
    >>> import tempfile, zipfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     names = zipfile.ZipFile(build_wheel(d)).namelist()
    >>> "gpumr/__init__.py" in names and names[-1].endswith(".dist-info/RECORD")
    True
    """
    import base64
    import hashlib

    from ... import __version__
    try:
        dist = importlib.metadata.distribution("gpumr")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    metadata = dist.read_text("METADATA") if dist is not None else None
    if not metadata:
        raise GpumrError("gpumr's metadata is not installed here, so no wheel of it can be made for the nodes: "
                         "write a config naming yours with gpumr conf mrjob.emr.conf -o emr.conf --package WHEEL")
    info = f"gpumr-{__version__}.dist-info"
    members = []
    for name, path in declared_files():
        with open(os.open(path, READ_FLAGS), "rb") as f:
            members.append((name, f.read()))
    members += [(f"{info}/METADATA", metadata.encode("utf-8")),
                (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: gpumr {__version__}\nRoot-Is-Purelib: true\n"
                                  f"Tag: {WHEEL_TAG}\n".encode()),
                (f"{info}/entry_points.txt", (dist.read_text("entry_points.txt") or "").encode("utf-8"))]
    record = []

    def add(z, name, data):
        member = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
        member.compress_type, member.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
        z.writestr(member, data)
    path = os.path.join(folder, wheel_name())
    with zipfile.ZipFile(path, "x") as z:
        for name, data in members:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
            add(z, name, data)
        record.append(f"{info}/RECORD,,")
        add(z, f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def build(out_dir, python_version=None, platforms=PLATFORMS, kernel_dir=None, ct=True):
    """Write ``out_dir/gpumr-python.zip`` for tasks on the nodes' Python, under gpumr's output rule.

    Parameters
    ----------
    out_dir : str
        Folder for the archive (made if missing).
    python_version : str, optional
        The nodes' Python as ``"3.11"`` (default: this interpreter's).
    platforms : tuple of str
        Wheel platform tags the nodes accept.
    kernel_dir : str, optional
        A folder of fatbins (``gpumr build-kernels -o DIR``) put beside the kernel sources in the bundle, where tasks
        look for them.
    ct : bool
        Include what the CT job needs (numba); False makes a bundle for the face job alone, a third of the size.

    Returns
    -------
    (str, dict)
        The archive's path, and what went in: ``python``, ``requirements``, ``fatbins``, ``bytes``."""
    python_version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    major, _, minor = python_version.partition(".")
    if not (major.isdigit() and minor.isdigit()) or (int(major), int(minor)) < (3, 9):
        raise GpumrError(f"--python-version {python_version}: gpumr needs Python 3.9 or later, given as e.g. 3.11")
    reqs = requirements(RUNTIME + (CT_RUNTIME if ct else ()))
    if (int(major), int(minor)) >= (3, 12):
        # mrjob 0.7.4 imports distutils, which Python 3.12 dropped; setuptools brings it back.
        reqs.append(f"setuptools=={importlib.metadata.version('setuptools')}")
    output = FileOutput(os.path.join(out_dir, ARCHIVE), "gpumr bundle")  # checked before any download
    with tempfile.TemporaryDirectory(prefix="gpumr-bundle-") as tmp:
        site = os.path.join(tmp, NAME)
        _pip_install(site, reqs, python_version, platforms)
        copy_declared(site)
        fatbins = []
        if kernel_dir:
            names = sorted(n for n in os.listdir(kernel_dir) if n.endswith(".fatbin") and not n.startswith(".")
                           and stat.S_ISREG(os.lstat(os.path.join(kernel_dir, n)).st_mode))
            if not names:
                raise GpumrError(f"{kernel_dir}: no .fatbin files (make them with: gpumr build-kernels -o {kernel_dir})")
            for n in names:
                shutil.copy(os.path.join(kernel_dir, n), os.path.join(site, "gpumr", "cuda", n))
            fatbins = names
        with output as f:
            write_archive(site, f)
    path = output.path
    return path, {"python": python_version, "requirements": reqs, "fatbins": fatbins, "bytes": os.path.getsize(path)}
