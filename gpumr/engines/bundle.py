"""What a plain cluster's tasks need, as one archive for Hadoop's distributed cache.

Many clusters have Python 3.9+ on their nodes and nothing else, and their
users cannot install packages there. :func:`build` makes ``gpumr-python.zip``:
gpumr itself (the packages this interpreter has installed, with its jobs,
kernel sources and configs), the libraries its map tasks import, as binary
wheels for the nodes' Python version and platform (pip's ``--target`` with
``--python-version``/``--platform``, so the bundle can be made on a machine
with another Python), and optionally fatbins of the CUDA kernels. OpenCV's
wheel carries its Haar cascades (``cv2.data``).

mrjob ships it and puts it on the tasks' import path::

    --archives DIR/gpumr-python.zip#gpumr-python --cmdenv PYTHONPATH=gpumr-python --python-bin python3

Hadoop unpacks an archive into a folder of the task's working directory
(``gpumr-python``); a relative ``PYTHONPATH`` entry is taken from that
directory, where mrjob's wrapper starts every task. A zip on ``PYTHONPATH``
itself would not do: compiled extension modules (numpy, OpenCV) cannot be
imported from inside a zip.
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from seqfile.atomic import atomic_path

from ..errors import GpumrError

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
#: The packages of gpumr copied from this installation (jobs, cuda and conf live inside gpumr).
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


def _copy_gpumr(target):
    import gpumr
    import seqfile
    for mod in (gpumr, seqfile):
        src = os.path.dirname(mod.__file__)
        shutil.copytree(src, os.path.join(target, mod.__name__), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build(out_dir, python_version=None, platforms=PLATFORMS, kernel_dir=None, ct=True):
    """Write ``out_dir/gpumr-python.zip`` (atomically) for tasks on the nodes' Python.

    Parameters
    ----------
    out_dir : str
        Folder for the archive (made if missing).
    python_version : str, optional
        The nodes' Python as ``"3.11"`` (default: this interpreter's).
    platforms : tuple of str
        Wheel platform tags the nodes accept.
    kernel_dir : str, optional
        A folder of fatbins (``gpumr build-kernels -o DIR``) put beside the
        kernel sources in the bundle, where tasks look for them.
    ct : bool
        Include what the CT job needs (numba); False makes a bundle for the
        face job alone, a third of the size.

    Returns
    -------
    (str, dict)
        The archive's path, and what went in: ``python``, ``requirements``, ``fatbins``, ``bytes``.
    """
    python_version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    major, _, minor = python_version.partition(".")
    if not (major.isdigit() and minor.isdigit()) or (int(major), int(minor)) < (3, 9):
        raise GpumrError(f"--python-version {python_version}: gpumr needs Python 3.9 or later, given as e.g. 3.11")
    reqs = requirements(RUNTIME + (CT_RUNTIME if ct else ()))
    if (int(major), int(minor)) >= (3, 12):
        # mrjob 0.7.4 imports distutils, which Python 3.12 dropped; setuptools brings it back.
        reqs.append(f"setuptools=={importlib.metadata.version('setuptools')}")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpumr-bundle-") as tmp:
        site = os.path.join(tmp, NAME)
        _pip_install(site, reqs, python_version, platforms)
        _copy_gpumr(site)
        fatbins = []
        if kernel_dir:
            names = sorted(n for n in os.listdir(kernel_dir) if n.endswith(".fatbin"))
            if not names:
                raise GpumrError(f"{kernel_dir}: no .fatbin files (make them with: gpumr build-kernels -o {kernel_dir})")
            for n in names:
                shutil.copy(os.path.join(kernel_dir, n), os.path.join(site, "gpumr", "cuda", n))
            fatbins = names
        path = os.path.join(out_dir, ARCHIVE)
        with atomic_path(path) as part:
            with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
                for folder, dirs, files in os.walk(site):
                    dirs.sort()
                    for f in sorted(files):
                        full = os.path.join(folder, f)
                        z.write(full, os.path.relpath(full, site))
    return path, {"python": python_version, "requirements": reqs, "fatbins": fatbins, "bytes": os.path.getsize(path)}
