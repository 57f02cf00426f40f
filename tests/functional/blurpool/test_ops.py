"""blur_2d and blurmax_pool2d: checked against the reference loops and torch's own pooling."""

from __future__ import annotations

import itertools

import pytest
import torch

import functional as F
from functional._args import check_pair
from functional.blurpool import kernels
from functional.blurpool.ops import _check_filter
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


@pytest.mark.parametrize("stride", [1, 2, (1, 3)])
@pytest.mark.parametrize("k", [3, 2, 5])
def test_tensor_taps_kernel_matches_convolution(k, stride) -> None:
    """The CPU kernel with taps given as tensors (a layer's buffer) computes outer(col, row)."""
    gen = torch.Generator().manual_seed(k)
    col = torch.randn(k, generator=gen, dtype=torch.float64)
    row = torch.randn(k, generator=gen, dtype=torch.float64)
    x = _x(2, 3, 20, 17)
    strides = check_pair(stride, "stride")
    got = kernels._separable_blur(x, col, row, strides)
    want = kernels._blur_conv(x, torch.outer(col, row).view(1, 1, k, k), strides)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("size", [(11, 9), (3, 4), (1, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_cache_blocked_kernel_matches_convolution(monkeypatch, dtype, layout, stride, size) -> None:
    monkeypatch.setattr(kernels, "_CHUNK_BYTES", 300)  # many chunks, a partial last one
    base = _x(5, 3, *size, dtype=torch.float32)
    x = (base * 255).round().to(dtype) if dtype == torch.uint8 else base.to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":
        x = torch.cat([x, x], dim=-1)[..., ::2]
    out = F.blur_2d(x, stride)
    expected = kernels._blur_conv(x.contiguous(), DEFAULT.view(1, 1, 3, 3), (stride, stride))
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
    strides = check_pair(stride, "stride")
    conv = kernels._blur_conv(x, _check_filter(filt, 2), strides)
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
        want = torch.nn.functional.conv2d(
            x, weight.expand(5, 1, 3, 3), stride=stride, padding=1, groups=5
        )
        torch.testing.assert_close(got, want)
        (g_got,) = torch.autograd.grad(got.sum(), x)
        (g_want,) = torch.autograd.grad(want.sum(), x)
        torch.testing.assert_close(g_got, g_want)


@pytest.mark.parametrize("edit", ["data_assign", "data_copy", "numpy_view"])
@pytest.mark.parametrize("side", [8, 20])
def test_filter_edits_are_always_seen(edit, side):
    """Issue 13.2: no cache keyed by id()/_version, so every way of editing a filter is seen."""
    x = _x(2, 3, side, side, dtype=torch.float32)
    filt = DEFAULT.clone()
    torch.testing.assert_close(F.blur_2d(x, filter=filt), F.blur_2d(x))
    new = torch.outer(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 0.0])) / 2
    if edit == "data_assign":
        filt.data = new.clone()
    elif edit == "data_copy":
        filt.data.copy_(new)
    else:
        filt.numpy()[:] = new.numpy()
    expected = torch.nn.functional.conv2d(x, new.expand(3, 1, 3, 3), padding=1, groups=3)
    torch.testing.assert_close(F.blur_2d(x, filter=filt), expected)
    torch.testing.assert_close(
        F.blurmax_pool2d(x, 2, filter=filt),
        torch.nn.functional.conv2d(
            torch.nn.functional.max_pool2d(x, 2, 1),
            new.expand(3, 1, 3, 3),
            stride=2,
            padding=1,
            groups=3,
        ),
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("side", [6, 20])
def test_integer_extremes_do_not_wrap(dtype, side):
    """A blur is a convex combination: on a constant image at the dtype's maximum the interior
    stays at the maximum and nothing wraps around to the minimum."""
    info = torch.iinfo(dtype)
    x = torch.full((1, 2, side, side), info.max, dtype=dtype)
    for out in (F.blur_2d(x), F.blur_2d(x, 2), F.blurmax_pool2d(x, 2), F.blur_2d(x, 1, DEFAULT)):
        assert out.dtype == dtype
        assert out.min() >= 0, "a value wrapped around"
        assert out[..., 1:-1, 1:-1].eq(info.max).all()
    low = torch.full((1, 2, side, side), info.min, dtype=dtype)
    assert F.blur_2d(low)[..., 1:-1, 1:-1].eq(info.min).all()


def test_int32_large_values_are_exact():
    """int32 values above 2**24 are blurred in float64: no float32 rounding."""
    base = 2**30
    x = torch.full((1, 1, 20, 20), base, dtype=torch.int32)
    x[0, 0, 10, 10] += 16
    out = F.blur_2d(x)
    assert int(out[0, 0, 10, 10]) == base + 4 and int(out[0, 0, 9, 10]) == base + 2


def test_blurmax_pool2d_empty_and_bool_inputs():
    """No channels or an empty batch: an empty result of max_pool2d's shape; bool: TypeError."""
    for shape in [(2, 0, 9, 8), (0, 3, 9, 8)]:
        out = F.blurmax_pool2d(torch.rand(shape), 3, 2, 1)
        assert out.shape == (shape[0], shape[1], 5, 4)
    assert F.blur_2d(torch.rand(2, 0, 20, 20)).shape == (2, 0, 20, 20)
    with pytest.raises(TypeError, match=r"input must be a real, non-bool tensor.*torch.bool"):
        F.blurmax_pool2d(torch.zeros(1, 1, 4, 4, dtype=torch.bool), 2)
    with pytest.raises(TypeError, match="non-bool"):
        F.blurmax_pool2d(torch.zeros(1, 1, 4, 4, dtype=torch.complex64), 2)
    with pytest.raises(ValueError, match="input must have 4 dimensions"):
        F.blurmax_pool2d(torch.zeros(1, 4, 4), 2)


@pytest.mark.parametrize("side", [8, 20])
def test_no_host_reads(side):
    """blur_2d and blurmax_pool2d (default and given filters, forward and backward) never read
    a tensor value on the host."""
    from tests.devicecheck import no_host_reads

    x = _x(2, 3, side, side, dtype=torch.float32).requires_grad_()
    filt = DEFAULT.clone().requires_grad_()
    with no_host_reads():
        outs = [
            F.blur_2d(x),
            F.blur_2d(x, 2),
            F.blur_2d(x, 2, filt),
            F.blur_2d(x, 1, DEFAULT),  # a filter without grad: the CPU kernel on large planes
            F.blur_2d(x, 2, DEFAULT.expand(3, 1, 3, 3)),
            F.blurmax_pool2d(x, 2),
            F.blurmax_pool2d(x, 3, 2, 1, ceil_mode=True, filter=filt),
        ]
        sum(o.sum() for o in outs).backward()
    assert x.grad is not None and filt.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("stride", [1, 2, (3, 2)])
@pytest.mark.parametrize("kind", ["shared", "per_channel", "even"])
def test_given_filter_cpu_kernel_matches_convolution(monkeypatch, kind, stride, layout, dtype):
    """A filter passed in runs on the CPU kernel (planes >= 256 px) with its taps as tensors."""
    monkeypatch.setattr(kernels, "_CHUNK_BYTES", 3000)  # several chunks, a partial last one
    gen = torch.Generator().manual_seed(3)
    shape = {"shared": (3, 3), "per_channel": (3, 1, 3, 3), "even": (2, 4)}[kind]
    filt = torch.rand(shape, generator=gen, dtype=torch.float64) / 4
    base = _x(5, 3, 17, 19, dtype=torch.float32)
    x = (base * 255).round().to(dtype) if dtype == torch.uint8 else base.to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":
        x = torch.cat([x, x], dim=-1)[..., ::2]
    strides = check_pair(stride, "stride")
    out = F.blur_2d(x, stride, filt)
    expected = kernels._blur_conv(x.contiguous(), _check_filter(filt, 3), strides)
    assert out.dtype == dtype and out.shape == expected.shape
    if layout == "channels_last":
        assert out.is_contiguous(memory_format=torch.channels_last)
    if dtype == torch.uint8:
        assert (out.int() - expected.int()).abs().max() <= 1
    else:
        tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5}.get(dtype, 1e-7)
        torch.testing.assert_close(out, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("stride", [1, (2, 3)])
def test_given_filter_cpu_kernel_gradients(per_channel, stride):
    filt = torch.rand((2, 1, 3, 2) if per_channel else (3, 2), dtype=torch.float64)
    x = _x(1, 2, 16, 17).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: F.blur_2d(t, stride, filt), (x,))
    assert torch.autograd.gradgradcheck(lambda t: F.blur_2d(t, stride, filt), (x,))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.float32])
