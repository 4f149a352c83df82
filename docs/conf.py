"""Sphinx configuration of mathpy's documentation site: the API reference from the docstrings, the guides, the
architecture and the measured benchmarks.

Build (from the repository root; needs ``pip install -e ".[test]"`` or ``.[docs]``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

``tests/test_docs.py`` runs the same build with warnings as errors.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # document this checkout's mathpy, installed or not

import mathpy  # noqa: E402

project = "mathpy"
author = "the mathpy team"
copyright = "2026, the mathpy team"
release = version = mathpy.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "api/generated/*.md"]
templates_path = ["_templates"]

# The API pages are generated from the docstrings at every build (docs/api/generated is not stored).
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "none"          # the docstrings say the types, NumPy-style
autodoc_member_order = "bysource"

# numpydoc renders the Parameters / Returns / Raises sections; class members get their own autosummary pages.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# Links into the peers' references need the network; offline builds (CI) simply leave them as text.
intersphinx_mapping = {}

html_theme = "alabaster"
html_title = f"mathpy {version}"
html_static_path = []
