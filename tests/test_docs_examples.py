"""Every ```python block of README.md and docs/**/*.md runs, and the docs' build checks work.

Each file's ```python blocks run in order in one namespace, in a temporary working directory;
an exception fails the file's test with the block's own line numbers in the traceback. Blocks
fenced ```{code-block} python, ```bash or plain ``` are shown, not run (multi-process launches,
shell commands). The docstring examples run separately, through pytest's --doctest-modules.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_SKIP_DIRS = {"_build", "generated", "_generated"}

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown text: (line number of their first line, code)."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        info = opening.group("info").strip()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and close.match(lines[j]) is None:
            j += 1
        if info.split(" ")[0] in ("python", "py"):
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[i + 1 : j]
            ]
            blocks.append((i + 2, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for path in sorted(DOCS.rglob("*.md")):
        if not _SKIP_DIRS.intersection(path.relative_to(DOCS).parts):
            files.append(path)
    return files


def _with_code() -> list[Path]:
    return [path for path in markdown_files() if python_blocks(path.read_text(encoding="utf-8"))]


def run_blocks(path: Path, text: str) -> dict[str, object]:
    """Run a file's blocks in order in one namespace; returns the namespace."""
    namespace: dict[str, object] = {"__name__": "__docs_example__"}
    for first_line, code in python_blocks(text):
        # padding keeps the markdown file's line numbers in tracebacks
        exec(compile("\n" * (first_line - 1) + code, str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("path", _with_code(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_blocks(path, path.read_text(encoding="utf-8"))


def test_only_python_fences_run() -> None:
    text = (
        "intro\n"
        "```python\nx = 1\n```\n"
        "```{code-block} python\nraise SystemExit\n```\n"
        "```bash\nexit 1\n```\n"
        "```\nplain\n```\n"
        "- a list item\n\n  ```python\n  x += 1\n  ```\n"
        "````md\n```python\nnot run: inside another fence\n```\n````\n"
    )
    blocks = python_blocks(text)
    assert [line for line, _ in blocks] == [3, 17]
    assert run_blocks(Path("example.md"), text)["x"] == 2


def test_a_failing_block_names_its_file_and_line() -> None:
    text = "# title\n\n```python\nx = 1\nraise ValueError('boom')\n```\n"
    with pytest.raises(ValueError, match="boom") as info:
        run_blocks(Path("page.md"), text)
    frame = info.traceback[-1]
    assert (str(frame.path), frame.lineno + 1) == ("page.md", 5)


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_api_reference_lists_every_public_name() -> None:
    coverage = _load("docs_api_coverage", DOCS / "_ext" / "api_coverage.py")
    assert coverage.coverage_problems(DOCS) == []


def test_api_coverage_reports_a_missing_name(tmp_path: Path) -> None:
    coverage = _load("docs_api_coverage", DOCS / "_ext" / "api_coverage.py")
    (tmp_path / "api").mkdir()
    for package in coverage.PACKAGES:
        page = (DOCS / "api" / f"{package}.md").read_text(encoding="utf-8")
        if package == "functional":
            page = page.replace("   mixup_batch\n", "").replace(
                "   cutout\n", "   cutout\n   cutout\n"
            )
        (tmp_path / "api" / f"{package}.md").write_text(page, encoding="utf-8")
    assert coverage.coverage_problems(tmp_path) == [
        "functional.mixup_batch is public but has no entry in functional.md",
        "functional.md lists cutout more than once",
    ]


def test_link_checker_finds_broken_links(tmp_path: Path) -> None:
    links = _load("docs_check_links", DOCS / "check_links.py")
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a> <a href="https://example.org/x">external</a>'
        '<a href="#top">ok</a><span id="top"></span><img src="missing.png">'
        '<a href="sub/page.html#nowhere">bad anchor</a> <a href="sub/">dir</a>'
        "<td>{bench}`Ops; a</td><td>b; ms`</td><code>{bench}`an example`</code>",
        encoding="utf-8",
    )
    (tmp_path / "sub" / "page.html").write_text('<h1 id="here">x</h1>', encoding="utf-8")
    problems = links.broken_links(tmp_path)
    assert [p.split(" (")[0] for p in problems] == [
        "index.html: unparsed role in '{bench}`Ops; a'",
        "index.html: missing.png",
        "index.html: sub/page.html#nowhere",
        "index.html: sub/",
    ]


def test_link_checker_rejects_assets_loaded_from_another_host(tmp_path: Path) -> None:
    links = _load("docs_check_links", DOCS / "check_links.py")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "local.js").write_text("", encoding="utf-8")
    (tmp_path / "index.html").write_text(
        '<script src="https://cdn.example.org/mathjax/tex-chtml.js"></script>'
        '<script src="_static/local.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/css?family=X">'
        '<link rel="canonical" href="https://example.org/docs/">'
        '<a href="https://example.org/paper.pdf">a paper, linked not loaded</a>'
        '<img src="http://example.org/logo.png">',
        encoding="utf-8",
    )
    (tmp_path / "_static" / "theme.css").write_text(
        "@font-face { src: url('https://fonts.example.org/a.woff2'); }\n"
        '@import "//example.org/more.css";\nbody { background: url(local.png); }',
        encoding="utf-8",
    )
    problems = [p.split(" (")[0] for p in links.broken_links(tmp_path)]
    assert problems == [
        "index.html: remote asset <script src=https://cdn.example.org/mathjax/tex-chtml.js>",
        "index.html: remote asset <link rel=stylesheet href=//fonts.example.org/css?family=X>",
        "index.html: remote asset <img src=http://example.org/logo.png>",
    ]
    assert links.remote_css_assets(tmp_path) == [
        "_static/theme.css: https://fonts.example.org/a.woff2",
        "_static/theme.css: //example.org/more.css",
    ]


def test_offline_check_finds_formulas_mathjax_did_not_typeset() -> None:
    offline = _load("docs_check_offline", DOCS / "check_offline.py")
    dom = (
        '<span class="math notranslate nohighlight"><mjx-container>x</mjx-container></span>'
        '<div class="math notranslate nohighlight">\\[\\lambda x\\]</div>'
    )
    assert offline.untypeset_formulas(dom) == ["\\[\\lambda x\\]"]


_CARD_SECTIONS = (
    "## What it does",
    "## When it helps, and when it does not",
    "## In a loop",
    "## Hyperparameters",
    "## Composes with, conflicts with",
    "## See also",
)
_CARD_ROWS = ("| Kind |", "| Task |", "| Call |", "| Measured cost |", "| Paper |")


def _cards() -> dict[str, str]:
    return {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted((DOCS / "methods").glob("*.md"))
        if path.stem != "index"
    }


def test_method_cards_follow_the_template() -> None:
    problems = []
    for name, text in _cards().items():
        problems += [f"{name}: no '{s}'" for s in _CARD_SECTIONS if f"\n{s}\n" not in text]
        problems += [f"{name}: no row '{r}'" for r in _CARD_ROWS if f"\n{r}" not in text]
        loop = text.split("## In a loop", 1)[-1].split("\n## ", 1)[0]
        if not python_blocks(loop):
            problems.append(f"{name}: no ```python block under 'In a loop'")
    assert problems == []


def test_every_algorithm_has_a_method_card_in_the_index() -> None:
    import augment
    import functional

    cards = _cards()
    index = (DOCS / "methods" / "index.md").read_text(encoding="utf-8")
    assert [n for n in cards if f"({n}.md)" not in index or f"\n{n}\n" not in index] == []
    algorithms = [n for n in functional.__all__ if n.startswith("apply_") or n.islower()]
    algorithms += [n for n in ("SAMOptimizer", "SWA") if n in functional.__all__]
    algorithms += [n for n in augment.__all__ if n[0].isupper()]
    helpers = {  # public names that are parts of an algorithm rather than one
        "alibi_bias", "alibi_slopes", "alibi_registry", "register_alibi", "unregister_alibi",
        "register_stochastic_block", "unregister_stochastic_block", "swap_ema_weights",
        "glu_block_registry", "register_glu_block", "unregister_glu_block",
    }  # fmt: skip
    text = "\n".join(cards.values())
    missing = [n for n in algorithms if n not in helpers and not re.search(rf"\b{n}\b", text)]
    assert missing == []


def test_every_quoted_benchmark_figure_is_in_results_md() -> None:
    bench = _load("docs_bench", DOCS / "_ext" / "bench.py")
    tables = bench.parse_tables((ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"))
    problems, count = [], 0
    for path in markdown_files():
        for reference in bench.references(path.read_text(encoding="utf-8")):
            count += 1
            try:
                bench.lookup(tables, reference)
            except ValueError as error:
                problems.append(f"{path.relative_to(ROOT)}: {error}")
    assert problems == []
    assert count >= 27  # at least one figure per method card that has a benchmark row


def test_benchmark_lookup_refuses_what_the_results_do_not_hold() -> None:
    bench = _load("docs_bench", DOCS / "_ext" / "bench.py")
    text = (
        "### Ops, cpu\n\n| op | impl | ms |\n|---|---|---|\n| mix | ours | 1.5 |\n| mix | peer | 3 |\n\n"
        "### Ops, cuda\n\n| op | impl | ms |\n|---|---|---|\n| mix | ours | 0.1 |\n"
    )
    tables = bench.parse_tables(text)
    assert bench.lookup(tables, "Ops, cpu; mix / peer; ms") == "3"
    for reference, message in [
        ("Ops; mix / ours; ms", "2 tables"),
        ("Ops, cpu; mix / other; ms", "no row"),
        ("Ops, cpu; mix; seconds", "no column"),
        ("Ops, cpu; mix", "not 'heading; row cells; column'"),
    ]:
        with pytest.raises(ValueError, match=message):
            bench.lookup(tables, reference)
