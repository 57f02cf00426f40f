"""CutMix against Composer 0.32.1's ``cutmix_batch(input, target, length, alpha, bbox, indices,
uniform_sampling)``: its arguments' effects in our words, and side by side with Composer for
the same box and permutation (skipped without Composer).

Composer's ``bbox`` indexes ``x[..., x1:x2, y1:y2]`` (its first pair along the height); ours is
``(left, top, right, bottom)`` with ``x`` along the width, so the same region is Composer's box
with the pairs swapped."""

from __future__ import annotations

import pytest
import torch

import functional as F


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("length", [0.25, 0.5, 0.75])
def test_length_gives_a_box_of_that_fraction_of_each_side(length, uniform) -> None:
    x = torch.randn(7, 11, 12, 20, generator=_gen(1))
    y = torch.randint(10, (7,), generator=_gen(2))
    sides = set()
    for seed in range(30):
        x_mix, y_mix, _ = F.cutmix_batch(
            x, y, 10, length=length, uniform_sampling=uniform, generator=_gen(seed)
        )
        changed = (x_mix != x).any(1).any(0)
        rows, cols = changed.any(1), changed.any(0)
        sides.add((int(rows.sum()), int(cols.sum())))
        area = 1 - y_mix[torch.arange(7), y].min()  # samples whose partner has another class
        assert float(area) <= length * length + 1e-6
    full = (int(length * 12), int(length * 20))
    assert all(r <= full[0] and c <= full[1] for r, c in sides)
    if not uniform:  # uniform placement clips more often: the full box is rarer
        assert full in sides


@pytest.mark.parametrize("uniform", [False, True])
def test_side_by_side_with_composer_for_the_same_box(uniform) -> None:
    composer_cutmix = pytest.importorskip("composer.algorithms.cutmix.cutmix")
    x = torch.randn(7, 11, 6, 9, generator=_gen(1))
    y = torch.randint(10, (7,), generator=_gen(2))
    perm = torch.randperm(7, generator=_gen(3))
    for r1, c1, r2, c2 in [(0, 0, 3, 4), (2, 5, 6, 9), (1, 1, 2, 8)]:
        theirs, y_perm, keep, _ = composer_cutmix.cutmix_batch(
            x, y, bbox=(r1, c1, r2, c2), indices=perm, uniform_sampling=uniform
        )
        ours, y_mix, _ = F.cutmix_batch(x, y, 10, bbox=(c1, r1, c2, r2), indices=perm)
        torch.testing.assert_close(ours, theirs)
        dense = torch.eye(10)
        torch.testing.assert_close(y_mix, keep * dense[y] + (1 - keep) * dense[y_perm])
