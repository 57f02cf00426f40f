"""Adversarial cases for the augment package: every PIL mode, tiny and lopsided images, extreme
levels, severities and concentrations, uint8 tensors of every layout, meta tensors,
inference mode and set members that break the contract."""

from __future__ import annotations

import contextlib
import random
import signal

import numpy as np
import pytest
import torch
from PIL import Image

import augment

ALL_OPS = augment.augmentation_sets["all"] + augment.augmentation_sets["original"][9:]
CALLABLES = {
    "augment_and_mix": lambda img, **kw: augment.augment_and_mix(img, rng=random.Random(0), **kw),
    "randaugment": lambda img, **kw: augment.randaugment(img, rng=random.Random(0), **kw),
    "AugMix": lambda img, **kw: augment.AugMix(rng=random.Random(0), **kw)(img),
    "RandAugment": lambda img, **kw: augment.RandAugment(rng=random.Random(0), **kw)(img),
}
# The extremes of each transform's severity range: AugMix takes [0, 10], RandAugment [1, 10]
# (the seed's ranges); the subnormal checks that a level scaled from it stays finite.
EXTREME_SEVERITIES = {
    "augment_and_mix": (0, 5e-324, 10),
    "AugMix": (0, 5e-324, 10),
    "randaugment": (1, 1 + 2**-52, 10),
    "RandAugment": (1, 1 + 2**-52, 10),
}
OTHER_MODES = ["RGBA", "P", "I", "F", "1", "LA", "CMYK", "YCbCr", "HSV", "I;16", "RGBX", "PA"]


@pytest.mark.parametrize("mode", OTHER_MODES)
@pytest.mark.parametrize(
    "fn", [*CALLABLES.values(), *ALL_OPS[:3]], ids=[*CALLABLES, "op0", "op1", "op2"]
)
def test_unsupported_modes_get_a_clear_error(fn, mode):
    img = Image.new(mode, (5, 4))
    with pytest.raises(ValueError, match=rf"mode 'RGB' or 'L', got mode '{mode}'.*convert"):
        fn(img) if fn in CALLABLES.values() else fn(img, 5)


@pytest.mark.parametrize("name", list(CALLABLES))
@pytest.mark.parametrize("size", [(1, 1), (1, 2), (2, 1), (1, 97), (97, 1), (3, 3), (2, 2)])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_tiny_and_lopsided_images_at_extreme_severities(name, size, mode):
    rs = np.random.default_rng(sum(size))
    w, h = size
    img = Image.fromarray(rs.integers(0, 256, (h, w, 3) if mode == "RGB" else (h, w), np.uint8))
    for severity in EXTREME_SEVERITIES[name]:
        out = CALLABLES[name](img, severity=severity)
        assert (out.size, out.mode) == (img.size, img.mode)


