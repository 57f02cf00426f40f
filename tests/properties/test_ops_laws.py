"""Laws of the batch, label and schedule ops, stated as Hypothesis properties."""

from __future__ import annotations

import itertools
import math

import pytest
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
    length = min(length, max(x.shape[-2:]))  # larger holes are refused
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


# --- adversarial sweep of the batch and label ops (issue 13) ----------------------------------
# Every op, on batch sizes 0, 1 and 3, every float, integer and bool dtype, contiguous,
# channels_last and transposed layouts, the meta device and inference_mode: the op runs, keeps
# dtype, shape rules and memory format, and leaves finite inputs finite.

_SWEEP_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)


def _sweep_ops(x: torch.Tensor) -> dict:
    batch, device = x.shape[0], x.device
    y = torch.arange(batch, device=device) % 5
    real = x if x.is_floating_point() else x.float()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 5),
    ).to(device=device, dtype=real.dtype)
    index_targets = torch.zeros(batch, *x.shape[2:], dtype=torch.long, device=device)
    return {
        "mixup": lambda: F.mixup_batch(x, y, 0.3, 5)[0],
        "mixup_per_sample": lambda: F.mixup_batch(x, y, torch.rand(batch, device=device), 5)[0],
        "cutmix": lambda: F.cutmix_batch(x, y, 5)[0],
        "cutout": lambda: F.cutout(x, 2, 3),
        "cutout_per_sample": lambda: F.cutout(x, 2, 0.5, per_sample=True),
        "colout_batch": lambda: F.colout_batch(x, 0.3, 0.3),
        "resize": lambda: F.resize_inputs(x, y, 0.5)[0],
        "resize_up": lambda: F.resize_inputs(x, y, 1.5)[0],
        "crop": lambda: F.resize_inputs(x, y, 0.5, "crop")[0],
        "smooth_labels": lambda: F.smooth_labels(real, index_targets, 0.1),
        "select_using_loss": lambda: F.select_using_loss(
            real, y, model, torch.nn.functional.cross_entropy, 0.5
        )[0],
    }


def _sweep_input(batch: int, dtype: torch.dtype, layout: str, device: str) -> torch.Tensor:
    shape = (batch, 3, 6, 7) if layout == "transposed" else (batch, 3, 7, 6)
    if device == "meta":
        x = torch.empty(shape, dtype=dtype, device="meta")
    else:
        values = torch.rand(
            shape, generator=torch.Generator().manual_seed(batch), dtype=torch.float64
        )
        x = (values > 0.5).to(dtype) if dtype == torch.bool else (values * 100).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(-1, -2)
    return x


_SWEEP = [
    *(
        (b, layout, "cpu", _SWEEP_DTYPES)
        for b in (0, 1, 3)
        for layout in ("contiguous", "channels_last", "transposed")
    ),
    # meta tensors go through Python meta kernels (slow): fewer dtypes
    (3, "contiguous", "meta", (torch.uint8, torch.int32, torch.float32)),
    (3, "channels_last", "meta", (torch.bool, torch.bfloat16, torch.float64)),
    (0, "contiguous", "meta", (torch.float32,)),
]


@pytest.mark.parametrize(("batch", "layout", "device", "dtypes"), _SWEEP)
def test_adversarial_sweep_of_the_batch_ops(batch, layout, device, dtypes) -> None:
    for dtype in dtypes:
        x = _sweep_input(batch, dtype, layout, device)
        for inference in (False, True):
            for name, op in _sweep_ops(x).items():
                where = f"{name} {dtype} inference_mode={inference}"
                with torch.inference_mode(inference):
                    out = op()
                if name not in ("smooth_labels", "select_using_loss"):
                    assert out.dtype == dtype, where
                assert out.device == x.device, where
                if layout == "channels_last" and batch > 1 and out.ndim == 4:
                    assert out.is_contiguous(memory_format=torch.channels_last), where
                if device == "cpu" and out.is_floating_point() and out.numel():
                    assert bool(torch.isfinite(out.float()).all()), where


@given(
    st.floats(min_value=5e-324, max_value=1e300, allow_subnormal=True),
    st.integers(1, 9),
    st.integers(1, 9),
    seeds,
)
def test_cutmix_labels_stay_a_distribution_for_any_alpha(alpha, height, width, seed) -> None:
    x = torch.rand(3, 2, height, width)
    y_mix = F.cutmix_batch(
        x, torch.tensor([0, 1, 2]), 3, alpha=alpha, generator=torch.Generator().manual_seed(seed)
    )[1]
    assert bool(((y_mix >= 0) & (y_mix <= 1)).all())
    torch.testing.assert_close(y_mix.sum(1), torch.ones(3))


@given(st.integers(1, 10**40), st.integers(1, 5), st.integers(1, 9), st.integers(1, 9))
def test_cutout_accepts_any_side_up_to_the_image(length, n_holes, height, width) -> None:
    x = torch.ones(2, 1, height, width)
    if length > max(height, width):  # would blank most or all of every image: refused
        with pytest.raises(ValueError, match=f"length={length} pixels is larger than"):
            F.cutout(x, n_holes, length)
        return
    out = F.cutout(x, n_holes, length, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape and bool(((out == 0) | (out == 1)).all())
    assert bool((out == 0).any())  # a hole centred on a pixel always covers that pixel


@given(st.sampled_from([float("nan"), float("inf"), -float("inf")]), seeds)
def test_cutout_and_cutmix_holes_replace_non_finite_values(bad, seed) -> None:
    x = torch.full((2, 1, 5, 4), bad)
    out = F.cutout(x, 1, 5, generator=torch.Generator().manual_seed(seed))
    hole = out == 0  # a hole is 0, never NaN (not a multiplication by a 0/1 mask)
    assert bool(hole.any()) and bool((hole | (out == x) | out.isnan()).all())
    clean = torch.zeros(2, 1, 5, 4)
    mixed = F.cutmix_batch(clean, torch.tensor([0, 1]), 2, bbox=(0, 0, 2, 2))[0]
    assert bool((mixed == 0).all())


def test_bad_scalars_are_refused_at_entry() -> None:
    x, y = torch.rand(2, 3, 4, 4), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="logits must have at least one class"):
        F.smooth_labels(torch.zeros(2, 0), y, 0.1)
    with pytest.raises(TypeError, match="alpha must be a float or a 0-d floating tensor"):
        F.smooth_labels(torch.zeros(2, 3), y, torch.tensor(1))
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]"):
        F.smooth_labels(torch.zeros(2, 3), y, torch.tensor(float("nan")))
    with pytest.raises(TypeError, match="must be a real tensor for mode='resize'"):
        F.resize_inputs(x.to(torch.complex64), y, 0.5)
    with pytest.raises(ValueError, match="bbox must be"):
        F.cutmix_batch(x, y, 2, bbox=torch.tensor([3, 3, 1, 1]))
    with pytest.raises(ValueError, match="must not be NaN"):
        F.colout_batch(x, float("nan"), 0.1)
