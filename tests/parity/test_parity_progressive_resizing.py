"""Progressive resizing against Composer 0.32.1's ``resize_batch`` and ``ProgressiveResizing``
schedule: targets of another size and the schedule's ``delay_fraction``/``size_increment`` in
our words, and side by side with Composer where the two agree (skipped without Composer).

Composer's ``'resize'`` mode is nearest-neighbour for the images; ours is bilinear (nearest for
integer targets), so only the shapes and the schedule are compared side by side."""

from __future__ import annotations

import pytest
import torch

import functional as F


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale", [0.5, 0.75, 1.0])
def test_targets_of_another_size_scale_by_the_same_factor(mode, scale) -> None:
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(16, 8, 32, 32, generator=g), torch.randn(16, 8, 16, 16, generator=g)
    Xs, ys = F.resize_inputs(X, y, scale, mode, resize_targets=True, generator=g)
    assert Xs.shape == (16, 8, int(32 * scale), int(32 * scale))
    assert ys.shape == (16, 8, int(16 * scale), int(16 * scale))


def test_crop_of_the_same_tensor_gives_the_same_window() -> None:
    X = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    xs, ys = F.resize_inputs(X, X, 0.75, "crop", resize_targets=True)
    assert torch.equal(xs, ys)


@pytest.mark.parametrize("width", [32, 31, 224])
@pytest.mark.parametrize("progress", [0.0, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0])
def test_side_by_side_schedule_with_composer(width, progress) -> None:
    pytest.importorskip("composer")
    # Composer's ProgressiveResizing.apply, written out: its schedule lives in the algorithm.
    s, f, d, p = 0.5, 0.2, 0.2, 8
    elapsed = min((progress - d) / (1 - f - d), 1) if progress >= d else 0.0
    theirs = round(width * (s + (1 - s) * elapsed) / p) * p / width
    ours = F.progressive_resizing_scale(
        progress, s, f, delay_fraction=d, size_increment=p, width=width
    )
    assert ours == min(1.0, theirs)  # Composer's resize_batch leaves a scale >= 1 as a no-op


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale", [0.5, 0.75])
def test_side_by_side_shapes_with_composer(mode, scale) -> None:
    pr = pytest.importorskip("composer.algorithms.progressive_resizing.progressive_resizing")
    g = torch.Generator().manual_seed(2)
    X, y = torch.randn(4, 3, 32, 32, generator=g), torch.randn(4, 3, 16, 16, generator=g)
    theirs = pr.resize_batch(X, y, scale, mode, resize_targets=True)
    ours = F.resize_inputs(X, y, scale, mode, resize_targets=True)
    assert [t.shape for t in ours] == [t.shape for t in theirs]
