"""The thirteen primitives (and the reference enhancement forms) against independent references."""

from __future__ import annotations

import inspect
import pickle
import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageOps

import augment
from augment import primitives as P
from augment._ops import kernels_of
from tests.augment import _refs as R

MODES = ["RGB", "L"]
SIZES = [(1, 1), (1, 7), (5, 1), (13, 31), (40, 17)]  # (height, width), square and not
RANGES = [(0, 255), (3, 9), (100, 101), (40, 200), (77, 77)]  # (lo, hi) values
LEVELS = [0.0, 1.0, 2.5, 4.99, 7.5, 10.0]

GEOMETRIC = {
    "rotate": (augment.rotate, lambda lv, s, w, h: R.rotation(3 * lv * s)),
    "shear_x": (augment.shear_x, lambda lv, s, w, h: R.shear_x(0.03 * lv * s)),
    "shear_y": (augment.shear_y, lambda lv, s, w, h: R.shear_y(0.03 * lv * s)),
    "translate_x": (augment.translate_x, lambda lv, s, w, h: R.shift_x(s * int(lv * w / 30))),
    "translate_y": (augment.translate_y, lambda lv, s, w, h: R.shift_y(s * int(lv * h / 30))),
}
SYMMETRIC = {
    "color": (augment.color, ImageEnhance.Color),
    "contrast": (augment.contrast, ImageEnhance.Contrast),
    "brightness": (augment.brightness, ImageEnhance.Brightness),
    "sharpness": (augment.sharpness, ImageEnhance.Sharpness),
}
ORIGINAL = {
    "color_original": (augment.color_original, ImageEnhance.Color),
    "contrast_original": (augment.contrast_original, ImageEnhance.Contrast),
    "brightness_original": (augment.brightness_original, ImageEnhance.Brightness),
    "sharpness_original": (augment.sharpness_original, ImageEnhance.Sharpness),
}
ALL_OPS = augment.augmentation_sets["all"] + [op for op, _ in ORIGINAL.values()]


@pytest.fixture
def rs() -> np.random.Generator:
    return np.random.default_rng(1234)


# ----------------------------------------------------------------------- level scaling


def test_level_scaling_table() -> None:
    assert [P.posterize_bits(lv) for lv in (0, 2.49, 2.5, 5, 7.49, 7.5, 10)] == [
        4,
        4,
        3,
        2,
        2,
        1,
        1,
    ]
    assert [P.solarize_threshold(lv) for lv in (0, 1, 5, 10)] == [256, 231, 128, 0]
    assert P.symmetric_factor(10, -1) == pytest.approx(0.1)
    assert P.symmetric_factor(10, 1) == pytest.approx(1.9)
    assert P.symmetric_factor(0, -1) == 1.0
    assert P.original_factor(0) == pytest.approx(0.1)
    assert P.original_factor(10) == pytest.approx(1.9)
    # strength grows with the level in both directions for the symmetric form
    dist = [abs(P.symmetric_factor(lv, s) - 1) for s in (-1, 1) for lv in (0, 3, 6, 9)]
    assert dist[:4] == sorted(dist[:4]) and dist[4:] == sorted(dist[4:])


# ------------------------------------------------------------------ point operations


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", LEVELS)
def test_solarize_and_posterize_match_reference(rs, mode, level) -> None:
    for h, w in SIZES:
        img = R.image(rs, h, w, mode)
        a = R.arr(img)
        expect_sol = R.solarize(a, 256 - int(level * 25.6))
        assert np.array_equal(R.arr(augment.solarize(img, level)), expect_sol)
        bits = 4 - min(int(level * 0.4), 3)
        assert np.array_equal(R.arr(augment.posterize(img, level)), R.posterize(a, bits))


