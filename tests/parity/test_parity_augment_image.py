"""AugMix and RandAugment on one image against Composer 0.32.1's ``augmix_image`` and
``randaugment_image`` (both in one file: the same contract): every kind Composer's own
functional test feeds them (a PIL image, a ``(C, H, W)`` tensor, an ``(N, C, H, W)`` batch;
uint8, float16, float32, float64) comes back of the same type and shape, and here also of the
same dtype (Composer returns float32 for float tensors). Side by side: the same types and
shapes as Composer (its randomness is NumPy's global RNG, so the pixels are not compared)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image

from augment import augment_and_mix, randaugment

OURS = {"augmix_image": augment_and_mix, "randaugment_image": randaugment}


def _image(kind: str, dtype: torch.dtype):
    g = torch.Generator().manual_seed(123)
    if kind == "pillow":
        pixels = np.random.default_rng(123).integers(256, size=(6, 5, 3)).astype(np.uint8)
        return Image.fromarray(pixels, mode="RGB")
    shape = (3, 6, 5) if kind == "single" else (4, 3, 6, 5)
    if dtype == torch.uint8:
        return torch.randint(256, shape, generator=g, dtype=torch.uint8)
    return torch.rand(shape, generator=g).to(dtype)


@pytest.mark.parametrize("name", list(OURS))
@pytest.mark.parametrize("kind", ["pillow", "single", "batch"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64])
def test_type_shape_and_dtype_are_kept(name, kind, dtype) -> None:
    img = _image(kind, dtype)
    out = OURS[name](img, rng=random.Random(0))
    assert type(out) is type(img)
    if isinstance(img, Image.Image):
        assert out.size == img.size and out.mode == img.mode
    else:
        assert out.shape == img.shape and out.dtype == img.dtype
        assert bool(((out >= 0) & (out <= (255 if dtype == torch.uint8 else 1))).all())


@pytest.mark.parametrize("name", list(OURS))
@pytest.mark.parametrize("kind", ["pillow", "single", "batch"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_side_by_side_types_and_shapes_with_composer(name, kind, dtype) -> None:
    cf = pytest.importorskip("composer.functional")
    img = _image(kind, dtype)
    theirs = getattr(cf, name)(img)
    ours = OURS[name](img, rng=random.Random(0))
    assert type(ours) is type(theirs)
    if isinstance(img, Image.Image):
        assert ours.size == theirs.size
    else:
        assert ours.shape == theirs.shape
