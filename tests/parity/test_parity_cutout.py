"""Cutout against Composer 0.32.1's ``cutout_batch(input, num_holes, length, uniform_sampling)``:
what it guarantees, in our words (one hole per call is a clipped square; types, dtypes and
shapes kept, PIL included), and side by side with Composer for the same hole (skipped without
Composer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import functional as F
from functional.cutout import _apply_holes


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(kind: str, dtype: torch.dtype):
    g = _gen(123)
    if kind == "pillow":
        return Image.fromarray(
            np.random.default_rng(123).integers(256, size=(6, 5, 3)).astype(np.uint8)
        )
    shape = (3, 6, 5) if kind == "single" else (4, 3, 6, 5)
    if dtype == torch.uint8:
        return torch.randint(256, shape, generator=g, dtype=torch.uint8)
    return torch.rand(shape, generator=g).to(dtype)


@pytest.mark.parametrize("kind", ["pillow", "single", "batch"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("uniform", [False, True])
def test_type_dtype_and_shape_are_kept(kind, dtype, uniform) -> None:
    img = _images(kind, dtype)
    out = F.cutout(img, uniform_sampling=uniform, generator=_gen())
    assert type(out) is type(img)
    if isinstance(img, Image.Image):
        assert out.size == img.size and out.mode == img.mode
    else:
        assert out.shape == img.shape and out.dtype == img.dtype


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("shape", [(1, 4, 32, 32), (4, 1, 64, 71)])
def test_one_hole_is_one_clipped_square_on_every_channel(uniform, shape) -> None:
    x = torch.rand(shape, generator=_gen(1)) + 1  # no zero pixels before
    for seed in range(5):
        cut = F.cutout(x, 1, 0.25, uniform_sampling=uniform, generator=_gen(seed)) == 0
        plane = cut[0, 0]
        assert torch.equal(cut, plane.expand_as(cut))
        rows, cols = plane.any(1), plane.any(0)
        assert int(plane.sum()) == int(rows.sum()) * int(cols.sum())
        side = int(0.25 * min(shape[-2:]))
        assert int(rows.sum()) <= side and int(cols.sum()) <= side


def test_side_by_side_with_composer_for_an_even_side() -> None:
    cutout_mod = pytest.importorskip("composer.algorithms.cutout.cutout")
    # Composer's hole for the centre (x, y) is [y - L//2, y + L//2) x [x - L//2, x + L//2),
    # clipped: for an even side L it is ours for the same centre.
    x = torch.rand(2, 3, 16, 20, generator=_gen(2)) + 1
    for cy, cx in [(0, 0), (7, 9), (15, 19), (3, 18)]:
        mask = cutout_mod._generate_mask(torch.ones_like(x), 20, 16, cx, cy, 4)
        boxes = torch.tensor([[cx - 2, cy - 2, cx + 2, cy + 2]]).clamp(min=0)
        boxes = torch.minimum(boxes, torch.tensor([20, 16, 20, 16]))
        torch.testing.assert_close(_apply_holes(x, boxes), x * mask)
