"""blur_2d and blurmax_pool2d: checked against the reference loops and torch's own pooling."""

from __future__ import annotations

import itertools

import pytest
import torch

import functional as F
import functional.blurpool as blurpool
from tests.functional import reference

DEFAULT = torch.outer(torch.tensor([1.0, 2.0, 1.0]), torch.tensor([1.0, 2.0, 1.0])) / 16


def _x(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("stride", [1, 2, 3, (2, 1), (1, 3)])
@pytest.mark.parametrize("size", [(7, 6), (1, 1), (1, 5), (4, 1), (2, 3)])
def test_default_filter_matches_reference(stride, size) -> None:
    x = _x(2, 3, *size)
    strides = stride if isinstance(stride, tuple) else (stride, stride)
    expected = reference.blur_2d(x, DEFAULT.expand(3, 3, 3), strides)
    torch.testing.assert_close(F.blur_2d(x, stride), expected)


@pytest.mark.parametrize("k_h,k_w", [(1, 1), (3, 3), (2, 2), (4, 3), (5, 2), (1, 4)])
@pytest.mark.parametrize("stride", [1, 2])
def test_any_filter_matches_reference(k_h, k_w, stride) -> None:
    x = _x(2, 3, 7, 8)
    gen = torch.Generator().manual_seed(k_h * 10 + k_w)
    dense = torch.randn(k_h, k_w, generator=gen, dtype=torch.float64)
    separable = torch.outer(
        torch.randn(k_h, generator=gen, dtype=torch.float64),
        torch.randn(k_w, generator=gen, dtype=torch.float64),
    )
    per_channel = torch.randn(3, 1, k_h, k_w, generator=gen, dtype=torch.float64)
    for filt in (dense, separable, separable.view(1, 1, k_h, k_w), per_channel):
        expected = reference.blur_2d(
            x, filt.reshape(-1, k_h, k_w).expand(3, k_h, k_w), (stride,) * 2
        )
        torch.testing.assert_close(F.blur_2d(x, stride, filt), expected)


def test_separable_filters_take_the_fast_path_and_others_do_not() -> None:
    sep = blurpool._separable_taps(DEFAULT.view(1, 1, 3, 3))
    assert sep is not None
    col, row = sep
    torch.testing.assert_close(torch.outer(torch.tensor(col), torch.tensor(row)), DEFAULT)
    assert blurpool._separable_taps(DEFAULT.expand(4, 1, 3, 3)) is not None
    different = torch.stack([DEFAULT, 2 * DEFAULT]).unsqueeze(1)
    assert blurpool._separable_taps(different) is None
    assert blurpool._separable_taps(torch.eye(3).view(1, 1, 3, 3)) is None


@pytest.mark.parametrize("size", [(11, 9), (3, 4), (1, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_cache_blocked_kernel_matches_convolution(monkeypatch, dtype, layout, stride, size) -> None:
    monkeypatch.setattr(blurpool, "_CHUNK_BYTES", 300)  # many chunks, a partial last one
    base = _x(5, 3, *size, dtype=torch.float32)
    x = (base * 255).round().to(dtype) if dtype == torch.uint8 else base.to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":
        x = torch.cat([x, x], dim=-1)[..., ::2]
    out = F.blur_2d(x, stride)
    expected = blurpool._blur_conv(x.contiguous(), None, (stride, stride))
    assert out.dtype == dtype
    if layout == "channels_last":
        assert out.is_contiguous(memory_format=torch.channels_last)
    tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
    if dtype == torch.uint8:
        assert (out.int() - expected.int()).abs().max() <= 1
    else:
        torch.testing.assert_close(out, expected, rtol=tol, atol=tol)


def test_uint8_is_rounded_float_blur() -> None:
    x = (_x(2, 3, 6, 6) * 255).round().to(torch.uint8)
    expected = F.blur_2d(x.double()).round().to(torch.uint8)
    assert torch.equal(F.blur_2d(x), expected)


@pytest.mark.parametrize("stride", [1, 2, (3, 2)])
def test_gradients_match_convolution_and_are_twice_differentiable(stride) -> None:
    x = _x(2, 2, 6, 5).requires_grad_()
    filt = torch.outer(torch.tensor([1.0, 3.0]), torch.tensor([0.5, 1.0, -1.0])).double()
    assert torch.autograd.gradcheck(lambda t: F.blur_2d(t, stride, filt), (x,))
    assert torch.autograd.gradgradcheck(lambda t: F.blur_2d(t, stride), (x,))
    grad_out = _x(*F.blur_2d(x, stride, filt).shape, seed=1)
    (ours,) = torch.autograd.grad(F.blur_2d(x, stride, filt), x, grad_out)
    strides = blurpool.check_pair(stride, "stride")
    conv = blurpool._blur_conv(x, blurpool._check_filter(filt, 2), strides)
    (theirs,) = torch.autograd.grad(conv, x, grad_out)
    torch.testing.assert_close(ours, theirs)


def test_filter_gradient_flows() -> None:
    x = _x(1, 2, 5, 5)
    filt = DEFAULT.double().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda f: F.blur_2d(x, 2, f), (filt,))


def test_constant_image_keeps_its_value_inside() -> None:
    x = torch.full((1, 2, 9, 9), 3.0)
    out = F.blur_2d(x)
    assert torch.allclose(out[..., 1:-1, 1:-1], torch.full_like(out[..., 1:-1, 1:-1], 3.0))
    assert (out[..., 0, :] < 3.0).all()  # zero padding darkens the border


POOL_PARAMS = [
    (k, s, p, d, ceil)
    for k, s, p, d, ceil in itertools.product(
        [1, 2, 3], [None, 1, 2, 3], [0, 1], [1, 2], [False, True]
    )
    if p <= k // 2
]


@pytest.mark.parametrize("size", [(9, 8), (4, 5)])
@pytest.mark.parametrize("k,s,p,d,ceil", POOL_PARAMS)
def test_blurmax_pool2d_matches_reference_and_max_pool_shape(k, s, p, d, ceil, size) -> None:
    x = _x(2, 2, *size)
    stride = k if s is None else s
    try:
        shape = torch.nn.functional.max_pool2d(x, k, s, p, d, ceil_mode=ceil).shape
    except RuntimeError:
        with pytest.raises(ValueError, match="too small"):
            F.blurmax_pool2d(x, k, s, p, d, ceil)
        return
    out = F.blurmax_pool2d(x, k, s, p, d, ceil)
    assert out.shape == shape
    dense = reference.max_pool_dense(x, (k, k), (p, p), (d, d))
    # ceil_mode extends the dense max map past the input, as max_pool2d's last window does.
    extra_h = (shape[2] - 1) * stride + 1 - dense.shape[2]
    extra_w = (shape[3] - 1) * stride + 1 - dense.shape[3]
    if extra_h > 0 or extra_w > 0:
        padded = torch.nn.functional.pad(x, (0, max(extra_w, 0), 0, max(extra_h, 0)), value=-1e9)
        dense = reference.max_pool_dense(padded, (k, k), (p, p), (d, d))
    expected = reference.blur_2d(dense, DEFAULT.expand(2, 3, 3), (stride, stride))
    torch.testing.assert_close(out, expected)


def test_blurmax_pool2d_custom_filter_and_uint8() -> None:
    x = (_x(2, 3, 8, 8) * 255).round().to(torch.uint8)
    filt = torch.ones(3, 3) / 9
    out = F.blurmax_pool2d(x, 2, filter=filt)
    dense = torch.nn.functional.max_pool2d(x.double(), 2, 1)
    assert torch.equal(out, F.blur_2d(dense, 2, filt.double()).round().to(torch.uint8))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: F.blur_2d(torch.rand(3, 4, 4)), "input must have 4 dimensions"),
        (lambda: F.blur_2d(torch.rand(1, 1, 4, 4), stride=0), "stride must be >= 1"),
        (
            lambda: F.blur_2d(torch.rand(1, 2, 4, 4), filter=torch.rand(3, 1, 3, 3)),
            "filter must have shape",
        ),
        (lambda: F.blur_2d(torch.rand(1, 2, 4, 4), filter=torch.rand(3)), "filter must have shape"),
        (
            lambda: F.blur_2d(torch.rand(1, 2, 4, 4), filter=torch.rand(0, 3)),
            "filter must not be empty",
        ),
        (lambda: F.blurmax_pool2d(torch.rand(1, 1, 4, 4), 0), "kernel_size must be >= 1"),
        (
            lambda: F.blurmax_pool2d(torch.rand(1, 1, 4, 4), 2, padding=2),
            "padding must be at most half",
        ),
        (lambda: F.blurmax_pool2d(torch.rand(1, 1, 2, 2), 3), "too small"),
        (lambda: F.blurmax_pool2d(torch.rand(1, 1, 4, 4), 2, stride=-1), "stride must be >= 1"),
    ],
)
def test_bad_arguments_raise_value_error(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: F.blur_2d([[1.0]]), "input must be a torch.Tensor"),
        (lambda: F.blur_2d(torch.rand(1, 1, 4, 4), stride=1.5), "stride must be an int"),
        (
            lambda: F.blur_2d(torch.rand(1, 1, 4, 4), filter=[[1.0]]),
            "filter must be a torch.Tensor",
        ),
        (
            lambda: F.blurmax_pool2d(torch.rand(1, 1, 4, 4), 2, ceil_mode=1),
            "ceil_mode must be a bool",
        ),
    ],
)
def test_bad_types_raise_type_error(call, match) -> None:
    with pytest.raises(TypeError, match=match):
        call()