@pytest.mark.parametrize("mode", MODES)
def test_autocontrast_matches_reference(rs, mode) -> None:
    for (h, w), (lo, hi) in zip(SIZES, RANGES, strict=True):
        img = R.image(rs, h, w, mode, lo, hi)
        out = R.arr(augment.autocontrast(img, 5))
        assert np.array_equal(out, R.autocontrast(R.arr(img)))
        # and within rounding of Pillow's own (which truncates instead of rounding)
        assert np.abs(out.astype(int) - R.arr(ImageOps.autocontrast(img))).max() <= 1


@pytest.mark.parametrize("mode", MODES)
def test_equalize_matches_reference_and_pillow(rs, mode) -> None:
    for (h, w), (lo, hi) in zip(SIZES, RANGES, strict=True):
        img = R.image(rs, h, w, mode, lo, hi)
        out = R.arr(augment.equalize(img, 0))
        assert np.array_equal(out, R.equalize(R.arr(img)))
        assert np.array_equal(out, R.arr(ImageOps.equalize(img)))


def test_flat_channel_is_left_alone_by_autocontrast_and_equalize() -> None:
    img = Image.new("RGB", (9, 4), (0, 128, 255))
    for op in (augment.autocontrast, augment.equalize):
        assert op(img, 10).tobytes() == img.tobytes()


# --------------------------------------------------------------------- geometric ops


@pytest.mark.parametrize("name", list(GEOMETRIC))
@pytest.mark.parametrize("mode", MODES)
def test_geometric_ops_match_inverse_mapping(rs, name, mode) -> None:
    op, coords = GEOMETRIC[name]
    signs_seen = set()
    for seed, ((h, w), level) in enumerate(
        [(s, lv) for s in [*SIZES, (60, 90), (90, 60)] for lv in (1.0, 5.5, 10.0)]
    ):
        img = R.image(rs, h, w, mode)
        a = R.arr(img)
        out = R.arr(op(img, level, rng=random.Random(seed)))
        assert out.shape == a.shape
        errors = {s: R.mismatch(out, R.inverse_map(a, coords(level, s, w, h))) for s in (1, -1)}
        sign = min(errors, key=errors.get)
        # Pillow's nearest-neighbour affine runs in 16.16 fixed point: a rotated pixel centre
        # that lands within ~1e-5 of a pixel edge may round the other way. Shears and shifts
        # are exact.
        assert errors[sign] <= (0.01 if name == "rotate" else 0.0), (h, w, level, errors)
        if errors[1] != errors[-1]:
            signs_seen.add(sign)
    assert signs_seen == {1, -1}, "both directions must occur"


def test_rotate_is_pillows_rotate(rs) -> None:
    for seed, (h, w) in enumerate([*SIZES, (64, 48)]):
        img = R.image(rs, h, w, "RGB")
        out = augment.rotate(img, 8.5, rng=random.Random(seed)).tobytes()
        pillow = {img.rotate(d, resample=Image.Resampling.NEAREST).tobytes() for d in (25.5, -25.5)}
        assert out in pillow


@pytest.mark.parametrize("name", [*GEOMETRIC, "solarize"])
def test_level_zero_is_identity(rs, name) -> None:
    op = augment.solarize if name == "solarize" else GEOMETRIC[name][0]
    for h, w in SIZES:
        for mode in MODES:
            img = R.image(rs, h, w, mode)
            out = op(img, 0, rng=random.Random(0))
            assert out is not img
            assert out.tobytes() == img.tobytes()


def test_translate_is_an_exact_shift_of_a_third_at_level_10(rs) -> None:
    img = R.image(rs, 9, 30, "L")
    a = R.arr(img)
    outs = {augment.translate_x(img, 10, rng=random.Random(s)).tobytes() for s in range(20)}
    left = np.zeros_like(a)
    left[:, :20] = a[:, 10:]
    right = np.zeros_like(a)
    right[:, 10:] = a[:, :20]
    assert outs == {left.tobytes(), right.tobytes()}


# ------------------------------------------------------------------------ enhancements


