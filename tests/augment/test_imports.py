"""``augment`` stands on its own: torch, NumPy, Pillow and the standard library, no cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import augment

PACKAGE = Path(augment.__file__).resolve().parent
ALLOWED = {"torch", "numpy", "PIL", "augment"} | set(sys.stdlib_module_names)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (at any depth of the code), with the line of the import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            assert node.level == 0, f"{path.name}:{node.lineno}: use absolute imports"
            found.append((node.module, node.lineno))
            if node.module == "augment":  # ``from augment import primitives``
                found += [(f"augment.{alias.name}", node.lineno) for alias in node.names]
    return found


def _graph() -> dict[str, set[str]]:
    """augment's modules -> the augment modules each imports (the package itself excluded)."""
    modules = {f"augment.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m, _ in _imports(path) if m in modules} for name, path in modules.items()}


def test_augment_imports_only_torch_numpy_pil_and_the_standard_library():
    bad = [
        f"{path.name}:{line}: {module}"
        for path in sorted(PACKAGE.glob("*.py"))
        for module, line in _imports(path)
        if module.partition(".")[0] not in ALLOWED
    ]
    assert not bad, "augment may import torch, numpy, PIL and the standard library only:\n" + (
        "\n".join(bad)
    )


def test_no_import_cycle_between_augments_modules():
    graph = _graph()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, "import cycle: " + " -> ".join((*path, name))
        if name not in done:
            for dep in sorted(graph[name]):
                visit(dep, (*path, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_import_augment_loads_neither_functional_nor_surgery_and_each_module_imports_alone():
    """In a fresh interpreter: ``import augment`` leaves ``functional`` and ``surgery`` out, and
    each module of the package imports with nothing of augment loaded before it (its package
    ``__init__`` replaced by an empty stub, so that the package's own import order hides
    nothing)."""
    names = sorted(_graph())
    script = textwrap.dedent(
        f"""
        import importlib, sys, types
        import augment
        assert "functional" not in sys.modules, "import augment imported functional"
        assert "surgery" not in sys.modules, "import augment imported surgery"
        path = list(augment.__path__)
        for name in {names!r}:
            for loaded in [m for m in sys.modules if m.split(".")[0] == "augment"]:
                del sys.modules[loaded]
            stub = types.ModuleType("augment")
            stub.__path__ = path
            sys.modules["augment"] = stub
            importlib.import_module(name)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert done.returncode == 0, done.stderr
