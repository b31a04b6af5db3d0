"""Sphinx configuration of gpumr's documentation (``make docs``; tests/test_docs.py builds it with -W)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The checkout first, so that the pages show the docstrings and parsers as they are in the tree.
sys.path[:0] = [os.path.join(HERE, "_ext"), os.path.dirname(HERE)]

import gpumr  # noqa: E402 (after the sys.path line above)

project = "gpumr"
author = "the gpumr authors"
copyright = "2026, the gpumr authors"
release = version = gpumr.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "gpumr_argparse",
    "gpumr_names",  # the built-in workloads and the engines, named from the code's tables (|workloads|, |engines|)
    "gpumr_figures",  # the pictures, made by gpumr's commands at build time (docs/_ext/gpumr_figures.py)
    "gpumr_api",  # the API reference: a page per module, from the package tree (docs/_ext/gpumr_api.py)
]

# numpydoc-style docstrings (Parameters / Returns / Raises) through napoleon.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_inherit_docstrings = False  # mrjob's own docstrings name labels of mrjob's documentation
# Optional GPU libraries are not needed to read the API.
autodoc_mock_imports = ["pycuda", "cupy", "pyspark"]

# The command reference (docs/_ext/gpumr_argparse.py).
gpumr_parser = "gpumr.cli:build_parser"
gpumr_reference_page = "reference/cli/index"

exclude_patterns = ["_build", "_generated"]
# Quotes and ellipses only: "--" in help texts and descriptions stays two hyphens, as users type it.
smartquotes_action = "qe"
# A name defined in two modules (a package re-exporting its submodule's class) is resolved to the first:
# say so no more than nitpicky mode would.
suppress_warnings = ["ref.python"]
html_theme = "furo"
html_title = f"gpumr {release}"
html_static_path = []
# Pages are plain files that open from disk (file://) as well as from a server.
html_copy_source = False
