"""Sphinx configuration of the torch-speedups documentation (`make docs`).

The site is MyST markdown. The API reference is generated from the docstrings (autosummary);
the gallery's images are drawn at build time from scikit-learn's sample photos by
`docs/_ext/gallery.py`; `docs/_ext/api_coverage.py` fails the build when a public name has
no API page. Nothing here reaches the network, and neither does the built site: maths is
rendered by the MathJax copy that the ``sphinx-mathjax-offline`` package ships (installed with
the ``docs`` extra and copied into ``_static/mathjax``), not by a CDN, and
``docs/check_links.py`` fails the build on any script, style sheet or font that a page would load
from another host.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "torch-speedups"
author = "torch-speedups contributors"
copyright = "2026, torch-speedups contributors"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    # After sphinx.ext.mathjax: points mathjax_path at the local copy (offline, air-gapped).
    "sphinx-mathjax-offline",
    "sphinx_copybutton",
    "gallery",
    "api_coverage",
    "docstrings",
    "bench",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "**/_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# MyST: ```python fences are run by tests/test_docs_examples.py; {math} and $...$ for maths.
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 4

# API reference: one generated page per public name (docs/api/generated/, git-ignored).
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_custom_sections = ["Shape"]
# The docstrings name torch, PIL and transformers types that this site does not document;
# without intersphinx (it would need the network) those references cannot resolve.
nitpicky = False

html_theme = "furo"
html_title = "torch-speedups"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
copybutton_prompt_text = r">>> |\.\.\. "
copybutton_prompt_is_regexp = True
