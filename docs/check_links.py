"""Find broken internal links and remote assets in the built site.

Run as ``python docs/check_links.py docs/_build/html``.

Every ``href`` and ``src`` of every HTML page that is not an external address must name a file
of the build, and its ``#fragment``, if any, an ``id`` (or ``name``) in that file. Text that
still reads like a MyST role (``{func}`name```, ``{bench}`...```) was not parsed (in a table
cell a ``|`` splits it, for instance) and is reported too. External
addresses (``http:``, ``https:``, ``mailto:``...) are not fetched: nothing here needs the
network. Links *to* other sites are fine; an asset a page *loads* from another host is not: a
``<script src>``, a style sheet, font or icon ``<link>``, an ``<img>``/``<iframe>``/media
``src``, or a ``url(...)``/``@import`` in a built ``.css`` file that names a remote address is
reported, since the site must work offline (air-gapped clusters). Exit status 1 and one line per
problem when there are any.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

_UNPARSED_ROLE = re.compile(r"\{[a-z:]+\}`")
# Tags whose ``src`` the browser loads with the page.
_LOADING_TAGS = frozenset({"script", "img", "iframe", "source", "video", "audio", "embed", "track"})
# ``<link rel=...>`` kinds that load something (a plain hyperlink-like rel does not).
_LOADING_RELS = frozenset({"stylesheet", "preload", "prefetch", "modulepreload", "icon", "font"})
_CSS_REMOTE = re.compile(r"(?:url\(\s*['\"]?|@import\s+['\"])\s*((?:https?:)?//[^'\")\s]+)", re.I)


def _is_remote(address: str) -> bool:
    return bool(urlsplit(address).netloc) or address.startswith("//")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()
        self.unparsed_roles: list[str] = []
        self.remote_assets: list[str] = []
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
        self.remote_assets += _remote_assets(tag, dict(attrs))
        for key, value in attrs:
            if value is None:
                continue
            if key in ("id", "name"):
                self.anchors.add(value)
            elif key in ("href", "src") and not (tag == "link" and "://" in value):
                self.links.append(value)


def _remote_assets(tag: str, attrs: dict[str, str | None]) -> list[str]:
    """The remote addresses a ``<tag attrs>`` would make the browser load (usually none)."""
    found = []
    if tag in _LOADING_TAGS and attrs.get("src") and _is_remote(attrs["src"] or ""):
        found.append(f"<{tag} src={attrs['src']}>")
    rels = set((attrs.get("rel") or "").lower().split())
    href = attrs.get("href") or ""
    if tag == "link" and rels & _LOADING_RELS and _is_remote(href):
        found.append(f"<link rel={attrs.get('rel')} href={href}>")
    return found


def remote_css_assets(root: Path) -> list[str]:
    """``'file.css: address'`` for every remote ``url(...)`` or ``@import`` in the built CSS."""
    return [
        f"{path.relative_to(root)}: {match.group(1)}"
        for path in sorted(root.rglob("*.css"))
        for match in _CSS_REMOTE.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]


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
        problems += [
            f"{where}: remote asset {asset} (the site must work offline)"
            for asset in page.remote_assets
        ]
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
    problems = broken_links(root) + [
        f"{where} (remote asset in a style sheet: the site must work offline)"
        for where in remote_css_assets(root)
    ]
    for problem in problems:
        print(f"broken: {problem}")
    n_pages = len(list(root.rglob("*.html")))
    print(
        f"check_links: {n_pages} pages, {len(problems)} broken internal links, unparsed roles or remote assets"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
