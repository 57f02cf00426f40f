"""Composer's batch and label ops: what they guarantee, checked here, and side by side with
Composer 0.32.1 (the ``composer`` fixture) wherever the porting guide says the two agree.

Randomness differs by design (Composer draws from the global states, this library from
``generator=``), so the side-by-side checks give both the same explicit parameters (λ,
``indices``, ``bbox``), or check that Composer's random output obeys the same law as ours.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as nnf

import functional as F


def _batch(seed: int = 0, n: int = 4, c: int = 3, h: int = 8, w: int = 10) -> torch.Tensor:
    return torch.rand(n, c, h, w, generator=torch.Generator().manual_seed(seed))


def _onehot(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    return nnf.one_hot(y, n_classes).float()


# --- smooth_labels ------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_smooth_labels_is_the_convex_mix_with_the_uniform_distribution(smoothing: float) -> None:
    logits = torch.zeros(3, 5)
    y = torch.tensor([0, 4, 2])
    out = F.smooth_labels(logits, y, smoothing)
    torch.testing.assert_close(out, (1 - smoothing) * _onehot(y, 5) + smoothing / 5)
    torch.testing.assert_close(F.smooth_labels(logits, _onehot(y, 5), smoothing), out)


def test_smooth_labels_default_strength_is_composers() -> None:
    y = torch.tensor([1, 0])
    torch.testing.assert_close(F.smooth_labels(torch.zeros(2, 4), y), 0.9 * _onehot(y, 4) + 0.025)


@pytest.mark.parametrize("smoothing", [0.0, 0.3, 1.0])
def test_smooth_labels_matches_composer(composer: ModuleType, smoothing: float) -> None:
    logits = torch.zeros(2, 4, 3, 3)  # segmentation: (N, C, H, W) logits, (N, H, W) targets
    y = torch.randint(4, (2, 3, 3), generator=torch.Generator().manual_seed(1))
    ours = F.smooth_labels(logits, y, smoothing)
    torch.testing.assert_close(ours, composer.smooth_labels(logits, y, smoothing))
    dense = torch.tensor([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(
        F.smooth_labels(torch.zeros(2, 3), dense, smoothing),
        composer.smooth_labels(torch.zeros(2, 3), dense, smoothing),
    )


# --- mixup_batch --------------------------------------------------------------------------


def test_mixup_interpolates_each_sample_with_its_partner() -> None:
    x, y, perm = _batch(), torch.tensor([0, 1, 2, 1]), torch.tensor([2, 3, 0, 1])
    x_mix, y_mix, got = F.mixup_batch(x, y, 0.3, 3, perm)
    assert torch.equal(got, perm)
    torch.testing.assert_close(x_mix, 0.7 * x + 0.3 * x[perm])
    torch.testing.assert_close(y_mix, 0.7 * _onehot(y, 3) + 0.3 * _onehot(y[perm], 3))
    assert torch.equal(F.mixup_batch(x, y, 0.0, 3, perm)[0], x)  # λ = 0 changes nothing


@pytest.mark.parametrize("mixing", [0.0, 0.25, 0.5])
def test_mixup_matches_composer(composer: ModuleType, mixing: float) -> None:
    x, y, perm = _batch(2), torch.tensor([0, 1, 2, 1]), torch.tensor([1, 2, 3, 0])
    x_mix, y_mix, _ = F.mixup_batch(x, y, mixing, 3, perm)
    c_mix, c_perm, c_mixing = composer.mixup_batch(x, y, mixing=mixing, indices=perm)
    torch.testing.assert_close(x_mix, c_mix)
    dense = (1 - c_mixing) * _onehot(y, 3) + c_mixing * _onehot(c_perm, 3)  # the guide's recipe
    torch.testing.assert_close(y_mix, dense)


# --- cutmix_batch -------------------------------------------------------------------------


def test_cutmix_pastes_the_partner_inside_the_box_only() -> None:
    x, y, perm = _batch(), torch.tensor([0, 1, 2, 1]), torch.tensor([3, 2, 1, 0])
    x_mix, y_mix, _ = F.cutmix_batch(x, y, 3, indices=perm, bbox=(2, 1, 6, 5))  # 4 x 4 box
    inside = torch.zeros(8, 10, dtype=torch.bool)
    inside[1:5, 2:6] = True
    assert torch.equal(x_mix[..., inside], x[perm][..., inside])
    assert torch.equal(x_mix[..., ~inside], x[..., ~inside])
    pasted = 16 / 80
    torch.testing.assert_close(y_mix, (1 - pasted) * _onehot(y, 3) + pasted * _onehot(y[perm], 3))


def test_cutmix_matches_composer_with_its_box_axes_swapped(composer: ModuleType) -> None:
    x, y, perm = _batch(3), torch.tensor([2, 0, 1, 1]), torch.tensor([1, 0, 3, 2])
    composer_box = (1, 2, 5, 9)  # Composer's first coordinate runs along the height
    c_mix, c_perm, c_area, _ = composer.cutmix_batch(x, y, bbox=composer_box, indices=perm)
    x1, y1, x2, y2 = composer_box
    x_mix, y_mix, _ = F.cutmix_batch(x, y, 3, indices=perm, bbox=(y1, x1, y2, x2))
    torch.testing.assert_close(x_mix, c_mix)
    torch.testing.assert_close(y_mix, c_area * _onehot(y, 3) + (1 - c_area) * _onehot(c_perm, 3))


# --- cutout_batch -------------------------------------------------------------------------


def _holes(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """The (H, W) mask of zeroed pixels, checked to be the same in every image and channel."""
    zeroed = (after == 0) & (before != 0)
    assert torch.equal(after[~zeroed], before[~zeroed])  # nothing else changes
    assert (zeroed == zeroed[:1, :1]).all(), "holes differ between images or channels"
    return zeroed[0, 0]


@pytest.mark.parametrize("length", [0.5, 0.25])
def test_cutout_zeroes_one_square_shared_by_the_batch(length: float) -> None:
    x = _batch(4, h=16, w=12) + 0.1
    gen = torch.Generator().manual_seed(0)
    hole = _holes(x, F.cutout(x, 1, length, generator=gen))
    side = int(length * 12)
    rows, cols = hole.any(1).sum(), hole.any(0).sum()
    assert 0 < rows <= side and 0 < cols <= side and hole.sum() == rows * cols


def test_cutout_law_holds_for_composer_too(composer: ModuleType) -> None:
    x = _batch(5, h=16, w=12) + 0.1
    hole = _holes(x, composer.cutout_batch(x, num_holes=1, length=0.5))
    assert hole.any(1).sum() <= 6 and hole.any(0).sum() <= 6  # int(0.5 · 12) = 6


# --- colout_batch -------------------------------------------------------------------------


@pytest.mark.parametrize(("p_row", "p_col"), [(0.25, 0.5), (0.0, 0.2)])
def test_colout_keeps_the_same_rows_and_columns_in_order(p_row: float, p_col: float) -> None:
    x = torch.arange(2 * 8 * 10, dtype=torch.float32).reshape(1, 2, 8, 10)
    out = F.colout_batch(x, p_row, p_col, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 2, 8 - int(p_row * 8), 10 - int(p_col * 10))
    row_ids = out[0, 0, :, 0] // 10  # row index of each kept row
    col_ids = out[0, 0, 0, :] % 10
    assert torch.all(row_ids[1:] > row_ids[:-1]) and torch.all(col_ids[1:] > col_ids[:-1])
    assert torch.equal(out, x[:, :, row_ids.long()][..., col_ids.long()])


def test_colout_sizes_agree_with_composer_where_the_fraction_is_whole(composer: ModuleType) -> None:
    x = torch.arange(2 * 8 * 10, dtype=torch.float32).reshape(1, 2, 8, 10)
    theirs = composer.colout_batch(x, p_row=0.25, p_col=0.5)
    assert theirs.shape == F.colout_batch(x, 0.25, 0.5).shape == (1, 2, 6, 5)
    # where p·H is not whole Composer keeps int((1-p)·H) rows, one fewer (the guide says so)
    assert composer.colout_batch(x, p_row=0.15, p_col=0.0).shape[-2] == int(0.85 * 8) == 6
    assert F.colout_batch(x, 0.15, 0.0).shape[-2] == 8 - int(0.15 * 8) == 7


# --- resize_batch -------------------------------------------------------------------------


def test_resize_scales_both_sides_and_keeps_targets_aligned() -> None:
    x, mask = _batch(h=16, w=12), torch.randint(3, (4, 16, 12), generator=torch.Generator())
    out, y = F.resize_inputs(x, mask, 0.5, "resize", resize_targets=True)
    assert out.shape == (4, 3, 8, 6) and y.shape == (4, 8, 6) and y.dtype == mask.dtype
    xc, yc = F.resize_inputs(x, x, 0.5, "crop", resize_targets=True)
    assert torch.equal(xc, yc)  # the same window for inputs and targets
    same, _ = F.resize_inputs(x, mask, 1.0, "resize")
    assert same is x


@pytest.mark.parametrize("scale", [0.5, 0.75])
def test_resize_matches_composer_in_size_and_on_index_targets(
    composer: ModuleType, scale: float
) -> None:
    """Composer resizes images with nearest-neighbour sampling, this library bilinearly (the
    guide says so): the sizes agree, and so do resized class-index masks (nearest in both)."""
    x = _batch(6, h=16, w=12)
    mask = torch.randint(3, (4, 16, 12), generator=torch.Generator().manual_seed(2))
    ours, our_mask = F.resize_inputs(x, mask, scale, "resize", resize_targets=True)
    theirs, their_mask = composer.resize_batch(x, mask, scale, "resize", resize_targets=True)
    assert ours.shape == theirs.shape and torch.equal(our_mask, their_mask)
    crop, _ = composer.resize_batch(x, mask, scale, "crop")
    assert crop.shape == F.resize_inputs(x, mask, scale, "crop")[0].shape


# --- set_batch_sequence_length ------------------------------------------------------------


def _text_batch() -> dict[str, torch.Tensor]:
    ids = torch.arange(2 * 12).reshape(2, 12)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids + 100}


@pytest.mark.parametrize("truncate", [True, False])
def test_seq_length_truncates_or_reshapes(truncate: bool) -> None:
    batch = _text_batch()
    out = F.apply_seq_length_warmup(batch, 4, truncate)
    expected = (2, 4) if truncate else (6, 4)
    assert all(v.shape == expected for v in out.values())
    assert torch.equal(batch["input_ids"], _text_batch()["input_ids"])  # input untouched
    first = batch["input_ids"][:, :4] if truncate else batch["input_ids"].reshape(6, 4)
    assert torch.equal(out["input_ids"], first)


@pytest.mark.parametrize(("length", "truncate"), [(5, True), (4, False)])
def test_seq_length_matches_composer(composer: ModuleType, length: int, truncate: bool) -> None:
    """Reshaping agrees where ``curr_seq_len`` divides L; otherwise Composer cuts the flattened
    batch (rows run into each other) and this library each row (the guide says so)."""
    ours = F.apply_seq_length_warmup(_text_batch(), length, truncate)
    theirs = composer.set_batch_sequence_length(_text_batch(), length, truncate)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


# --- selective backprop -------------------------------------------------------------------

GRID = [(d / 10, b, i) for d in range(10) for b in range(4) for i in (0, 1, 2, 3)]


def test_should_selective_backprop_rule() -> None:
    for duration, batch_idx, interrupt in GRID:
        expected = 0.3 <= duration < 0.8 and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)
        assert F.should_selective_backprop(duration, batch_idx, 0.3, 0.8, interrupt) == expected


def test_should_selective_backprop_matches_composer(composer: ModuleType) -> None:
    for duration, batch_idx, interrupt in GRID:
        args = (duration, batch_idx, 0.3, 0.8, interrupt)
        assert F.should_selective_backprop(*args) == composer.should_selective_backprop(*args)
        assert F.should_selective_backprop(duration, batch_idx) == (
            composer.should_selective_backprop(duration, batch_idx)
        )


def _scorer() -> torch.nn.Module:
    conv = torch.nn.Conv2d(3, 3, 1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(3, 3, 1, 1, generator=torch.Generator().manual_seed(0)))
    return torch.nn.Sequential(conv, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())


@pytest.mark.parametrize("keep", [0.5, 0.75, 1.0])
def test_select_using_loss_keeps_int_n_keep_matching_rows(keep: float) -> None:
    x, y = _batch(7, n=8, h=4, w=4), torch.arange(8) % 3
    xs, ys = F.select_using_loss(
        x, y, _scorer(), nnf.cross_entropy, keep, 0.5, generator=torch.Generator().manual_seed(0)
    )
    assert xs.shape == (int(8 * keep), 3, 4, 4) and ys.shape == (int(8 * keep),)
    rows = [int(torch.nonzero((x == r).flatten(1).all(1))) for r in xs]
    assert len(set(rows)) == len(rows) and torch.equal(ys, y[rows])


def test_select_using_loss_refusals_match_composer(composer: ModuleType) -> None:
    x, y, model = torch.rand(6, 5), torch.arange(6) % 3, torch.nn.Linear(5, 3)
    for fn in (F.select_using_loss, composer.select_using_loss):
        with pytest.raises(ValueError):
            fn(x, y, model, nnf.cross_entropy, 1, 0.5)  # nothing to downsample
        with pytest.raises(TypeError, match=r"must take a keyword argument `reduction`\."):
            fn(x, y, model, lambda out, target: out.sum(), 1, 1)
        kept, _ = fn(x, y, model, nnf.cross_entropy, 1, 1)
        assert sorted(kept.sum(1).tolist()) == sorted(x.sum(1).tolist())  # keep=1: all rows
