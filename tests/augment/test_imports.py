"""``augment`` stands on its own: torch, NumPy, Pillow and the standard library, and each of its
modules imports alone. (No import circles: tests/test_architecture.py, for every package.)"""

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


def _modules() -> list[str]:
    """augment's modules and subpackages (``augment.batched.ops``), the package itself excluded."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if len(parts) > 1:
            names.append(".".join(parts))
    return names


def test_augment_imports_only_torch_numpy_pil_and_the_standard_library():
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for module, line in _imports(path)
        if module.partition(".")[0] not in ALLOWED
    ]
    assert not bad, "augment may import torch, numpy, PIL and the standard library only:\n" + (
        "\n".join(bad)
    )


def test_import_augment_loads_neither_functional_nor_surgery_and_each_module_imports_alone():
    """In a fresh interpreter: ``import augment`` leaves ``functional`` and ``surgery`` out, and
    each module of the package imports with nothing of augment loaded before it (its package
    ``__init__`` replaced by an empty stub, so that the package's own import order hides
    nothing)."""
    names = _modules()
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


def test_the_old_import_paths_of_the_batched_transforms_still_work():
    """``augment.batched`` (now a package) and ``augment.batched_ops`` give the same objects as
    before the batched modules moved into ``augment/batched/``."""
    import augment.batched
    import augment.batched.ops
    import augment.batched_ops

    for name in augment.batched.__all__:
        assert getattr(augment.batched, name) is getattr(augment, name)
    assert augment.batched_ops.__all__ == augment.batched.ops.__all__
    for name in augment.batched.ops.__all__:
        assert getattr(augment.batched_ops, name) is getattr(augment.batched.ops, name)
