"""ColOut against Composer 0.32.1's ``colout_batch(sample, p_row, p_col, resize_target)``: pairs
and single images of every kind in our words, and side by side with Composer for the same
global seed (skipped without Composer).

Both draw the kept rows, then the kept columns, with ``torch.randperm`` cut to size and
sorted, so the same ``torch.manual_seed`` keeps the same rows and columns wherever the two
keep the same counts: Composer keeps ``int((1 - p)·H)`` rows, ours ``H - int(p·H)`` (the
contract), the same when ``p·H`` is a whole number and one row more here otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import functional as F


@pytest.mark.parametrize("p", [0.0, 0.15, 0.5])
@pytest.mark.parametrize("channels", [1, 3])
def test_pairs_of_every_kind_keep_their_types_and_sizes(p, channels) -> None:
    rng = np.random.default_rng(0)
    pixels = (255 * rng.uniform(size=(32, 48, channels))).squeeze().astype(np.uint8)
    image = Image.fromarray(pixels)
    tensor = torch.rand(channels, 32, 48)
    batch = torch.rand(16, channels, 32, 48)
    kept = (32 - int(p * 32), 48 - int(p * 48))
    out = F.colout((image, image), p, p)
    assert all(isinstance(o, Image.Image) and o.size == kept[::-1] for o in out)
    out = F.colout((tensor, tensor), p, p)
    assert all(o.shape == (channels, *kept) for o in out)
    out = F.colout_batch((batch, batch), p, p)
    assert all(o.shape == (16, channels, *kept) for o in out)
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("resize_target", ["auto", True, False])
@pytest.mark.parametrize("p_row,p_col", [(0.15, 0.15), (0.0, 0.25), (0.3, 0.05)])
def test_side_by_side_with_composer(resize_target, p_row, p_col) -> None:
    colout_mod = pytest.importorskip("composer.algorithms.colout.colout")
    g = torch.Generator().manual_seed(0)
    images = torch.rand(4, 3, 20, 40, generator=g)  # p·20 and p·40 whole numbers
    masks = torch.randint(0, 5, (4, 3, 20, 40), generator=g)
    torch.manual_seed(7)
    theirs = colout_mod.colout_batch((images, masks), p_row, p_col, resize_target=resize_target)
    torch.manual_seed(7)
    ours = F.colout_batch((images, masks), p_row, p_col, resize_target=resize_target)
    if resize_target is False:  # Composer then returns the input alone; ours keeps the pair
        theirs = (theirs, masks)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    torch.manual_seed(8)
    theirs_single = colout_mod.colout_batch(images[0], p_row, p_col)
    torch.manual_seed(8)
    assert torch.equal(F.colout(images[0], p_row, p_col), theirs_single)
