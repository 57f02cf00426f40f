"""AugMix: the mixing arithmetic, the draws, the transform, image kinds and argument checks."""

from __future__ import annotations

import copy
import pickle
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

import augment
from augment import AugMix, augment_and_mix
from tests.augment import _refs as R


class Scripted(random.Random):
    """A ``random.Random`` that plays back given gamma draws and uniform floats."""

    def __init__(self, gammas: list[float], uniforms: list[float]) -> None:
        super().__init__(0)
        self.gammas = list(gammas)
        self.uniforms = list(uniforms)

    def gammavariate(self, alpha: float, beta: float) -> float:
        return self.gammas.pop(0)

    def random(self) -> float:
        return self.uniforms.pop(0)


class AddConstant:
    """A set member that adds 37·k (mod 256) on its k-th call: every chain differs."""

    def __init__(self) -> None:
        self.calls = 0
        self.levels: list[float] = []

    def __call__(self, img: Image.Image, level: float) -> Image.Image:
        self.calls += 1
        self.levels.append(level)
        a = (np.array(img).astype(np.int64) + 37 * self.calls) % 256
        return Image.fromarray(a.astype(np.uint8), img.mode)


@pytest.fixture
def rs() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_mix_is_the_papers_convex_combination(rs, mode) -> None:
    img = R.image(rs, 13, 29, mode)
    op = AddConstant()
    # Dirichlet from gammas 1, 2, 1 -> w = (1/4, 1/2, 1/4); Beta from gammas 3, 1 -> m = 3/4;
    # then per op: the op index draw and the level draw (0.5 -> the middle of [0.1, 4]).
    rng = Scripted([1.0, 2.0, 1.0, 3.0, 1.0], [0.0, 0.5] * 3)
    out = augment_and_mix(
        img, severity=4, depth=1, width=3, alpha=1.0, augmentation_set=[op], rng=rng
    )
    x = R.arr(img).astype(np.float64)
    chains = [(x + 37 * k) % 256 for k in (1, 2, 3)]
    expected = 0.25 * x + 0.75 * (0.25 * chains[0] + 0.5 * chains[1] + 0.25 * chains[2])
    assert np.array_equal(R.arr(out), np.floor(expected + 0.5).astype(np.uint8))
    assert op.levels == pytest.approx([0.1 + 0.5 * 3.9] * 3)
    assert out.mode == mode and out.size == img.size


def test_random_depth_is_one_to_three_per_chain(rs) -> None:
    img = R.image(rs, 4, 5, "L")
    counts = set()
    for seed in range(60):
        op = AddConstant()
        augment_and_mix(img, depth=-1, width=1, augmentation_set=[op], rng=random.Random(seed))
        counts.add(op.calls)
    assert counts == {1, 2, 3}
    op = AddConstant()
    augment_and_mix(img, depth=4, width=3, augmentation_set=[op], rng=random.Random(0))
    assert op.calls == 12


def test_levels_are_uniform_up_to_severity(rs) -> None:
    img = R.image(rs, 3, 3, "L")
    op = AddConstant()
    for seed in range(200):
        augment_and_mix(
            img, severity=6, depth=1, width=1, augmentation_set=[op], rng=random.Random(seed)
        )
    levels = np.array(op.levels)
    assert levels.min() >= 0.1 and levels.max() <= 6
    assert abs(levels.mean() - 3.05) < 0.4  # U(0.1, 6) has mean 3.05
    op0 = AddConstant()
    augment_and_mix(img, severity=0, depth=1, width=2, augmentation_set=[op0], rng=random.Random(0))
    assert op0.levels == [0.0, 0.0]


def test_identical_chains_mix_to_the_image(rs) -> None:
    for mode in ("RGB", "L"):
        img = R.image(rs, 17, 9, mode)
        for alpha in (0.05, 1.0, 30.0):
            out = augment_and_mix(
                img, width=4, alpha=alpha, augmentation_set=[lambda im, lv: im.copy()]
            )
            assert out.tobytes() == img.tobytes()


