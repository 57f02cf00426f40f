"""progressive_resizing_scale and resize_inputs."""

from __future__ import annotations

import math

import pytest
import torch

import functional as F


def test_scale_schedule_values() -> None:
    assert F.progressive_resizing_scale(0.0) == 0.5
    assert F.progressive_resizing_scale(0.4) == pytest.approx(0.75)
    assert F.progressive_resizing_scale(0.8) == 1.0
    assert F.progressive_resizing_scale(1.0) == 1.0
    assert F.progressive_resizing_scale(
        0.5, initial_scale=0.2, finetune_fraction=0.0
    ) == pytest.approx(0.6)
    assert F.progressive_resizing_scale(0.0, initial_scale=0.3, finetune_fraction=1.0) == 1.0
    assert F.progressive_resizing_scale(0.3, initial_scale=1.0) == 1.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"progress": 1.5}, "progress must be in"),
        ({"initial_scale": 0.0}, "initial_scale must be in \\(0.0, 1.0\\]"),
        ({"initial_scale": 1.2}, "initial_scale"),
        ({"finetune_fraction": -0.1}, "finetune_fraction must be in"),
    ],
)
def test_scale_schedule_rejects_bad_arguments(kwargs, match) -> None:
    args = {"progress": 0.5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        F.progressive_resizing_scale(**args)


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize(
    "height,width,scale",
    [(224, 224, 0.5), (100, 37, 0.29), (10, 10, 0.7), (33, 65, 0.999), (5, 7, 0.2)],
)
def test_output_size_is_floor_of_size_times_scale(mode, height, width, scale) -> None:
    X = torch.rand(2, 3, height, width)
    out, _ = F.resize_inputs(X, torch.arange(2), scale, mode)
    assert out.shape == (2, 3, math.floor(height * scale), math.floor(width * scale))


def test_resize_is_bilinear_interpolation_at_the_requested_scale() -> None:
    X = torch.rand(3, 2, 20, 15, dtype=torch.float64)
    out, y = F.resize_inputs(X, torch.arange(3), 0.45)
    expected = torch.nn.functional.interpolate(
        X, scale_factor=0.45, mode="bilinear", align_corners=False, recompute_scale_factor=False
    )
    torch.testing.assert_close(out, expected)
    assert torch.equal(y, torch.arange(3))


def test_resize_targets_float_bilinear_and_integer_nearest() -> None:
    X = torch.rand(2, 3, 16, 16)
    dense = torch.rand(2, 4, 16, 16)
    _, dense_out = F.resize_inputs(X, dense, 0.5, resize_targets=True)
    torch.testing.assert_close(dense_out, F.resize_inputs(dense, torch.arange(2), 0.5)[0])
    masks = torch.randint(0, 5, (2, 16, 16))
    _, mask_out = F.resize_inputs(X, masks, 0.5, resize_targets=True)
    assert mask_out.shape == (2, 8, 8) and mask_out.dtype == torch.long
    assert set(mask_out.unique().tolist()) <= set(masks.unique().tolist())
    assert torch.equal(mask_out, masks[:, ::2, ::2])  # nearest at scale 1/2


def test_uint8_images_are_interpolated_and_rounded() -> None:
    X = torch.randint(0, 256, (2, 3, 12, 12), dtype=torch.uint8)
    out, _ = F.resize_inputs(X, torch.arange(2), 0.5)
    expected = F.resize_inputs(X.float(), torch.arange(2), 0.5)[0].round().to(torch.uint8)
    assert out.dtype == torch.uint8 and torch.equal(out, expected)


def test_crop_takes_one_window_and_the_targets_at_the_same_window() -> None:
    height, width = 12, 10
    X = (
        (torch.arange(height).view(-1, 1) * 100 + torch.arange(width))
        .expand(2, 3, height, width)
        .clone()
    )
    y = X[:, 0].clone() + 7
    tops, lefts = set(), set()
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        Xc, yc = F.resize_inputs(X, y, 0.5, "crop", resize_targets=True, generator=gen)
        top, left = int(Xc[0, 0, 0, 0]) // 100, int(Xc[0, 0, 0, 0]) % 100
        assert torch.equal(Xc, X[..., top : top + 6, left : left + 5])
        assert torch.equal(yc, y[..., top : top + 6, left : left + 5])
        tops.add(top)
        lefts.add(left)
    assert tops == set(range(7)) and lefts == set(range(6))  # every valid window position


def test_crop_returns_a_copy() -> None:
    X = torch.rand(2, 3, 8, 8)
    Xc, _ = F.resize_inputs(X, torch.arange(2), 0.5, "crop")
    Xc.zero_()
    assert X.abs().sum() > 0


def test_no_change_returns_the_inputs() -> None:
    X, y = torch.rand(2, 3, 8, 8), torch.arange(2)
    out, y_out = F.resize_inputs(X, y, 1.0, "crop")
    assert out is X and y_out is y


def test_resize_may_upsample() -> None:
    out, _ = F.resize_inputs(torch.rand(1, 1, 4, 6), torch.zeros(1), 1.5)
    assert out.shape == (1, 1, 6, 9)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"mode": "bilinear"}, ValueError, "mode must be one of 'resize', 'crop'"),
        ({"scale_factor": 0.0}, ValueError, "scale_factor must be a finite number > 0"),
        (
            {"scale_factor": 1.5, "mode": "crop"},
            ValueError,
            "scale_factor must be in \\(0.0, 1.0\\]",
        ),
        ({"scale_factor": 0.05}, ValueError, "shrinks the 8x8 images to nothing"),
        ({"X": torch.rand(3, 8, 8)}, ValueError, "X must have 4 dimensions"),
        (
            {"y": torch.rand(2, 3, 1, 8), "scale_factor": 0.5, "resize_targets": True},
            ValueError,
            "shrinks the 1x8 targets y to nothing",
        ),
        (
            {"y": torch.arange(2), "resize_targets": True},
            ValueError,
            "y must have 3 or 4 dimensions",
        ),
        ({"y": torch.rand(3, 8, 8), "resize_targets": True}, ValueError, "batch size"),
        ({"resize_targets": "yes"}, TypeError, "resize_targets must be a bool"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    args = {"X": torch.rand(2, 3, 8, 8), "y": torch.arange(2), "scale_factor": 0.5}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        F.resize_inputs(**args)


# --- issue 13 regressions ---------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e6, 1e12, 1e300])
def test_huge_scale_is_refused_at_entry(scale) -> None:
    X = torch.rand(2, 3, 32, 32)
    with pytest.raises(ValueError, match=r"scale_factor=.*output plane"):
        F.resize_inputs(X, torch.zeros(2), scale)


def test_largest_allowed_plane_is_documented_limit() -> None:
    from functional.progressive_resizing import MAX_PLANE

    assert MAX_PLANE == 2**31 - 1
    X = torch.rand(1, 1, 2, 2)
    with pytest.raises(ValueError, match=r"output plane|pixels per plane"):
        F.resize_inputs(X, torch.zeros(1), 40_000.0)  # 80000 x 80000 > 2**31 - 1


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_int32_near_the_maximum_does_not_wrap(mode) -> None:
    top = torch.iinfo(torch.int32).max
    X = torch.full((1, 1, 8, 8), top, dtype=torch.int32)
    X[..., ::2] = top - 7
    out, _ = F.resize_inputs(X, torch.zeros(1), 0.5, mode, generator=torch.Generator())
    assert out.dtype == torch.int32
    assert bool(((out >= top - 7) & (out <= top)).all()), out.unique()


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_channels_last_is_kept(mode) -> None:
    X = torch.rand(2, 3, 9, 10).to(memory_format=torch.channels_last)
    out, _ = F.resize_inputs(X, torch.zeros(2), 0.5, mode)
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_crop_equals_the_window_at_the_drawn_offsets() -> None:
    # the gather of offset + arange is the same window the old slicing took
    X = torch.arange(2 * 3 * 10 * 9, dtype=torch.float32).view(2, 3, 10, 9)
    out, _ = F.resize_inputs(
        X, torch.zeros(2), 0.5, "crop", generator=torch.Generator().manual_seed(4)
    )
    g = torch.Generator().manual_seed(4)
    top = int(torch.randint(0, 10 - 5 + 1, (), generator=g))
    left = int(torch.randint(0, 9 - 4 + 1, (), generator=g))
    assert torch.equal(out, X[..., top : top + 5, left : left + 4])


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("shape", [(0, 0, 6, 6), (0, 3, 6, 6), (2, 0, 6, 6)])
def test_empty_batches_resize_to_the_scaled_shape(shape, mode):
    """No samples and/or no channels (found by fuzzing: F.interpolate refused (0, 0, H, W))."""
    x = torch.zeros(shape)
    y = torch.zeros(shape[0], dtype=torch.long)
    out, y_out = F.resize_inputs(x, y, 0.5, mode)
    assert out.shape == (*shape[:2], 3, 3) and out.dtype == x.dtype and torch.equal(y_out, y)


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_int64_extremes_stay_within_the_input_range(mode):
    """float64 rounds int64 beyond 2**53 (found by fuzzing: a constant 2**63-1 image came back
    as 2**63-1024, below every input value)."""
    top = torch.iinfo(torch.int64).max
    x = torch.full((2, 1, 6, 6), top, dtype=torch.int64)
    out, _ = F.resize_inputs(x, torch.zeros(2, dtype=torch.long), 0.5, mode)
    assert torch.equal(out, torch.full_like(out, top))


# Targets of another size than the inputs, and Composer's schedule options.


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale", [0.5, 0.75])
def test_targets_of_another_size_are_resized_consistently(mode, scale) -> None:
    # A mask at half resolution: pixel (r, c) of the mask covers pixels (2r..2r+1, 2c..2c+1).
    mask = torch.arange(16 * 16).view(1, 16, 16).expand(2, 16, 16).clone()
    image = mask.repeat_interleave(2, -2).repeat_interleave(2, -1).unsqueeze(1).float()
    gen = torch.Generator().manual_seed(3)
    X, y = F.resize_inputs(image, mask, scale, mode, resize_targets=True, generator=gen)
    assert X.shape == (2, 1, int(32 * scale), int(32 * scale))
    assert y.shape == (2, int(16 * scale), int(16 * scale)) and y.dtype == mask.dtype
    if mode == "crop":  # the mask's window starts where the image's does, at half resolution
        corner = int(X[0, 0, 0, 0])
        ty, tx = corner // 16, corner % 16
        assert torch.equal(y, mask[:, ty : ty + y.shape[-2], tx : tx + y.shape[-1]])


@pytest.mark.parametrize("progress", [0.0, 0.1, 0.3, 0.5, 0.55, 0.7, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("delay,finetune", [(0.0, 0.2), (0.5, 0.2), (0.2, 0.2), (0.4, 0.6)])
def test_delay_fraction_follows_composer_schedule(progress, delay, finetune) -> None:
    got = F.progressive_resizing_scale(progress, 0.5, finetune, delay_fraction=delay)
    if progress >= delay:
        expected = 0.5 + 0.5 * min(1.0, (progress - delay) / max(1e-12, 1 - finetune - delay))
    else:
        expected = 0.5
    if progress >= 1 - finetune:
        expected = 1.0
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("width", [32, 31, 224])
@pytest.mark.parametrize("increment", [1, 4, 8])
def test_size_increment_pins_the_width_to_a_multiple(width, increment) -> None:
    previous = 0.0
    for i in range(21):
        t = i / 20
        raw = F.progressive_resizing_scale(t, 0.5, 0.2, delay_fraction=0.2)
        got = F.progressive_resizing_scale(
            t, 0.5, 0.2, delay_fraction=0.2, size_increment=increment, width=width
        )
        pinned = round(width * raw / increment) * increment
        assert got == (1.0 if pinned >= width else pinned / width)
        assert got >= previous
        previous = got


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"delay_fraction": 0.5, "finetune_fraction": 0.6}, "delay_fraction \\+ finetune_fraction"),
        ({"size_increment": 8}, "size_increment and width go together"),
        ({"width": 32}, "size_increment and width go together"),
        ({"size_increment": 0, "width": 32}, "size_increment must be >= 1"),
        ({"delay_fraction": 1.5}, "delay_fraction must be in"),
    ],
)
def test_schedule_option_refusals(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        F.progressive_resizing_scale(0.5, **kwargs)
