"""Build script; the project's metadata lives in setup.cfg.

The packages are found here rather than listed there, so that a new one (a
workload's folder) is installed without naming it anywhere:
``seqfile``, ``gpumr`` and every package under it, and the three folders
installed under ``gpumr`` (``package_dir`` in setup.cfg).
"""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["seqfile", "gpumr", "gpumr.*"]) + ["gpumr.jobs", "gpumr.cuda", "gpumr.conf"])
