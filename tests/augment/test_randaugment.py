"""RandAugment: depth ops at the fixed magnitude, the transform, image kinds and checks."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

import augment
from augment import RandAugment, randaugment
from tests.augment import _refs as R


class Recorder:
    def __init__(self, name: str, log: list) -> None:
        self.__name__ = name
        self.log = log

    def __call__(self, img: Image.Image, level: float) -> Image.Image:
        self.log.append((self.__name__, level))
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


@pytest.fixture
def rs() -> np.random.Generator:
    return np.random.default_rng(3)


def test_depth_ops_at_the_fixed_magnitude_chosen_uniformly() -> None:
    log: list = []
    ops = [Recorder(n, log) for n in "abcd"]
    img = Image.new("L", (3, 2))
    for seed in range(200):
        randaugment(img, severity=7.5, depth=3, augmentation_set=ops, rng=random.Random(seed))
    assert len(log) == 600
    assert {lv for _, lv in log} == {7.5}
    counts = {n: sum(1 for m, _ in log if m == n) for n in "abcd"}
    assert all(110 <= c <= 190 for c in counts.values()), counts  # 150 each expected


def test_ops_apply_in_sequence(rs) -> None:
    img = R.image(rs, 9, 14, "RGB")
    ops = [Recorder("flip", [])]
    assert randaugment(img, depth=2, augmentation_set=ops).tobytes() == img.tobytes()
    once = randaugment(img, depth=1, augmentation_set=ops)
    assert once.tobytes() == img.transpose(Image.Transpose.FLIP_LEFT_RIGHT).tobytes()


def test_depth_zero_returns_a_copy(rs) -> None:
    img = R.image(rs, 4, 6, "L")
    out = randaugment(img, depth=0)
    assert out is not img and out.tobytes() == img.tobytes()


def test_magnitude_reaches_the_primitive(rs) -> None:
    """With the solarize-only set, the output is exactly solarize at the severity."""
    img = R.image(rs, 12, 12, "RGB")
    out = randaugment(img, severity=6, depth=1, augmentation_set=[augment.solarize])
    assert np.array_equal(R.arr(out), R.solarize(R.arr(img), 256 - int(6 * 25.6)))


@pytest.mark.parametrize("make_rng", [lambda: random.Random(1), lambda: np.random.default_rng(1)])
def test_same_seed_same_output(rs, make_rng) -> None:
    img = R.image(rs, 31, 17, "RGB")
    assert randaugment(img, rng=make_rng()).tobytes() == randaugment(img, rng=make_rng()).tobytes()
    rng = make_rng()
    assert len({randaugment(img, depth=3, rng=rng).tobytes() for _ in range(5)}) > 1


@pytest.mark.parametrize("set_name", ["all", "safe", "original", "augmentations_corruption_safe"])
@pytest.mark.parametrize("shape", [(3, 1, 1), (3, 23, 40), (1, 40, 23)])
def test_tensor_and_pil_agree(set_name, shape) -> None:
    t = torch.randint(0, 256, shape, dtype=torch.uint8)
    before = t.clone()
    out = randaugment(t, depth=3, augmentation_set=set_name, rng=random.Random(4))
    assert out.dtype == torch.uint8 and out.shape == t.shape
    assert torch.equal(t, before)
    hwc = t.permute(1, 2, 0).numpy()
    img = Image.fromarray(hwc[..., 0] if shape[0] == 1 else hwc)
    expected = randaugment(img, depth=3, augmentation_set=set_name, rng=random.Random(4))
    assert np.array_equal(
        out.permute(1, 2, 0).numpy().reshape(R.arr(expected).shape), R.arr(expected)
    )


def test_transform(rs) -> None:
    img = R.image(rs, 22, 15, "L")
    t = RandAugment(severity=4, depth=3, augmentation_set="original", rng=np.random.default_rng(2))
    expected = randaugment(img, 4, 3, "original", rng=np.random.default_rng(2))
    assert t(img).tobytes() == expected.tobytes()
    assert repr(t) == (
        "RandAugment(severity=4, depth=3, augmentation_set='original', "
        "rng=numpy.random.Generator(PCG64))"
    )
    clone = pickle.loads(pickle.dumps(t))
    assert clone(img).tobytes() == t(img).tobytes()
    x = T.Compose([RandAugment(), T.PILToTensor()])(img)
    assert x.shape == (1, 22, 15) and x.dtype == torch.uint8


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"severity": 10.5}, ValueError, r"severity must be in \[1.0, 10.0\], got 10.5"),
        ({"severity": 0}, ValueError, r"severity must be in \[1.0, 10.0\], got 0"),
        ({"severity": 0.5}, ValueError, r"severity must be in \[1.0, 10.0\], got 0.5"),
        ({"depth": -1}, ValueError, "depth must be >= 0, got -1"),
        ({"depth": 1.5}, TypeError, "depth must be an int"),
        (
            {"augmentation_set": "unsafe"},
            ValueError,
            "augmentation_set must be one of 'all', 'safe'",
        ),
        ({"rng": 3}, TypeError, "rng must be a random.Random"),
    ],
)
def test_bad_arguments(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        randaugment(Image.new("RGB", (3, 3)), **kwargs)
    with pytest.raises(error, match=message):
        RandAugment(**kwargs)


def test_bad_images() -> None:
    with pytest.raises(TypeError, match=r"img must be a PIL\.Image\.Image or a"):
        RandAugment()([[0, 1], [2, 3]])
    with pytest.raises(ValueError, match=r"got mode 'I;16'"):
        RandAugment()(Image.new("I;16", (4, 4)))
