"""cutout: square holes of the promised size, clipped, on every channel, shared or per sample."""

from __future__ import annotations

import importlib

import pytest
import torch

import functional as F
from tests.functional import reference

cutout_module = importlib.import_module(
    "functional.cutout"
)  # the package binds the name to the function


def _boxes(centres: list[tuple[int, int]], side: int, height: int, width: int) -> torch.Tensor:
    rows = []
    for cy, cx in centres:
        y1, x1 = cy - side // 2, cx - side // 2
        rows.append([max(x1, 0), max(y1, 0), min(x1 + side, width), min(y1 + side, height)])
    return torch.tensor(rows)


@pytest.mark.parametrize("side", [1, 2, 3, 4, 9])
def test_core_matches_reference(side) -> None:
    x = torch.rand(3, 2, 7, 8)
    centres = [(0, 0), (3, 4), (6, 7), (2, 7)]
    out = cutout_module._apply_holes(x, _boxes(centres, side, 7, 8))
    assert torch.equal(out, reference.cutout(x, centres, side))


def test_per_sample_core_matches_reference() -> None:
    x = torch.rand(3, 2, 7, 8)
    centres = [[(1, 1), (5, 5)], [(0, 7), (3, 3)], [(6, 0), (6, 0)]]
    boxes = torch.stack([_boxes(c, 3, 7, 8) for c in centres])
    out = cutout_module._apply_holes(x, boxes)
    for i in range(3):
        assert torch.equal(out[i], reference.cutout(x[i : i + 1], centres[i], 3)[0])


def test_hole_is_a_square_of_side_length_when_inside() -> None:
    x = torch.ones(1, 3, 64, 64)
    for seed in range(20):
        out = F.cutout(x, 1, 6, generator=torch.Generator().manual_seed(seed))
        holes = out[0, 0] == 0
        assert torch.equal(holes, (out[0] == 0).all(0))  # the same on every channel
        rows, cols = holes.any(1).nonzero(), holes.any(0).nonzero()
        height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert holes.sum() == height * width  # a rectangle
        assert height <= 6 and width <= 6
        inside = rows.min() > 0 and rows.max() < 63 and cols.min() > 0 and cols.max() < 63
        if inside:
            assert height == 6 and width == 6


def test_fractional_length_is_a_fraction_of_the_shorter_side() -> None:
    x = torch.ones(1, 1, 20, 40)
    areas = [
        int((F.cutout(x, 1, 0.25, generator=torch.Generator().manual_seed(s)) == 0).sum())
        for s in range(30)
    ]
    assert max(areas) == 25  # int(0.25 * 20) = 5 pixels a side
    assert all(a <= 25 for a in areas)


def test_centres_are_uniform_over_the_pixels() -> None:
    x = torch.ones(1, 1, 3, 4)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(3, 4)
    for _ in range(2400):
        counts += (F.cutout(x, 1, 1, generator=gen)[0, 0] == 0).float()
    assert counts.min() > 140 and counts.max() < 260  # expected 200 each


def test_one_set_of_holes_for_the_batch_unless_per_sample() -> None:
    x = torch.ones(8, 3, 16, 16)
    shared = F.cutout(x, 2, 5, generator=torch.Generator().manual_seed(0)) == 0
    assert all(torch.equal(shared[0], shared[i]) for i in range(8))
    own = F.cutout(x, 2, 5, per_sample=True, generator=torch.Generator().manual_seed(0)) == 0
    assert not all(torch.equal(own[0], own[i]) for i in range(8))
    for i in range(8):
        assert torch.equal(own[i, 0], own[i].all(0))
        assert 0 < own[i, 0].sum() <= 50


def test_holes_are_filled_with_zero_for_any_dtype() -> None:
    for dtype in (torch.uint8, torch.int32, torch.bool, torch.bfloat16):
        x = torch.ones(2, 1, 8, 8, dtype=dtype)
        out = F.cutout(x, 1, 3, generator=torch.Generator().manual_seed(1))
        assert out.dtype == dtype
        assert (out == 0).sum() > 0 and ((out == 0) | (out == 1)).all()