@contextlib.contextmanager
def fails_after(seconds: int):
    """Turn a hang into a test failure (POSIX main thread; elsewhere no limit)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hang(signum, frame):
        raise AssertionError(f"did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("alpha", [5e-324, 1e-300, 1e16, 1e300, 1e308, 1.7976931348623157e308])
def test_extreme_concentrations_return(alpha):
    """alpha near the float maximum used to hang in random.gammavariate (NaN acceptance test)."""
    img = Image.new("RGB", (6, 5), (9, 99, 200))
    with fails_after(20):
        out = augment.augment_and_mix(img, alpha=alpha, rng=random.Random(0))
    assert out.size == img.size
    if alpha >= 1e16:  # the limit: every chain weighs the same and m is one half
        keep = [lambda im, lv: im.copy()]
        white = [lambda im, lv: Image.new(im.mode, im.size, (201, 201, 201))]
        assert augment.augment_and_mix(img, alpha=alpha, augmentation_set=keep) == img
        mixed = np.array(augment.augment_and_mix(img, alpha=alpha, augmentation_set=white))
        expected = np.floor((np.array(img, dtype=np.float64) + 201) / 2 + 0.5)
        assert np.array_equal(mixed, expected.astype(np.uint8))


@pytest.mark.parametrize(
    "layout", ["contiguous", "transposed", "expanded", "sliced", "channels-last"]
)
@pytest.mark.parametrize(
    "fn",
    [*CALLABLES.values(), augment.rotate, augment.equalize],
    ids=[*CALLABLES, "rotate", "equalize"],
)
def test_uint8_tensors_of_every_layout(fn, layout):
    gen = torch.Generator().manual_seed(5)
    base = torch.randint(0, 256, (3, 9, 14), dtype=torch.uint8, generator=gen)
    t = {
        "contiguous": base,
        "transposed": base.transpose(1, 2),
        "expanded": base[:, :1, :1].expand(3, 7, 5),
        "sliced": base[:, ::2, 1::3],
        "channels-last": base.unsqueeze(0).contiguous(memory_format=torch.channels_last)[0],
    }[layout]
    before = t.clone()
    dense = t.contiguous()
    call = (
        (lambda x: fn(x))
        if fn in CALLABLES.values()
        else (lambda x: fn(x, 7, rng=random.Random(0)))
    )
    out = call(t)
    assert out.dtype == torch.uint8 and out.shape == t.shape and out.device == t.device
    assert torch.equal(t, before)
    assert torch.equal(out, call(dense))  # the layout does not change the result


def test_meta_tensor_is_a_clear_error():
    t = torch.empty(3, 5, 6, dtype=torch.uint8, device="meta")
    for fn in [*CALLABLES.values(), lambda x: augment.rotate(x, 3)]:
        with pytest.raises(ValueError, match=r"meta device.*no pixel values"):
            fn(t)


def test_inference_mode_tensors():
    with torch.inference_mode():
        t = torch.randint(0, 256, (3, 8, 11), dtype=torch.uint8)
        outs = [fn(t) for fn in CALLABLES.values()] + [op(t, 10) for op in ALL_OPS]
    assert all(o.shape == t.shape and o.dtype == torch.uint8 for o in outs)


@pytest.mark.parametrize("name", list(CALLABLES))
@pytest.mark.parametrize(
    ("op", "what"),
    [
        (lambda im, lv: im.resize((3, 3)), r"size \(3, 3\)"),
        (lambda im, lv: im.convert("RGBA"), "mode 'RGBA'"),
        (lambda im, lv: im.convert("P"), "mode 'P'"),
        (lambda im, lv: im.convert("L"), "mode 'L'"),
    ],
    ids=["resize", "to-RGBA", "to-P", "to-L"],
)
def test_set_members_that_change_size_or_mode_are_refused(name, op, what):
    """A caller's op that breaks the (img, level) -> same size and mode contract is named;
    RandAugment used to hand back the wrong size silently, AugMix crashed in NumPy."""
    kwargs = {"augmentation_set": [op]}
    if name in ("randaugment", "RandAugment"):
        kwargs["depth"] = 1
    with pytest.raises(ValueError, match=rf"must keep the image's size and mode, got .*{what}"):
        CALLABLES[name](Image.new("RGB", (5, 5)), **kwargs)


@pytest.mark.parametrize("level", [0, 5e-324, 10, np.float32(4.5), np.int64(3), 10.0])
@pytest.mark.parametrize("op", ALL_OPS, ids=lambda f: f.__name__)
def test_levels_at_the_edges_and_numpy_scalars(op, level):
    img = Image.new("RGB", (7, 4), (10, 130, 250))
    out = op(img, level, rng=np.random.default_rng(0))
    assert (out.size, out.mode) == (img.size, img.mode)


@pytest.mark.parametrize("level", [float("nan"), float("inf"), 10.000000000000002, -1e-300])
def test_levels_outside_the_range_are_refused(level):
    with pytest.raises(ValueError, match="level must"):
        augment.rotate(Image.new("L", (3, 3)), level)
    with pytest.raises(TypeError, match="level must be a real number, got Tensor"):
        augment.rotate(Image.new("L", (3, 3)), torch.tensor(5.0))