def test_a_filter_edited_in_place_is_read_again():
    """blur_2d remembers a filter's separable taps; editing the filter must invalidate them."""
    x = torch.rand(2, 3, 20, 20)
    filt = torch.outer(torch.tensor([1.0, 2.0, 1.0]), torch.tensor([1.0, 2.0, 1.0])) / 16
    first = F.blur_2d(x, filter=filt)
    with torch.no_grad():
        filt.copy_(torch.outer(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 0.0])) / 2)
    second = F.blur_2d(x, filter=filt)
    torch.testing.assert_close(first, F.blur_2d(x))
    expected = torch.nn.functional.conv2d(x, filt.expand(3, 1, 3, 3), padding=1, groups=3)
    torch.testing.assert_close(second, expected)


@pytest.mark.parametrize("side", [4, 15, 16, 40])
def test_small_and_large_planes_agree_with_the_convolution(side):
    """Small planes take the convolution, large ones the shift-and-add kernel: same values."""
    x = torch.rand(2, 5, side, side + 3, dtype=torch.float64, requires_grad=True)
    weight = torch.outer(*(torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64),) * 2) / 16
    for stride in (1, 2):
        got = F.blur_2d(x, stride)
        want = torch.nn.functional.conv2d(x, weight.expand(5, 1, 3, 3), stride=stride, padding=1, groups=5)
        torch.testing.assert_close(got, want)
        (g_got,) = torch.autograd.grad(got.sum(), x)
        (g_want,) = torch.autograd.grad(want.sum(), x)
        torch.testing.assert_close(g_got, g_want)
