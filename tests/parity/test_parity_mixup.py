"""MixUp against Composer 0.32.1's ``mixup_batch``: what its behaviour guarantees, in our words,
and side by side with Composer for the same λ and permutation (skipped without Composer)."""

from __future__ import annotations

import pytest
import torch

import functional as F


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_alpha_form_mixes_with_a_folded_beta_draw() -> None:
    # Composer's mixup_batch(input, target, alpha=...) draws λ = min(z, 1 - z), z ~ Beta.
    x = torch.randn(8, 3, 4, 4)
    y = torch.arange(8)
    lams = []
    for seed in range(40):
        _, y_mix, perm = F.mixup_batch(x, y, n_classes=8, alpha=1.0, generator=_gen(seed))
        moved = int(torch.nonzero(perm != torch.arange(8))[0])
        lams.append(float(y_mix[moved, y[perm[moved]]]))
    assert all(0.0 <= v <= 0.5 for v in lams)
    assert max(lams) - min(lams) > 0.1  # drawn, not fixed


def test_fixed_lambda_form_is_the_convex_combination() -> None:
    x, y = torch.randn(5, 2, 3), torch.tensor([0, 1, 2, 3, 4])
    perm = torch.tensor([4, 3, 2, 1, 0])
    x_mix, y_mix, _ = F.mixup_batch(x, y, 0.25, 5, indices=perm)
    torch.testing.assert_close(x_mix, 0.75 * x + 0.25 * x[perm])
    torch.testing.assert_close(y_mix, 0.75 * torch.eye(5) + 0.25 * torch.eye(5)[perm])


@pytest.mark.parametrize("mixing", [0.0, 0.2, 0.5])
def test_side_by_side_with_composer(mixing) -> None:
    composer_mixup = pytest.importorskip("composer.algorithms.mixup.mixup")
    x = torch.randn(7, 11, 3, 5, generator=_gen(1))
    y = torch.randint(10, (7,), generator=_gen(2))
    perm = torch.randperm(7, generator=_gen(3))
    x_theirs, y_perm, lam = composer_mixup.mixup_batch(x, y, mixing=mixing, indices=perm)
    x_ours, y_ours, used = F.mixup_batch(x, y, mixing, 10, indices=perm)
    assert lam == mixing and torch.equal(used, perm)
    torch.testing.assert_close(x_ours, x_theirs)
    # Composer returns the partners' labels for the loss to mix; ours are mixed already.
    dense = torch.eye(10)
    torch.testing.assert_close(y_ours, (1 - mixing) * dense[y] + mixing * dense[y_perm])