def test_blurmax_pool2d_8bit_channels_last(dtype):
    """torch's max_pool2d fails on 8-bit channels_last batches; ours pools them and keeps
    the memory format."""
    x = torch.randint(0, 100, (2, 3, 16, 16), dtype=dtype, generator=torch.Generator())
    x_cl = x.contiguous(memory_format=torch.channels_last)
    out = F.blurmax_pool2d(x_cl, 3, 2, 1)
    assert out.dtype == dtype and out.shape == (2, 3, 8, 8)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, F.blurmax_pool2d(x, 3, 2, 1))


@pytest.mark.parametrize("filt", [None, torch.ones(3, 3) / 9, torch.ones(0, 1, 3, 3) / 9])
@pytest.mark.parametrize("shape", [(0, 0, 16, 16), (2, 0, 16, 16), (0, 3, 16, 16)])
def test_blur_2d_of_an_empty_batch_has_the_strided_shape(shape, filt):
    """No samples or no channels (found by fuzzing: a given filter crashed on 0 channels)."""
    if filt is not None and filt.shape[0] == 0 and shape[1] != 0:
        pytest.skip("a per-channel filter must match the channels")
    x = torch.zeros(shape)
    out = F.blur_2d(x, 2, filt)
    assert out.shape == (shape[0], shape[1], 8, 8) and out.dtype == x.dtype


@pytest.mark.parametrize("shape", [(1, 2, 6, 6), (1, 2, 20, 20)])  # the conv and the CPU kernel
@pytest.mark.parametrize("value", [torch.iinfo(torch.int64).max, 2**53 + 3, -(2**53) - 3])
def test_int64_results_stay_within_the_zero_padded_range(shape, value):
    """float64 rounds int64 beyond 2**53: results are clamped to [min(x, 0), max(x, 0)]."""
    x = torch.full(shape, value, dtype=torch.int64)
    low, high = min(value, 0), max(value, 0)
    for out in (F.blur_2d(x), F.blur_2d(x, 2), F.blurmax_pool2d(x, 2)):
        assert ((out >= low) & (out <= high)).all()
