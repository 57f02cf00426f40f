"""Find broken internal links in the built site: ``python docs/check_links.py docs/_build/html``.

Every ``href`` and ``src`` of every HTML page that is not an external address must name a file
of the build, and its ``#fragment``, if any, an ``id`` (or ``name``) in that file. Text that
still reads like a MyST role (``{func}`name```, ``{bench}`...```) was not parsed (in a table
cell a ``|`` splits it, for instance) and is reported too. External
addresses (``http:``, ``https:``, ``mailto:``...) are not fetched: nothing here needs the
network. Exit status 1 and one line per broken link when there are any.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

_UNPARSED_ROLE = re.compile(r"\{[a-z:]+\}`")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()
        self.unparsed_roles: list[str] = []
        self._literal = 0  # inside <code> or <pre>: roles written on purpose, as examples

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "pre"):
            self._literal = max(0, self._literal - 1)

    def handle_data(self, data: str) -> None:
        if self._literal:
            return
        self.unparsed_roles += [data.strip()[:80] for _ in _UNPARSED_ROLE.finditer(data)]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("code", "pre"):
            self._literal += 1
        for key, value in attrs:
            if value is None:
                continue
            if key in ("id", "name"):
                self.anchors.add(value)
            elif key in ("href", "src") and not (tag == "link" and "://" in value):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(root: Path) -> list[str]:
    """``'page: link (why)'`` for every internal link of the site under ``root`` that is broken."""
    root = root.resolve()
    pages = {path: _parse(path) for path in sorted(root.rglob("*.html"))}
    problems = []
    for path, page in pages.items():
        where = path.relative_to(root)
        if "_modules" not in where.parts:  # source listings may hold any text
            problems += [f"{where}: unparsed role in {text!r}" for text in page.unparsed_roles]
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external, or mailto:, data:, javascript:
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(root)}: {link}"
            if not target.is_file():
                problems.append(f"{where} (no file {target})")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html":
                anchors = pages[target].anchors if target in pages else _parse(target).anchors
                if fragment not in anchors:
                    problems.append(f"{where} (no anchor #{fragment} in {target.name})")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "docs/_build/html")
    if not (root / "index.html").is_file():
        print(f"check_links: no built site at {root} (run sphinx-build first)")
        return 1
    problems = broken_links(root)
    for problem in problems:
        print(f"broken: {problem}")
    n_pages = len(list(root.rglob("*.html")))
    print(f"check_links: {n_pages} pages, {len(problems)} broken internal links or unparsed roles")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