def test_severity_zero_geometric_set_is_identity(rs) -> None:
    img = R.image(rs, 21, 34, "RGB")
    ops = [
        augment.rotate,
        augment.shear_x,
        augment.shear_y,
        augment.translate_x,
        augment.translate_y,
    ]
    for seed in range(5):
        out = augment_and_mix(img, severity=0, augmentation_set=ops, rng=random.Random(seed))
        assert out.tobytes() == img.tobytes()


def test_weights_follow_alpha(rs) -> None:
    """Large alpha: even weights and m near 1/2; the mix approaches the chains' mean."""
    img = R.image(rs, 8, 8, "L", 0, 0)  # black
    white = [lambda im, lv: Image.new(im.mode, im.size, 200)]
    out = R.arr(augment_and_mix(img, alpha=1e4, augmentation_set=white, rng=random.Random(0)))
    assert np.all(np.abs(out.astype(int) - 100) <= 2)
    # small alpha: m is nearly 0 or 1, so the output is nearly the image or the chains
    values = [
        int(
            R.arr(augment_and_mix(img, alpha=0.02, augmentation_set=white, rng=random.Random(s)))[
                0, 0
            ]
        )
        for s in range(40)
    ]
    assert sum(v <= 3 or v >= 197 for v in values) >= 32  # Beta(.02, .02): ~93% within 1.5%
    assert min(values) <= 3 and max(values) >= 197


@pytest.mark.parametrize("make_rng", [lambda: random.Random(5), lambda: np.random.default_rng(5)])
def test_same_seed_same_output(rs, make_rng) -> None:
    img = R.image(rs, 30, 45, "RGB")
    a = augment_and_mix(img, rng=make_rng())
    b = augment_and_mix(img, rng=make_rng())
    assert a.tobytes() == b.tobytes()
    rng = make_rng()
    outs = {augment_and_mix(img, rng=rng).tobytes() for _ in range(4)}
    assert len(outs) == 4  # the generator advances


def test_rng_none_follows_torch_seed(rs) -> None:
    img = R.image(rs, 20, 20, "RGB")
    torch.manual_seed(11)
    a = augment_and_mix(img)
    torch.manual_seed(11)
    b = augment_and_mix(img)
    c = augment_and_mix(img)
    assert a.tobytes() == b.tobytes() != c.tobytes()


@pytest.mark.parametrize("set_name", list(augment.augmentation_sets))
@pytest.mark.parametrize("shape", [(3, 1, 1), (3, 23, 40), (1, 40, 23)])
def test_tensor_and_pil_agree(set_name, shape) -> None:
    t = torch.randint(0, 256, shape, dtype=torch.uint8)
    before = t.clone()
    out = augment_and_mix(t, augmentation_set=set_name, rng=random.Random(2))
    assert out.dtype == torch.uint8 and out.shape == t.shape and out.is_contiguous()
    assert torch.equal(t, before)
    img = Image.fromarray(
        t.permute(1, 2, 0).squeeze(-1).numpy() if shape[0] == 1 else t.permute(1, 2, 0).numpy()
    )
    expected = augment_and_mix(img, augmentation_set=set_name, rng=random.Random(2))
    assert np.array_equal(out.permute(1, 2, 0).squeeze(-1).numpy(), R.arr(expected))


def test_transform_matches_function_and_is_a_good_citizen(rs) -> None:
    img = R.image(rs, 19, 33, "RGB")
    t = AugMix(
        severity=5, depth=2, width=4, alpha=0.5, augmentation_set="safe", rng=random.Random(9)
    )
    expected = augment_and_mix(img, 5, 2, 4, 0.5, "safe", rng=random.Random(9))
    assert t(img).tobytes() == expected.tobytes()
    assert repr(t) == (
        "AugMix(severity=5, depth=2, width=4, alpha=0.5, augmentation_set='safe', "
        "rng=random.Random(...))"
    )
    assert repr(AugMix(rng=np.random.default_rng(0))).endswith("rng=numpy.random.Generator(PCG64))")
    assert repr(AugMix(augmentation_set=[augment.rotate, augment.equalize])) == (
        "AugMix(severity=3, depth=-1, width=3, alpha=1.0, augmentation_set=[rotate, equalize], "
        "rng=None)"
    )
    clone = pickle.loads(pickle.dumps(t))
    assert clone(img).tobytes() == t(img).tobytes()  # same state, same stream
    twin = copy.deepcopy(t)
    assert twin(img).tobytes() == t(img).tobytes()


