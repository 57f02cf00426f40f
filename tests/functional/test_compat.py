"""The release gates of ``functional._compat`` tell the truth on the torch that runs them.

Each gate is checked against the behaviour it describes, not against a version table, so the
test holds on every release the compatibility lane runs (2.6 and 2.15) and on the main lane's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from functional._compat import TORCH_RELEASE, _release, fused_sgd_is_correct


@pytest.mark.parametrize(
    ("version", "release"),
    [("2.6.0+cu124", (2, 6)), ("2.15.0", (2, 15)), ("2.14.0a0+git1234abc", (2, 14))],
)
def test_release_reads_major_and_minor(version, release) -> None:
    assert _release(version) == release


def test_release_refuses_a_version_without_major_and_minor() -> None:
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR, got 'nightly'"):
        _release("nightly")


def test_the_running_release_is_in_the_supported_range() -> None:
    assert (2, 6) <= TORCH_RELEASE


def _fused_sgd_moves(dtype: torch.dtype, numel: int) -> bool:
    """Whether one fused SGD step (lr 0.5, gradient 1) moves every element of a CPU tensor."""
    param = torch.zeros(numel, dtype=dtype)
    torch._fused_sgd_(
        [param],
        [torch.ones(numel, dtype=dtype)],
        [],
        weight_decay=0.0,
        momentum=0.0,
        lr=0.5,
        dampening=0.0,
        nesterov=False,
        maximize=True,
        is_first_step=False,
    )
    return bool((param == 0.5).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_fused_sgd_gate_matches_the_cpu_kernel(dtype) -> None:
    # 16 elements fill one vector of the low-precision kernel, 17 add a tail, 1000 many vectors:
    # the gate says True exactly where every size is updated.
    works = all(_fused_sgd_moves(dtype, n) for n in (1, 16, 17, 1000))
    assert fused_sgd_is_correct(torch.device("cpu"), dtype) == works


def test_library_code_never_calls_next_with_a_default() -> None:
    # dynamo of torch 2.6 cannot trace next(iterator, default) ("invalid handler args"): it broke
    # compute_ema under torch.compile through surgery.unwrap_model. A loop, or next() inside
    # try/except StopIteration, traces on every supported release.
    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("surgery", "functional", "augment"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "next"
                    and len(node.args) + len(node.keywords) > 1
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, f"next(iterator, default) in {found}"
