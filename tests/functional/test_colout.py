"""colout and colout_batch: how many rows and columns survive, which, and in what order."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from PIL import Image

import functional as F
from tests.functional import reference

colout_module = importlib.import_module(
    "functional.colout"
)  # the package binds the name to the function


def _coded(*lead: int, height: int, width: int) -> torch.Tensor:
    """Pixel (r, c) holds 1000·r + c: the output says which rows and columns it kept."""
    grid = torch.arange(height).view(-1, 1) * 1000 + torch.arange(width)
    return grid.expand(*lead, height, width).clone()


@pytest.mark.parametrize(
    "p_row,p_col", [(0.0, 0.0), (0.15, 0.15), (0.5, 0.3), (0.99, 0.01), (0.29, 0.7)]
)
@pytest.mark.parametrize("height,width", [(20, 30), (1, 7), (100, 13)])
def test_kept_counts_and_order(p_row, p_col, height, width) -> None:
    x = _coded(3, height=height, width=width)
    out = F.colout(x, p_row, p_col, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, height - int(p_row * height), width - int(p_col * width))
    rows, cols = (out[0, :, 0] // 1000).tolist(), (out[0, 0, :] % 1000).tolist()
    assert rows == sorted(set(rows)) and cols == sorted(set(cols))  # distinct, in order
    assert torch.equal(out, reference.colout(x, rows, cols))


def test_batch_drops_the_same_rows_and_columns_everywhere() -> None:
    x = _coded(4, 2, height=12, width=10) + torch.arange(4).view(4, 1, 1, 1) * 10**6
    out = F.colout_batch(x, 0.25, 0.4, generator=torch.Generator().manual_seed(1))
    assert out.shape == (4, 2, 9, 6)
    rows, cols = (out[0, 0, :, 0] // 1000).tolist(), (out[0, 0, 0, :] % 1000).tolist()
    assert torch.equal(out, reference.colout(x, rows, cols))


def test_every_row_is_equally_likely_to_survive() -> None:
    x = _coded(1, height=10, width=2)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(10)
    for _ in range(1000):
        kept = F.colout(x, 0.5, 0.0, generator=gen)[0, :, 0] // 1000
        counts[kept] += 1
    assert counts.min() > 420 and counts.max() < 580  # 500 expected


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA", "1", "I;16", "F"])
def test_pil_image_keeps_its_mode_and_matches_the_tensor_path(mode) -> None:
    array = (np.random.default_rng(0).random((15, 11, 3)) * 255).astype(np.uint8)
    img = Image.fromarray(array).convert(mode)
    out = F.colout(img, 0.2, 0.3, generator=torch.Generator().manual_seed(4))
    assert isinstance(out, Image.Image) and out.mode == mode
    assert out.size == (11 - int(0.3 * 11), 15 - int(0.2 * 15))
    gen = torch.Generator().manual_seed(4)
    rows = colout_module._draw_kept(15, 0.2, gen).numpy()
    cols = colout_module._draw_kept(11, 0.3, gen).numpy()
    assert np.array_equal(np.asarray(out), np.asarray(img)[rows][:, cols])
    if mode == "P":
        assert out.getpalette() == img.getpalette()


def test_two_dimensional_image() -> None:
    assert F.colout(torch.rand(10, 20), 0.1, 0.5).shape == (9, 10)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (
            lambda: F.colout(torch.rand(3, 8, 8), 1.0, 0.1),
            ValueError,
            "p_row must be in \\[0.0, 1.0\\)",
        ),
        (lambda: F.colout(torch.rand(3, 8, 8), 0.1, -0.1), ValueError, "p_col must be in"),
        (
            lambda: F.colout(torch.rand(2, 3, 8, 8), 0.1, 0.1),
            ValueError,
            "img must have 2 or 3 dimensions",
        ),
        (lambda: F.colout_batch(torch.rand(8), 0.1, 0.1), ValueError, "X must have"),
        (
            lambda: F.colout_batch(torch.rand(2, 3, 8, 8), "0.1", 0.1),
            TypeError,
            "p_row must be a real number",
        ),
        (lambda: F.colout(np.zeros((3, 3)), 0.1, 0.1), TypeError, "img must be a torch.Tensor"),
    ],
)
def test_bad_arguments(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


# Composer's (input, target) pairs with resize_target.


@pytest.mark.parametrize("batched", [False, True])
def test_pair_drops_the_same_rows_and_columns_from_image_and_mask(batched) -> None:
    lead = (4, 3) if batched else (3,)
    image = _coded(*lead, height=20, width=30)
    mask = _coded(*lead[:-1], height=20, width=30)  # (B, H, W) or (H, W)
    op = F.colout_batch if batched else F.colout
    out, out_mask = op((image, mask), 0.2, 0.3, generator=torch.Generator().manual_seed(1))
    assert out.shape == (*lead, 16, 21) and out_mask.shape == (*lead[:-1], 16, 21)
    assert torch.equal(out[..., 0, :, :] if batched else out[0], out_mask)


def test_pair_of_pil_images() -> None:
    image = Image.fromarray(np.arange(20 * 30, dtype=np.uint8).reshape(20, 30) % 251)
    mask = image.convert("RGB")
    out, out_mask = F.colout((image, mask), 0.1, 0.1, generator=torch.Generator().manual_seed(2))
    assert out.size == out_mask.size == (27, 18) and out_mask.mode == "RGB"
    assert (np.asarray(out_mask)[..., 0] == np.asarray(out)).all()
    single = F.colout_batch(image, 0.1, 0.1, generator=torch.Generator().manual_seed(2))
    assert isinstance(single, Image.Image) and single.tobytes() == out.tobytes()


def test_auto_leaves_a_target_of_another_size_and_false_never_drops() -> None:
    x, labels = torch.rand(4, 3, 16, 16), torch.arange(4)
    small = torch.rand(4, 8, 8)
    for target in (labels, small):
        out, same = F.colout_batch((x, target), 0.25, 0.25)
        assert out.shape == (4, 3, 12, 12) and same is target
    out, same = F.colout_batch((x, torch.rand(4, 16, 16)), 0.25, 0.25, resize_target=False)
    assert same.shape == (4, 16, 16)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (
            lambda: F.colout_batch(
                (torch.rand(2, 3, 8, 8), torch.rand(2, 4, 4)), resize_target=True
            ),
            ValueError,
            "input's spatial size \\(8, 8\\), got \\(4, 4\\)",
        ),
        (
            lambda: F.colout_batch(torch.rand(2, 3, 8, 8), resize_target="yes"),
            TypeError,
            "resize_target",
        ),
        (lambda: F.colout((torch.rand(3, 8, 8),) * 3), ValueError, "pair, got a sequence of 3"),
        (
            lambda: F.colout((torch.rand(3, 8, 8), "mask")),
            TypeError,
            "target must be a torch.Tensor",
        ),
    ],
)
def test_pair_refusals(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_composer_defaults_drop_fifteen_percent() -> None:
    assert F.colout_batch(torch.rand(2, 3, 20, 40)).shape == (2, 3, 17, 34)