def test_inside_compose(rs) -> None:
    img = R.image(rs, 24, 36, "RGB")
    for compose in (T.Compose, v2.Compose):
        pipeline = compose([AugMix(rng=random.Random(0)), T.PILToTensor()])
        x = pipeline(img)
        assert x.shape == (3, 24, 36) and x.dtype == torch.uint8
    assert isinstance(T.Compose([T.PILToTensor(), AugMix()])(img), torch.Tensor)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"severity": 11}, ValueError, r"severity must be in \[0.0, 10.0\], got 11"),
        ({"severity": -1}, ValueError, r"severity must be in \[0.0, 10.0\], got -1"),
        ({"severity": True}, TypeError, "severity must be a real number"),
        ({"width": 0}, ValueError, "width must be >= 1, got 0"),
        ({"width": 2.0}, TypeError, "width must be an int"),
        (
            {"depth": 0},
            ValueError,
            r"depth must be -1 \(a random depth in \[1, 3\] per chain\) or an int >= 1, got 0",
        ),
        ({"depth": -2}, ValueError, "depth must be -1 .* got -2"),
        ({"alpha": 0}, ValueError, "alpha must be a finite number > 0, got 0"),
        ({"alpha": -1.0}, ValueError, "alpha must be a finite number > 0"),
        ({"alpha": float("inf")}, ValueError, "alpha must be a finite number > 0"),
        (
            {"augmentation_set": "most"},
            ValueError,
            "augmentation_set must be one of 'all', 'safe', 'original', 'augmentations_all', "
            "'augmentations_corruption_safe', 'augmentations_original'; got 'most'",
        ),
        ({"augmentation_set": []}, ValueError, "augmentation_set must not be empty"),
        ({"augmentation_set": [1]}, TypeError, "augmentation_set must hold callables"),
        ({"augmentation_set": 3}, TypeError, "augmentation_set must be a set name"),
        ({"rng": 0}, TypeError, "rng must be a random.Random, a numpy.random.Generator or None"),
    ],
)
def test_bad_arguments(kwargs, error, message) -> None:
    img = Image.new("RGB", (5, 5))
    with pytest.raises(error, match=message):
        augment_and_mix(img, **kwargs)
    with pytest.raises(error, match=message):
        AugMix(**kwargs)


def test_bad_images() -> None:
    t = AugMix()
    with pytest.raises(TypeError, match=r"img must be a PIL\.Image\.Image or a"):
        t(np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match=r"got mode 'P'"):
        t(Image.new("P", (4, 4)))
    with pytest.raises(TypeError, match=r"got dtype torch\.float32"):
        t(torch.rand(3, 4, 4))
    with pytest.raises(ValueError, match=r"got shape \(2, 3, 4, 4\)"):
        t(torch.zeros(2, 3, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="must not be empty"):
        t(torch.zeros(3, 0, 4, dtype=torch.uint8))


def test_a_set_member_that_changes_the_size_is_refused() -> None:
    crop = [lambda im, lv: im.crop((0, 0, 2, 2))]
    with pytest.raises(ValueError, match="every op must keep the size and mode"):
        augment_and_mix(Image.new("RGB", (5, 5)), augmentation_set=crop)
    with pytest.raises(TypeError, match="must return a PIL image, got ndarray"):
        augment_and_mix(Image.new("RGB", (5, 5)), augmentation_set=[lambda im, lv: np.array(im)])
