"""Build script; the project's metadata lives in setup.cfg."""

from setuptools import setup

setup()
