"""The layering rules of ARCHITECTURE.md, checked on the source tree.

Each rule reads the packages' source with :mod:`ast` (nothing is imported, except in the
import-time tests, which run a fresh interpreter), so a violation names the file and line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("surgery", "functional", "augment")

# What each package may import besides the standard library and its own modules. A package is
# used only through its public names (``from surgery import X``); ``lazy`` ones only inside
# functions, so that importing the package does not import them.
ALLOWED = {
    "surgery": {"torch"},
    "functional": {"torch", "numpy", "PIL", "torchvision", "surgery"},
    "augment": {"torch", "numpy", "PIL"},
}
LAZY = {"functional": {"transformers", "timm"}}

# Files above this many lines state why at their top, in a comment starting "# Long file:".
MAX_LINES = 450

# Module-level containers that functions mutate at run time are hidden global state. Extension
# points are ``Registry`` instances (functional/_registry.py); anything else needs a reason here.
MUTABLE_GLOBALS_ALLOWED = {
    "_LIVE_STREAMS": "augment's weak set of RngStreams that os.register_at_fork moves on in the "
    "parent after each fork, so that DataLoader workers never repeat the parent's draws; the "
    "set holds no strong references and no values, only which streams exist",
    "_KERNELS": "augment's table of declared operations, filled by the @operation decorator "
    "while augment/_ops_*.py are imported and never changed afterwards",
}

MUTATING_METHODS = {
    "add",
    "append",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
}


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # dotted module imported from
    names: tuple[str, ...]  # names taken from it (empty for ``import x.y``)
    lazy: bool  # inside a function body


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend(Import(path, child.lineno, a.name, (), lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against the file's package
                    parts = path.relative_to(ROOT).with_suffix("").parts[: -child.level]
                    module = ".".join([*parts, child.module] if child.module else parts)
                else:
                    module = child.module or ""
                names = tuple(a.name for a in child.names)
                found.append(Import(path, child.lineno, module, names, lazy))
            visit(child, inner)

    visit(tree, False)
    return found


def _where(imp: Import) -> str:
    return f"{imp.path.relative_to(ROOT)}:{imp.line}"


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_their_layer_allows(package: str) -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    problems = []
    for path in _sources(package):
        for imp in _imports(path):
            top = imp.module.split(".")[0]
            if top == package or top in stdlib:
                continue
            if top in ALLOWED[package]:
                continue
            if top in LAZY.get(package, set()) and imp.lazy:
                continue
            problems.append(f"{_where(imp)} imports {imp.module}")
    assert not problems, f"{package} may import {sorted(ALLOWED[package])}:\n" + "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_other_packages_are_used_only_through_their_public_names(package: str) -> None:
    problems = []
    for path in _sources(package):
        for imp in _imports(path):
            parts = imp.module.split(".")
            if parts[0] == package or parts[0] not in PACKAGES:
                continue
            if len(parts) > 1:
                problems.append(f"{_where(imp)} imports the module {imp.module}")
            private = [n for n in imp.names if n.startswith("_")]
            if private:
                problems.append(f"{_where(imp)} imports private {private} from {imp.module}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("package", "absent"),
    [
        ("surgery", ["functional", "augment", "transformers", "timm"]),
        ("functional", ["augment", "transformers", "timm"]),
        ("augment", ["functional", "surgery", "transformers", "torchvision", "timm"]),
    ],
)
def test_importing_a_package_loads_nothing_above_its_layer(package: str, absent: list[str]) -> None:
    code = f"import sys, {package}; print(','.join(m for m in {absent!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"import {package} also imported {out.stdout.strip()}"


@pytest.mark.parametrize("package", PACKAGES)
def test_long_files_say_why(package: str) -> None:
    problems = []
    for path in _sources(package):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES and not any(
            line.startswith("# Long file:") for line in lines[:60]
        ):
            problems.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
    assert not problems, (
        f"files over {MAX_LINES} lines need a '# Long file: <reason>' comment at the top "
        "(or a split):\n" + "\n".join(problems)
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of our packages it imports: at import time, under ``TYPE_CHECKING``
    or inside a function alike (a circle hidden in a function body is still a circle).
    ``from package import name`` points at ``package.name`` when that is a module."""
    paths = [path for package in PACKAGES for path in _sources(package)]
    modules = {_module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        edges = graph.setdefault(_module_name(path), set())
        for imp in _imports(path):
            targets = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules]
            if len(targets) < len(imp.names) or not imp.names:
                targets.append(imp.module)
            edges.update(t for t in targets if t in modules)
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (more than one module)."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {
        tuple(sorted(m for m in reach[node] if node in reach.get(m, set())))
        for node in graph
        if node in reach[node]
    }
    return sorted(list(group) for group in groups if len(group) > 1)


def test_no_import_cycles_between_modules() -> None:
    graph = _import_graph()
    assert "functional.alibi.context" in graph  # the graph sees the packages' modules
    assert not _cycles(graph), "modules that import each other (directly or around a circle):\n" + (
        "\n".join(" <-> ".join(cycle) for cycle in _cycles(graph))
    )


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def _mutable_globals(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound to a mutable container (literal, comprehension or constructor)."""
    constructors = {"dict", "list", "set", "defaultdict", "OrderedDict", "WeakSet", "Counter"}
    constructors |= {"WeakKeyDictionary", "WeakValueDictionary", "deque"}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp))
        mutable |= isinstance(value, ast.SetComp)
        if isinstance(value, ast.Call):
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            mutable |= name in constructors
        if mutable:
            found.update((t.id, node.lineno) for t in targets if isinstance(t, ast.Name))
    return found


def _mutated_names(tree: ast.Module) -> set[str]:
    """Names whose object a function changes in place (item assignment or mutating method);
    filling a table at import time is not run-time state."""
    names = set()
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    for node in (inner for f in functions for inner in ast.walk(f)):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                names.add(t.value.id)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATING_METHODS
            and isinstance(node.func.value, ast.Name)
        ):
            names.add(node.func.value.id)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_hidden_global_state(package: str) -> None:
    problems = []
    for path in _sources(package):
        tree = ast.parse(path.read_text(), filename=str(path))
        mutated = _mutated_names(tree)
        for name, line in _mutable_globals(tree).items():
            if name in mutated and name not in MUTABLE_GLOBALS_ALLOWED:
                problems.append(f"{path.relative_to(ROOT)}:{line} {name}")
    assert not problems, (
        "module-level containers changed at run time (use a Registry, or state the reason in "
        "MUTABLE_GLOBALS_ALLOWED):\n" + "\n".join(problems)
    )


def test_architecture_document_names_the_enforced_rules() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for package, allowed in ALLOWED.items():
        assert f"`{package}`" in text
        for name in allowed:
            assert f"`{name}`" in text, f"ARCHITECTURE.md does not mention {name} for {package}"
    assert str(MAX_LINES) in text
    assert "tests/test_architecture.py" in text
