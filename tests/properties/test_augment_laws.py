"""Laws of the augment package over image size (width and height drawn independently, 1 to 300),
mode and parameters."""

from __future__ import annotations

import random

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import augment
from augment import primitives as P

GEOMETRIC = [
    augment.rotate,
    augment.shear_x,
    augment.shear_y,
    augment.translate_x,
    augment.translate_y,
]
ALL_OPS = augment.augmentation_sets["all"] + augment.augmentation_sets["original"][9:]
SET_NAMES = sorted(augment.augmentation_sets)


@st.composite
def pil_images(draw: st.DrawFn, max_side: int = 300) -> Image.Image:
    """An 'RGB' or 'L' image with independently drawn width and height, seeded by Hypothesis."""
    w = draw(st.integers(1, max_side))
    h = draw(st.integers(1, max_side))
    mode = draw(st.sampled_from(["RGB", "L"]))
    lo = draw(st.integers(0, 255))
    hi = draw(st.integers(lo, 255))
    rs = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    return Image.fromarray(rs.integers(lo, hi + 1, size=shape, dtype=np.uint8), mode)


levels = st.floats(0.0, 10.0, allow_nan=False)
seeds = st.integers(0, 2**32 - 1)


def as_tensor(img: Image.Image) -> torch.Tensor:
    a = np.array(img)
    return torch.from_numpy(a.reshape(*a.shape[:2], -1)).permute(2, 0, 1).contiguous()


@given(img=pil_images(), op=st.sampled_from(ALL_OPS), level=levels, seed=seeds)
def test_primitives_keep_size_and_mode_and_never_alias(img, op, level, seed) -> None:
    before = img.tobytes()
    out = op(img, level, rng=random.Random(seed))
    assert isinstance(out, Image.Image) and out is not img
    assert (out.size, out.mode) == (img.size, img.mode)
    assert img.tobytes() == before


@given(img=pil_images(), op=st.sampled_from(GEOMETRIC), seed=seeds)
def test_level_zero_geometric_ops_are_the_identity(img, op, seed) -> None:
    assert op(img, 0, rng=random.Random(seed)).tobytes() == img.tobytes()


@given(img=pil_images(max_side=64), seed=seeds, l1=levels, l2=levels)
def test_brightness_and_contrast_move_every_pixel_monotonically_with_level(
    img, seed, l1, l2
) -> None:
    """The symmetric forms: a higher level pushes each pixel further the same way."""
    lo, hi = sorted((l1, l2))
    for op in (augment.brightness, augment.contrast):
        # the same seed draws the same direction at both levels
        a, b, c = (
            np.array(op(img, lv, rng=random.Random(seed))).astype(int) for lv in (0.0, lo, hi)
        )
        assert np.all((b - a) * (c - b) >= 0)
        assert np.all(np.abs(c - a) >= np.abs(b - a))


@given(
    img=pil_images(max_side=96),
    severity=levels,
    depth=st.sampled_from([-1, 1, 2, 3]),
    width=st.integers(1, 4),
    alpha=st.floats(0.05, 20.0),
    set_name=st.sampled_from(SET_NAMES),
    seed=seeds,
)
def test_augmix_keeps_kind_and_is_reproducible(img, severity, depth, width, alpha, set_name, seed):
    kwargs = dict(
        severity=severity, depth=depth, width=width, alpha=alpha, augmentation_set=set_name
    )
    out = augment.augment_and_mix(img, **kwargs, rng=random.Random(seed))
    assert (out.size, out.mode) == (img.size, img.mode)
    assert (
        out.tobytes() == augment.augment_and_mix(img, **kwargs, rng=random.Random(seed)).tobytes()
    )
    t = augment.augment_and_mix(as_tensor(img), **kwargs, rng=np.random.default_rng(seed))
    assert t.dtype == torch.uint8 and t.shape == as_tensor(img).shape
    again = augment.augment_and_mix(as_tensor(img), **kwargs, rng=np.random.default_rng(seed))
    assert torch.equal(t, again)


@given(
    img=pil_images(max_side=96),
    severity=st.floats(1.0, 10.0, allow_nan=False),  # RandAugment's M is 1 to 10
    depth=st.integers(0, 4),
    set_name=st.sampled_from(SET_NAMES),
    seed=seeds,
)
def test_randaugment_keeps_kind_and_is_reproducible(img, severity, depth, set_name, seed) -> None:
    kwargs = dict(severity=severity, depth=depth, augmentation_set=set_name)
    t = augment.RandAugment(**kwargs, rng=random.Random(seed))
    out = t(img)
    assert (out.size, out.mode) == (img.size, img.mode)
    assert out.tobytes() == augment.randaugment(img, **kwargs, rng=random.Random(seed)).tobytes()
    x = augment.RandAugment(**kwargs, rng=np.random.default_rng(seed))(as_tensor(img))
    assert x.dtype == torch.uint8 and x.shape == as_tensor(img).shape


@given(
    img=pil_images(max_side=64), width=st.integers(1, 5), alpha=st.floats(0.05, 50.0), seed=seeds
)
def test_augmix_of_identical_chains_is_the_image(img, width, alpha, seed) -> None:
    """A convex combination of copies of the image is the image, after rounding."""
    keep = [lambda im, lv: im.copy()]
    out = augment.augment_and_mix(
        img, width=width, alpha=alpha, augmentation_set=keep, rng=random.Random(seed)
    )
    assert out.tobytes() == img.tobytes()


@given(img=pil_images(max_side=64), seed=seeds, severity=levels)
def test_augmix_stays_between_the_image_and_its_chains(img, seed, severity) -> None:
    """With one op that only brightens, applied once per chain, the mix lies between the image
    and the brightened image."""
    op = [lambda im, lv: P.brightness_original(im, 10)]  # factor 1.9: every pixel goes up
    out = augment.augment_and_mix(
        img, severity=severity, depth=1, augmentation_set=op, rng=random.Random(seed)
    )
    out = np.array(out)
    a = np.array(img)
    top = np.array(P.brightness_original(img, 10))
    assert np.all(out >= a) and np.all(out <= top)


@given(
    sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=3),
    seed=seeds,
)
def test_transforms_handle_any_size_in_sequence(sizes, seed) -> None:
    augmix = augment.AugMix(rng=random.Random(seed))
    ra = augment.RandAugment(rng=random.Random(seed))
    for w, h in sizes:
        img = Image.new("RGB", (w, h), (seed % 256, 40, 200))
        assert augmix(img).size == (w, h)
        assert ra(img).size == (w, h)
