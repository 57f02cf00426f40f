"""Check that the built site renders its maths with no network: ``python docs/check_offline.py``.

Serves ``docs/_build/html`` on 127.0.0.1, opens pages with formulas in headless Chromium whose
resolver maps every host but 127.0.0.1 to "not found" (so a CDN cannot be reached even where a
network exists), and checks that MathJax typeset every formula: each ``math`` element of the
page holds an ``mjx-container`` once the page's scripts have run. Exit status 1 and one line per
page that fails; exit status 2 when Chromium is not installed (``apt-get install chromium``).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Pages with display and inline maths, from the hand-written cards and the generated API pages.
PAGES = (
    "methods/ema.html",
    "api/generated/functional.mixup_batch.html",
    "api/generated/functional.ema_smoothing.html",
)
_MATH = re.compile(r'<(?:span|div) class="math notranslate nohighlight">(.*?)</(?:span|div)>', re.S)


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary on this machine, if any."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def rendered_dom(browser: str, url: str) -> str:
    """The page's DOM after its scripts ran, in headless Chromium with only 127.0.0.1 reachable."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--virtual-time-budget=15000",
            "--dump-dom",
            url,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def untypeset_formulas(dom: str) -> list[str]:
    """The TeX of every formula of ``dom`` that MathJax did not turn into an ``mjx-container``."""
    return [
        m.group(1).strip()[:60] for m in _MATH.finditer(dom) if "<mjx-container" not in m.group(1)
    ]


def check(site: Path, browser: str, pages: tuple[str, ...] = PAGES) -> list[str]:
    """One line per page of ``pages`` under ``site`` whose formulas did not all render."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            return [_check_page(browser, server.server_address[1], page) for page in pages]
        finally:
            server.shutdown()


def _check_page(browser: str, port: int, page: str) -> str:
    dom = rendered_dom(browser, f"http://127.0.0.1:{port}/{page}")
    n_formulas = len(_MATH.findall(dom))
    if n_formulas == 0:
        return f"{page}: no formula found (is this the right page? did it load?)"
    missing = untypeset_formulas(dom)
    if missing:
        return f"{page}: {len(missing)} of {n_formulas} formulas not rendered, e.g. {missing[0]!r}"
    return ""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "docs/_build/html")
    browser = find_chromium()
    if browser is None:
        print("check_offline: no Chromium on this machine (apt-get install chromium)")
        return 2
    if not (site / "index.html").is_file():
        print(f"check_offline: no built site at {site} (run `make docs` first)")
        return 1
    problems = [p for p in check(site, browser) if p]
    for problem in problems:
        print(f"not rendered offline: {problem}")
    print(f"check_offline: {len(PAGES)} pages, {len(problems)} with maths not rendered offline")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
