"""Laws of the batch, label and schedule ops, stated as Hypothesis properties."""

from __future__ import annotations

import itertools
import math

import torch
from hypothesis import given
from hypothesis import strategies as st

import functional as F
from tests.strategies import dtypes, image_batches

unit = st.floats(0.0, 1.0)
seeds = st.integers(0, 2**31 - 1)


def _labels(draw_batch: int, n_classes: int, seed: int) -> torch.Tensor:
    return torch.randint(0, n_classes, (draw_batch,), generator=torch.Generator().manual_seed(seed))


@given(image_batches(dtype=st.one_of(dtypes, st.just(torch.uint8))), unit, st.booleans(), seeds)
def test_mixup_of_a_batch_with_itself_is_the_identity(x, lam, per_sample, seed) -> None:
    batch = x.shape[0]
    y = _labels(batch, 3, seed)
    weights = (
        torch.rand(batch, generator=torch.Generator().manual_seed(seed)) if per_sample else lam
    )
    identity = torch.arange(batch)
    x_mix, y_mix, _ = F.mixup_batch(x, y, weights, 3, indices=identity)
    assert torch.equal(x_mix, x)
    assert torch.equal(y_mix, torch.nn.functional.one_hot(y, 3).float())


@given(image_batches(min_side=1, max_side=12), unit, seeds, st.integers(1, 6))
def test_mixed_labels_stay_distributions(x, lam, seed, n_classes) -> None:
    gen = torch.Generator().manual_seed(seed)
    y = _labels(x.shape[0], n_classes, seed)
    for _, y_mix, _ in (
        F.mixup_batch(x, y, lam, n_classes, generator=gen),
        F.cutmix_batch(x, y, n_classes, alpha=0.5, generator=gen),
    ):
        assert y_mix.shape == (x.shape[0], n_classes)
        assert bool((y_mix >= 0).all()) and bool((y_mix <= 1).all())
        torch.testing.assert_close(y_mix.sum(1), torch.ones(x.shape[0]))
    smoothed = F.smooth_labels(torch.zeros(x.shape[0], n_classes), y, lam)
    assert bool((smoothed >= 0).all())
    torch.testing.assert_close(smoothed.sum(1), torch.ones(x.shape[0]))


@given(
    st.floats(-10, 10),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(3, 20),
    st.integers(3, 20),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_blur_keeps_a_constant_interior(value, batch, channels, height, width, s_h, s_w) -> None:
    x = torch.full((batch, channels, height, width), value, dtype=torch.float64)
    out = F.blur_2d(x, (s_h, s_w))
    # Output (i, j) reads input rows s·i-1 .. s·i+1: inside the image, the filter sums to 1.
    rows = [i for i in range(out.shape[2]) if 1 <= s_h * i <= height - 2]
    cols = [j for j in range(out.shape[3]) if 1 <= s_w * j <= width - 2]
    interior = out[:, :, rows][:, :, :, cols]
    torch.testing.assert_close(interior, torch.full_like(interior, value))
    assert out.shape[2:] == ((height - 1) // s_h + 1, (width - 1) // s_w + 1)


@given(image_batches(max_side=30), st.floats(0.05, 1.0), st.sampled_from(["resize", "crop"]), seeds)
def test_resize_output_size(x, scale, mode, seed) -> None:
    height, width = x.shape[-2:]
    size = (math.floor(height * scale), math.floor(width * scale))
    if min(size) < 1:
        return  # refused with a ValueError, tested separately
    out, _ = F.resize_inputs(
        x, torch.zeros(x.shape[0]), scale, mode, generator=torch.Generator().manual_seed(seed)
    )
    assert out.shape == (*x.shape[:2], *size)


@given(image_batches(max_side=20), st.floats(0.0, 0.99), st.floats(0.0, 0.99), seeds)
def test_colout_sizes(x, p_row, p_col, seed) -> None:
    out = F.colout_batch(x, p_row, p_col, generator=torch.Generator().manual_seed(seed))
    height, width = x.shape[-2:]
    assert out.shape == (*x.shape[:2], height - int(p_row * height), width - int(p_col * width))


@given(image_batches(max_side=20), st.integers(1, 4), st.integers(1, 8), st.booleans(), seeds)
def test_cutout_zeroes_at_most_the_holes(x, n_holes, length, per_sample, seed) -> None:
    x = x + 1  # no zeros before
    out = F.cutout(
        x, n_holes, length, per_sample=per_sample, generator=torch.Generator().manual_seed(seed)
    )
    zeros = out == 0
    assert torch.equal(out[~zeros], x[~zeros])
    per_image = zeros[:, 0].flatten(1).sum(1)
    assert bool((per_image <= n_holes * length * length).all())
    assert bool((per_image >= 1).all())  # a centre is always inside the image
    assert torch.equal(zeros, zeros[:, :1].expand_as(zeros))


@given(
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(0, 1),
    st.integers(1, 2),
    st.booleans(),
    st.integers(4, 20),
    st.integers(4, 20),
)
def test_blurmax_pool_has_max_pool_output_size(
    kernel, stride, padding, dilation, ceil, height, width
) -> None:
    padding = min(padding, kernel // 2)
    x = torch.rand(1, 2, height, width)
    try:
        expected = torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil).shape
    except RuntimeError:
        return
    assert F.blurmax_pool2d(x, kernel, stride, padding, dilation, ceil).shape == expected


@given(st.lists(unit, min_size=2, max_size=20), st.floats(0.01, 1.0), unit)
def test_progressive_resizing_scale_is_monotone_and_bounded(progress, initial, finetune) -> None:
    values = [F.progressive_resizing_scale(t, initial, finetune) for t in sorted(progress)]
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert all(initial <= v <= 1.0 for v in values)
    assert F.progressive_resizing_scale(1.0, initial, finetune) == 1.0


@given(
    st.lists(unit, min_size=2, max_size=20),
    unit,
    st.integers(1, 64),
    st.integers(0, 2048),
    st.integers(1, 64),
)
def test_seq_length_schedule_is_monotone_and_bounded(progress, duration, low, span, step) -> None:
    high = low + span
    values = [F.seq_length_warmup_length(t, duration, low, high, step) for t in sorted(progress)]
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert all(low <= v <= high for v in values)
    assert all(v in (low, high) or v % step == 0 for v in values)


@given(st.floats(0.01, 1e4), st.floats(0.01, 1e4), st.floats(0.01, 100))
def test_ema_smoothing_is_monotone_in_half_life_and_bounded(a, b, interval) -> None:
    short, long = sorted((a, b))
    s_short, s_long = F.ema_smoothing(short, interval), F.ema_smoothing(long, interval)
    assert 0.0 <= s_short <= s_long <= 1.0