def test_single_image() -> None:
    out = F.cutout(torch.ones(3, 10, 10), 1, 4, generator=torch.Generator().manual_seed(2))
    assert out.shape == (3, 10, 10) and (out == 0).sum() > 0


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"n_holes": 0}, ValueError, "n_holes must be >= 1"),
        ({"length": 0}, ValueError, "length in pixels must be >= 1"),
        ({"length": 1.5}, ValueError, "fraction of min\\(H, W\\) and must be in \\(0, 1\\)"),
        ({"length": -0.5}, ValueError, "must be in \\(0, 1\\)"),
        ({"length": "4"}, TypeError, "length must be an int"),
        ({"length": 9}, ValueError, "length=9 pixels is larger than the 8x8 images"),
        (
            {"length": 10**30},
            ValueError,
            "at most max\\(H, W\\)=8 pixels, or a float in \\(0, 1\\)",
        ),
        ({"X": torch.rand(4, 4)}, ValueError, "X must have 3 or 4 dimensions"),
        ({"per_sample": 1}, TypeError, "per_sample must be a bool"),
        ({"n_holes": 1.0}, TypeError, "n_holes must be an int"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    args = {"X": torch.rand(2, 3, 8, 8), "n_holes": 1, "length": 3}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        F.cutout(**args)


def test_a_hole_larger_than_the_image_is_refused_with_the_fix() -> None:
    """Issue 22: a side meant for larger images (112 pixels on 32 x 32) blanked the whole
    batch without a word. Up to max(H, W) a hole still leaves part of the image (on average)."""
    x = torch.ones(4, 3, 32, 32)
    with pytest.raises(ValueError, match=r"length=112 .* 32x32 images.* float in \(0, 1\)"):
        F.cutout(x, 1, 112)
    g = torch.Generator().manual_seed(0)
    kept = F.cutout(torch.ones(64, 1, 32, 32), 1, 32, per_sample=True, generator=g)
    assert 0.2 < float(kept.mean()) < 0.6  # a 32-pixel hole clipped at the border: ~44% kept
    wide = torch.ones(2, 1, 8, 16)
    assert F.cutout(wide, 1, 16).shape == wide.shape  # up to the longer side is accepted
    with pytest.raises(ValueError, match="max\\(H, W\\)=16"):
        F.cutout(wide, 1, 17)
    assert torch.equal(F.cutout(torch.ones(2, 1, 0, 5), 1, 100), torch.ones(2, 1, 0, 5))


# Composer's uniform_sampling and PIL input.


@pytest.mark.parametrize("side", [1, 3, 4])
def test_uniform_sampling_covers_every_pixel_equally_often(side) -> None:
    # Top-left corners uniform over [1 - side, H - 1]: each pixel is covered with probability
    # side / (H + side - 1) per axis; the default sampling covers the corners less often.
    h, w, n = 6, 7, 20_000
    x = torch.ones(n, 1, h, w)
    gen = torch.Generator().manual_seed(0)
    cut = F.cutout(x, 1, side, per_sample=True, uniform_sampling=True, generator=gen) == 0
    freq = cut[:, 0].double().mean(0)
    expected = side / (h + side - 1) * side / (w + side - 1)
    torch.testing.assert_close(
        freq, torch.full((h, w), expected, dtype=torch.float64), atol=0.012, rtol=0
    )
    assert bool((cut[:, 0].flatten(1).sum(1) > 0).all())  # no hole falls wholly outside
    default = F.cutout(x, 1, 4, per_sample=True, generator=gen)[:, 0] == 0
    assert default.double().mean(0)[0, 0] < default.double().mean(0)[3, 3] - 0.05


def test_uniform_sampling_holes_are_clipped_squares() -> None:
    x = torch.ones(500, 1, 9, 9)
    cut = F.cutout(
        x, 1, 4, per_sample=True, uniform_sampling=True, generator=torch.Generator().manual_seed(1)
    )
    for plane in cut[:, 0] == 0:
        rows, cols = plane.any(1), plane.any(0)
        assert int(plane.sum()) == int(rows.sum()) * int(cols.sum())  # a rectangle
        assert 1 <= int(rows.sum()) <= 4 and 1 <= int(cols.sum()) <= 4
        full = 0 < int(torch.nonzero(rows)[0]) and int(torch.nonzero(rows)[-1]) < 8
        if full:
            assert int(rows.sum()) == 4  # not at the border: the whole side


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "I;16", "P", "1"])
@pytest.mark.parametrize("uniform", [False, True])
def test_pil_image_in_pil_image_out_with_the_tensor_holes(mode, uniform) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    base = Image.fromarray(rng.integers(1, 256, (11, 13, 3), dtype=np.uint8), "RGB")
    img = base.convert(mode)
    out = F.cutout(img, 2, 5, uniform_sampling=uniform, generator=torch.Generator().manual_seed(4))
    assert isinstance(out, Image.Image) and out.mode == mode and out.size == img.size
    holes = (
        F.cutout(
            torch.ones(1, 11, 13),
            2,
            5,
            uniform_sampling=uniform,
            generator=torch.Generator().manual_seed(4),
        )[0]
        == 0
    )
    before, after = np.asarray(img), np.asarray(out)
    mask = holes.numpy()
    assert (after[mask] == 0).all()
    assert (after[~mask] == before[~mask]).all()
    assert np.asarray(img).tolist() == before.tolist()  # the input is untouched


def test_composer_defaults_one_hole_of_half_the_shorter_side() -> None:
    out = F.cutout(
        torch.ones(1, 1, 20, 30), uniform_sampling=False, generator=torch.Generator().manual_seed(0)
    )
    assert 0 < int((out == 0).sum()) <= 100


def test_uniform_sampling_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="uniform_sampling must be a bool"):
        F.cutout(torch.ones(1, 4, 4), 1, 2, uniform_sampling=1)
