"""augment_and_mix and randaugment on tensors as Composer's augmix_image / randaugment_image
take them: one (C, H, W) float tensor in [0, 1] (float16/32/64) comes back in its dtype, shape
and device; an (N, C, H, W) batch is each image in turn."""

from __future__ import annotations

import random

import pytest
import torch

from augment import augment_and_mix, randaugment

pytestmark = pytest.mark.parametrize("function", [augment_and_mix, randaugment])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("channels", [1, 3])
def test_float_tensor_in_float_tensor_out_equal_to_the_uint8_path(
    function, dtype, channels
) -> None:
    x = torch.rand(channels, 9, 14, generator=torch.Generator().manual_seed(0)).to(dtype)
    before = x.clone()
    out = function(x, rng=random.Random(5))
    assert torch.equal(x, before)  # the input is not modified
    assert out.dtype == dtype and out.shape == x.shape and out.device == x.device
    levels = (x.double() * 255).round().to(torch.uint8)
    expected = function(levels, rng=random.Random(5))
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    assert torch.equal(out, (expected.to(compute) / 255).to(dtype))


def test_batch_of_images_is_each_image_in_turn(function) -> None:
    batch = torch.rand(3, 3, 8, 10, generator=torch.Generator().manual_seed(1))
    out = function(batch, rng=random.Random(2))
    rng = random.Random(2)
    expected = torch.stack([function(image, rng=rng) for image in batch])
    assert out.shape == batch.shape and torch.equal(out, expected)
    assert function(batch[:0]).shape == (0, 3, 8, 10)
    u8 = (batch * 255).round().to(torch.uint8)
    assert function(u8, rng=random.Random(2)).dtype == torch.uint8


@pytest.mark.parametrize("bad", [1.5, -0.25, float("nan")])
def test_float_values_outside_the_unit_interval_are_refused(function, bad) -> None:
    x = torch.rand(3, 4, 4)
    x[0, 1, 2] = bad
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        function(x)


def test_other_tensor_dtypes_are_refused_with_the_float_option_named(function) -> None:
    with pytest.raises(TypeError, match=r"float16/32/64 tensor with values in \[0, 1\]"):
        function(torch.zeros(3, 4, 4, dtype=torch.int32))
