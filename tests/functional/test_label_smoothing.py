"""smooth_labels: against the reference loop and torch's own label-smoothed cross entropy."""

from __future__ import annotations

import pytest
import torch

import functional as F
from tests.functional import reference


@pytest.mark.parametrize("extra", [(), (3,), (2, 3)])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 1.0])
def test_index_targets_match_reference(extra, alpha) -> None:
    logits = torch.randn(4, 5, *extra, dtype=torch.float64)
    targets = torch.randint(0, 5, (4, *extra))
    out = F.smooth_labels(logits, targets, alpha)
    torch.testing.assert_close(out, reference.smooth_labels(5, targets, alpha))
    torch.testing.assert_close(out.sum(1), torch.ones_like(out.sum(1)))


def test_dense_targets_are_mixed_with_uniform() -> None:
    logits = torch.randn(3, 4)
    dense = torch.softmax(torch.randn(3, 4), 1)
    torch.testing.assert_close(F.smooth_labels(logits, dense, 0.2), 0.8 * dense + 0.05)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.3])
def test_equals_torch_label_smoothing_in_cross_entropy(alpha) -> None:
    logits = torch.randn(6, 7, 2, dtype=torch.float64)
    targets = torch.randint(0, 7, (6, 2))
    ours = torch.nn.functional.cross_entropy(logits, F.smooth_labels(logits, targets, alpha))
    theirs = torch.nn.functional.cross_entropy(logits, targets, label_smoothing=alpha)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_returns_logits_dtype_and_device(dtype) -> None:
    logits = torch.randn(2, 3).to(dtype)
    out = F.smooth_labels(logits, torch.tensor([0, 2]), 0.1)
    assert out.dtype == dtype and out.shape == logits.shape
    dense = F.smooth_labels(logits, torch.tensor([[0, 1, 0], [1, 0, 0]]), 0.1)
    assert dense.dtype == dtype


@pytest.mark.parametrize(
    "args,error,match",
    [
        (
            (torch.randn(2, 3), torch.tensor([0, 1]), 1.5),
            ValueError,
            "alpha must be in \\[0.0, 1.0\\]",
        ),
        ((torch.randn(2, 3), torch.tensor([0, 3]), 0.1), ValueError, "class indices in \\[0, 3\\)"),
        (
            (torch.randn(2, 3), torch.tensor([0, 1, 2]), 0.1),
            ValueError,
            "targets must be class indices of shape",
        ),
        ((torch.randn(3), torch.tensor([0]), 0.1), ValueError, "logits must have"),
        (
            (torch.randn(2, 3), torch.tensor([0.0, 1.0]), 0.1),
            TypeError,
            "index targets must be integers",
        ),
        ((torch.randn(2, 3), [0, 1], 0.1), TypeError, "targets must be a torch.Tensor"),
    ],
)
def test_bad_arguments(args, error, match) -> None:
    with pytest.raises(error, match=match):
        F.smooth_labels(*args)
