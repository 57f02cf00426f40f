"""Fail the docs build when a public name has no page in the API reference.

Every name in ``surgery.__all__``, ``functional.__all__`` and ``augment.__all__`` must be listed
in an ``autosummary`` directive of ``docs/api/<package>.md`` (the pages group them by kind).
A missing one is a Sphinx warning, hence an error under ``sphinx-build -W``;
``tests/test_docs_examples.py`` runs the same check without building.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

PACKAGES = ("surgery", "functional", "augment")

_ENTRY = re.compile(r"^ {3}(\w+)\s*$")


def listed_names(page: Path) -> list[str]:
    """The entries of the ``autosummary`` directives of one page, in order."""
    names: list[str] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(".. autosummary::"):
            inside = True
            continue
        if inside:
            if line.startswith("   :") or not line.strip():
                continue
            match = _ENTRY.match(line)
            if match is None:
                inside = False
            else:
                names.append(match.group(1))
    return names


def coverage_problems(docs: Path) -> list[str]:
    """One sentence per public name without an API page, or listed twice, or not public."""
    problems = []
    for package in PACKAGES:
        public = set(importlib.import_module(package).__all__)
        page = docs / "api" / f"{package}.md"
        listed = listed_names(page) if page.exists() else []
        for name in sorted(public - set(listed)):
            problems.append(f"{package}.{name} is public but has no entry in {page.name}")
        for name in sorted(set(listed) - public):
            problems.append(f"{page.name} lists {name}, which is not in {package}.__all__")
        for name in sorted({n for n in listed if listed.count(n) > 1}):
            problems.append(f"{page.name} lists {name} more than once")
    return problems


def _check(app: Any) -> None:
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for problem in coverage_problems(Path(app.srcdir)):
        log.warning(f"API reference: {problem}")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
