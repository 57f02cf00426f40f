"""Conformance sweep over every tensor op of ``functional`` (one registry, the same checks).

For every op: the input is never modified; dtype and device are kept (uint8 where the op makes
sense for integer images, float16, bfloat16, float32, float64); the same seed gives the same
output; float64 ``gradcheck`` passes where the op is differentiable; an empty batch works;
non-contiguous and channels_last inputs give the same values as contiguous ones (and image
outputs of a channels_last input are channels_last); and, where
the op treats samples independently, the batched output equals the per-sample outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import functional as F

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
ALL = (torch.uint8, *FLOATS)
N_CLASSES = 5


def _labels(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(x.shape[0]) % N_CLASSES


def _lambdas(x: torch.Tensor) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, x.shape[0])


class _Scorer(torch.nn.Module):
    """A small CNN with BatchNorm and dropout, for select_using_loss."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.conv(x)).relu().mean((2, 3)))


def _select(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    torch.manual_seed(0)
    model = _Scorer(x.shape[1]).to(x.dtype)
    out, _ = F.select_using_loss(
        x, _labels(x), model, torch.nn.functional.cross_entropy, 0.5, generator=g
    )
    return out


def _first(fn: Callable) -> Callable:
    return lambda x, g: fn(x, g)[0]


@dataclass(frozen=True)
class OpCase:
    name: str
    run: Callable[[torch.Tensor, torch.Generator], torch.Tensor]
    dtypes: tuple[torch.dtype, ...] = ALL
    grad: bool = True  # float64 gradcheck w.r.t. the input
    per_sample: bool = False  # run(x)[i] == run(x[i:i+1])[0] for the same seed
    empty: bool = True  # accepts an empty batch
    min_side: int = 1


NON_SEPARABLE = torch.tensor([[0.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 0.0]]) / 6

CASES = [
    OpCase(
        "mixup_batch",
        _first(lambda x, g: F.mixup_batch(x, _labels(x), 0.3, N_CLASSES, generator=g)),
    ),
    OpCase(
        "mixup_batch_per_sample_lambda",
        _first(lambda x, g: F.mixup_batch(x, _labels(x), _lambdas(x), N_CLASSES, generator=g)),
    ),
    OpCase(
        "mixup_batch_labels",
        lambda x, g: F.mixup_batch(x, _labels(x), 0.3, N_CLASSES, generator=g)[1],
        dtypes=(torch.float32,),
        grad=False,
    ),
    OpCase(
        "cutmix_batch",
        _first(lambda x, g: F.cutmix_batch(x, _labels(x), N_CLASSES, alpha=1.0, generator=g)),
    ),
    OpCase(
        "cutmix_batch_bbox",
        _first(
            lambda x, g: F.cutmix_batch(x, _labels(x), N_CLASSES, bbox=(1, 0, 3, 2), generator=g)
        ),
    ),
    OpCase(
        "cutmix_batch_length_uniform",
        _first(
            lambda x, g: F.cutmix_batch(
                x, _labels(x), N_CLASSES, length=0.5, uniform_sampling=True, generator=g
            )
        ),
    ),
    # a 3-pixel hole needs an image at least 3 pixels on its longer side (larger is refused)
    OpCase("cutout", lambda x, g: F.cutout(x, 2, 3, generator=g), per_sample=True, min_side=2),
    OpCase("cutout_fraction", lambda x, g: F.cutout(x, 1, 0.5, generator=g), per_sample=True),
    OpCase(
        "cutout_per_sample",
        lambda x, g: F.cutout(x, 2, 3, per_sample=True, generator=g),
        min_side=2,
    ),
    OpCase(
        "cutout_uniform_sampling",
        lambda x, g: F.cutout(x, 2, 3, per_sample=True, uniform_sampling=True, generator=g),
        min_side=2,
    ),
    OpCase("colout", lambda x, g: F.colout(x[0], 0.3, 0.4, generator=g), empty=False),
    OpCase("colout_batch", lambda x, g: F.colout_batch(x, 0.3, 0.4, generator=g), per_sample=True),
    OpCase("blur_2d", lambda x, g: F.blur_2d(x), per_sample=True),
    OpCase("blur_2d_stride2", lambda x, g: F.blur_2d(x, stride=2), per_sample=True),
    OpCase(
        "blur_2d_separable_filter",
        lambda x, g: F.blur_2d(x, (1, 2), torch.outer(torch.tensor([1.0, 3.0]), torch.ones(3))),
        per_sample=True,
    ),
    OpCase(
        "blur_2d_per_channel_filter",
        lambda x, g: F.blur_2d(x, 2, NON_SEPARABLE.expand(x.shape[1], 1, 3, 3) * 1.0),
        per_sample=True,
    ),
    OpCase("blurmax_pool2d", lambda x, g: F.blurmax_pool2d(x, 2), per_sample=True, min_side=2),
    OpCase(
        "blurmax_pool2d_ceil",
        lambda x, g: F.blurmax_pool2d(x, 3, 2, padding=1, ceil_mode=True),
        per_sample=True,
    ),
    OpCase(
        "resize_inputs_resize",
        _first(lambda x, g: F.resize_inputs(x, _labels(x), 0.5, "resize", generator=g)),
        per_sample=True,
        min_side=2,
    ),
    OpCase(
        "resize_inputs_crop",
        _first(lambda x, g: F.resize_inputs(x, _labels(x), 0.6, "crop", generator=g)),
        per_sample=True,
        min_side=2,
    ),
    OpCase(
        "resize_inputs_crop_targets",
        lambda x, g: F.resize_inputs(x, x.sum(1), 0.6, "crop", resize_targets=True, generator=g)[1],
        dtypes=FLOATS,
        per_sample=True,
        min_side=2,
    ),
    OpCase(
        "smooth_labels",
        lambda x, g: F.smooth_labels(
            x, torch.zeros(x.shape[0], *x.shape[2:], dtype=torch.long), 0.1
        ),
        dtypes=FLOATS,
        grad=False,
        per_sample=True,
    ),
    OpCase(
        "smooth_labels_dense",
        lambda x, g: F.smooth_labels(torch.zeros_like(x), x, 0.1),
        dtypes=FLOATS,
        per_sample=True,
    ),
    OpCase("select_using_loss", _select, dtypes=FLOATS, grad=False),
]

IDS = [case.name for case in CASES]


def _image(dtype: torch.dtype, shape=(4, 3, 7, 6), seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    return torch.rand(shape, generator=gen, dtype=torch.float64).to(dtype)


def _call(case: OpCase, x: torch.Tensor, seed: int = 1) -> torch.Tensor:
    return case.run(x, torch.Generator().manual_seed(seed))


def _assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6, check_stride=False)


def _with_dtypes(dtypes: tuple[torch.dtype, ...]) -> list:
    return [
        pytest.param(case, dtype, id=f"{case.name}-{str(dtype).removeprefix('torch.')}")
        for case in CASES
        for dtype in dtypes
        if dtype in case.dtypes
    ]


@pytest.mark.parametrize(("case", "dtype"), _with_dtypes(ALL))
def test_keeps_dtype_and_leaves_input_alone(case: OpCase, dtype: torch.dtype) -> None:
    x = _image(dtype)
    before = x.clone()
    out = _call(case, x)
    assert torch.equal(x, before)
    assert out.dtype == dtype
    assert out.device == x.device


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_same_seed_same_output(case: OpCase) -> None:
    x = _image(torch.float32)
    torch.testing.assert_close(_call(case, x, seed=3), _call(case, x, seed=3), rtol=0, atol=0)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad], ids=[c.name for c in CASES if c.grad]
)
def test_gradcheck_float64(case: OpCase) -> None:
    x = _image(torch.float64, shape=(2, 2, 5, 4)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _call(case, t), (x,))


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.empty], ids=[c.name for c in CASES if c.empty]
)
def test_empty_batch(case: OpCase) -> None:
    x = _image(torch.float32, shape=(0, 3, 7, 6))
    out = _call(case, x)
    assert out.shape[0] == 0
    assert out.dtype == x.dtype


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_non_contiguous_input(case: OpCase) -> None:
    x = _image(torch.float32)
    # Same values, every stride different from the contiguous layout.
    strided = _image(torch.float32, shape=(4, 3, 6, 7)).transpose(-1, -2)
    strided.copy_(x)
    assert not strided.is_contiguous()
    _assert_same(_call(case, strided), _call(case, x))


@pytest.mark.parametrize(
    ("case", "dtype"), _with_dtypes((torch.uint8, torch.bfloat16, torch.float32))
)
def test_channels_last_input(case: OpCase, dtype: torch.dtype) -> None:
    x = _image(dtype)
    last = x.to(memory_format=torch.channels_last)
    out = _call(case, last)
    _assert_same(out, _call(case, x))
    if out.ndim == 4:  # every image op keeps the input's memory format
        assert out.is_contiguous(memory_format=torch.channels_last), case.name


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.per_sample], ids=[c.name for c in CASES if c.per_sample]
)
def test_batched_equals_per_sample(case: OpCase) -> None:
    x = _image(torch.float32)
    batched = _call(case, x)
    for i in range(x.shape[0]):
        _assert_same(batched[i : i + 1], _call(case, x[i : i + 1]))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_small_images(case: OpCase) -> None:
    side = case.min_side
    x = _image(torch.float32, shape=(2, 3, side, side + 1))
    out = _call(case, x)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