@pytest.mark.parametrize("name", list(SYMMETRIC))
@pytest.mark.parametrize("mode", MODES)
def test_symmetric_enhancements_match_pillow_at_one_plus_minus(rs, name, mode) -> None:
    op, enhancer = SYMMETRIC[name]
    for seed, level in enumerate([0.0, 2.0, 5.0, 8.0, 10.0]):
        for h, w in [(1, 1), (2, 9), (23, 11)]:
            img = R.image(rs, h, w, mode)
            out = op(img, level, rng=random.Random(seed)).tobytes()
            candidates = {enhancer(img).enhance(1 + 0.09 * level * s).tobytes(): s for s in (1, -1)}
            assert out in candidates, (name, mode, level, h, w)


@pytest.mark.parametrize("mode", MODES)
def test_sharpness_small_and_large_images_match_pillow(rs, mode) -> None:
    """Below ~48x48 pixels the blur runs in Pillow, above in NumPy: both bit-exact."""
    for h, w in [(3, 3), (2, 50), (49, 51), (80, 33)]:
        img = R.image(rs, h, w, mode)
        for level in (0.5, 10.0):
            expected = ImageEnhance.Sharpness(img).enhance(0.1 + 0.18 * level).tobytes()
            assert augment.sharpness_original(img, level).tobytes() == expected


@pytest.mark.parametrize("name", list(SYMMETRIC))
def test_symmetric_enhancements_go_both_ways(rs, name) -> None:
    op, enhancer = SYMMETRIC[name]
    img = R.image(rs, 12, 10, "RGB")
    outs = {op(img, 10, rng=random.Random(s)).tobytes() for s in range(16)}
    assert outs == {enhancer(img).enhance(f).tobytes() for f in (0.1, 1.9)}


@pytest.mark.parametrize("name", list(ORIGINAL))
@pytest.mark.parametrize("mode", MODES)
def test_original_enhancements_match_pillow_at_reference_factor(rs, name, mode) -> None:
    op, enhancer = ORIGINAL[name]
    for level in (0.0, 0.1, 3.3, 5.0, 10.0):
        img = R.image(rs, 14, 9, mode)
        expected = enhancer(img).enhance(0.1 + 0.18 * level)
        assert op(img, level).tobytes() == expected.tobytes()


def test_brightness_and_contrast_against_numpy(rs) -> None:
    img = R.image(rs, 16, 21, "RGB")
    a = R.arr(img).astype(np.float64)
    for f in (0.1, 0.55, 1.45, 1.9):
        level = abs(f - 1) / 0.09
        sign = 1 if f > 1 else -1
        outs = {augment.brightness(img, level, rng=random.Random(s)).tobytes() for s in range(12)}
        expect = np.clip(np.floor(a * f + 1e-4), 0, 255).astype(np.uint8)
        assert expect.tobytes() in outs, sign
        grey = np.array(img.convert("L"), dtype=np.float64)
        mean = int(grey.mean() + 0.5)
        expect_c = np.clip(np.floor(mean + f * (a - mean) + 1e-4), 0, 255).astype(np.uint8)
        outs_c = {augment.contrast(img, level, rng=random.Random(s)).tobytes() for s in range(12)}
        assert expect_c.tobytes() in outs_c


def test_color_leaves_grey_images_alone(rs) -> None:
    img = R.image(rs, 6, 8, "L")
    assert augment.color(img, 10, rng=random.Random(0)).tobytes() == img.tobytes()


# ------------------------------------------------------------------- kinds and checks


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("channels", [3, 1])
def test_tensor_in_tensor_out(rs, op, channels) -> None:
    mode = "RGB" if channels == 3 else "L"
    img = R.image(rs, 11, 19, mode)
    t = torch.from_numpy(R.arr(img).reshape(11, 19, channels)).permute(2, 0, 1).contiguous()
    before = t.clone()
    out = op(t, 7, rng=random.Random(3))
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.uint8 and out.shape == t.shape and out.device == t.device
    assert torch.equal(t, before)
    expected = R.arr(op(img, 7, rng=random.Random(3))).reshape(11, 19, channels)
    assert np.array_equal(out.permute(1, 2, 0).numpy(), expected)


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda f: f.__name__)
def test_output_is_a_new_image_of_same_size_and_mode(rs, op) -> None:
    for mode in MODES:
        img = R.image(rs, 7, 12, mode)
        before = img.tobytes()
        for level in (0, 10):
            out = op(img, level, rng=np.random.default_rng(0))
            assert out is not img
            assert (out.size, out.mode) == (img.size, img.mode)
        assert img.tobytes() == before


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda f: f.__name__)
def test_bad_arguments(op) -> None:
    img = Image.new("RGB", (4, 4))
    with pytest.raises(ValueError, match=r"level must be in \[0.0, 10.0\], got 11"):
        op(img, 11)
    with pytest.raises(ValueError, match=r"level must be in .*got -0.5"):
        op(img, -0.5)
    with pytest.raises(TypeError, match="level must be a real number"):
        op(img, "3")
    with pytest.raises(TypeError, match=r"img must be a PIL\.Image\.Image or a .* tensor"):
        op(np.zeros((4, 4, 3), np.uint8), 3)
    with pytest.raises(ValueError, match="mode 'RGB' or 'L', got mode 'RGBA'"):
        op(Image.new("RGBA", (4, 4)), 3)
    with pytest.raises(TypeError, match=r"torch.uint8 tensor .* got dtype torch.float32"):
        op(torch.zeros(3, 4, 4), 3)
    with pytest.raises(ValueError, match=r"\(C, H, W\) tensor with C = 1 or 3, got shape \(4, 4\)"):
        op(torch.zeros(4, 4, dtype=torch.uint8), 3)
    with pytest.raises(
        TypeError, match=r"rng must be a random\.Random, a numpy\.random\.Generator"
    ):
        op(img, 3, rng=torch.Generator())


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda f: f.__name__)
def test_each_operation_is_one_declared_kernel(op) -> None:
    """A public operation is a plain function of augment.primitives (help, pickling by name,
    doctests) made from its kernel, which the transforms call directly."""
    assert inspect.isfunction(op) and op.__module__ == "augment.primitives"
    assert getattr(P, op.__name__) is op and pickle.loads(pickle.dumps(op)) is op
    level_free = op in (augment.autocontrast, augment.equalize)
    assert str(inspect.signature(op)) == (
        f"(img: 'ImageLike', level: 'float'{' = 0.0' if level_free else ''}, *, "
        "rng: 'RngLike' = None) -> 'ImageLike'"
    )
    (kernel,) = kernels_of([op])
    assert inspect.isfunction(kernel) and kernel is not op  # ours: not wrapped as a caller's op
    img = Image.new("L", (3, 2), 9)
    if level_free:  # the runtime defaults are the signature's
        assert op(img).size == (3, 2)
    else:
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'level'"):
            op(img)


def test_sets() -> None:
    sets = augment.augmentation_sets
    names = [op.__name__ for op in sets["all"]]
    assert names == [
        "autocontrast",
        "equalize",
        "posterize",
        "rotate",
        "solarize",
        "shear_x",
        "shear_y",
        "translate_x",
        "translate_y",
        "color",
        "contrast",
        "brightness",
        "sharpness",
    ]
    assert sets["safe"] == sets["all"][:9]
    assert sets["original"][:9] == sets["all"][:9]
    assert [op.__name__ for op in sets["original"][9:]] == [
        "color_original",
        "contrast_original",
        "brightness_original",
        "sharpness_original",
    ]
    assert sets["augmentations_all"] is sets["all"]
    assert sets["augmentations_corruption_safe"] is sets["safe"]
    assert sets["augmentations_original"] is sets["original"]
    for op in sets["all"]:
        assert getattr(augment, op.__name__) is op
