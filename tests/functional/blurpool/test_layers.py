"""BlurPool layers and apply_blurpool (the ops blur_2d and blurmax_pool2d are in test_ops.py)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

import surgery
from functional import BlurConv2d, BlurMaxPool2d, BlurPool2d, apply_blurpool
from functional.blurpool import blur_2d
from tests.functional._model_checks import (
    assert_dtype,
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    sgd_with_state,
    train_step,
)

X32 = (2, 3, 32, 32)


def _expected_convs(model: nn.Module, min_channels: int = 16) -> int:
    return sum(
        1
        for m in model.modules()
        if type(m) is nn.Conv2d and max(m.stride) > 1 and m.in_channels >= min_channels
    )


@pytest.mark.parametrize("blur_first", [True, False])
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=1, stride=2),
        dict(kernel_size=3, stride=(2, 1), padding=(1, 0), dilation=2),
        dict(kernel_size=5, stride=3, padding=2, groups=4),
        dict(kernel_size=3, stride=2, padding=1, padding_mode="reflect"),
    ],
)
def test_blurconv_matches_its_definition(blur_first, kwargs):
    conv = nn.Conv2d(8, 12, **kwargs)
    blur = BlurConv2d.from_conv2d(conv, blur_first=blur_first)
    for h, w in [(9, 11), (16, 16)]:
        x = torch.randn(2, 8, h, w)
        out = blur(x)
        assert out.shape == conv(x).shape
        if blur_first:
            expected = conv(blur_2d(x))
        else:
            stride1 = nn.Conv2d(8, 12, **{**kwargs, "stride": 1})
            stride1.weight, stride1.bias = conv.weight, conv.bias
            expected = blur_2d(stride1(x), stride=conv.stride)
        torch.testing.assert_close(out, expected)


def test_blurconv_shares_parameters_and_keys():
    conv = nn.Conv2d(16, 32, 3, stride=2, padding=1)
    blur = BlurConv2d.from_conv2d(conv)
    assert blur.weight is conv.weight and blur.bias is conv.bias
    assert list(blur.state_dict()) == list(conv.state_dict()) == ["weight", "bias"]
    assert blur.blur_filter.shape == (16, 1, 3, 3)
    torch.testing.assert_close(blur.blur_filter.sum(dim=(1, 2, 3)), torch.ones(16))
    assert "blur_taps" not in blur.state_dict()
    assert "blur_first=True" in repr(blur)


def test_blurconv_positional_arguments_as_in_the_seed():
    """Composer's order: (in, out, k, stride, padding, dilation, groups, bias, blur_first)."""
    conv = BlurConv2d(8, 4, 3, 2, 1, 1, 2, False, False)
    assert (conv.stride, conv.padding, conv.dilation, conv.groups) == ((2, 2), (1, 1), (1, 1), 2)
    assert conv.bias is None and conv.blur_first is False
    assert conv.blur_filter.shape == (4, 1, 3, 3)  # blurs the output: out_channels
    assert BlurConv2d(8, 4, 3).stride == (1, 1) and BlurConv2d(8, 4, 3, None).stride == (1, 1)
    x = torch.randn(2, 8, 9, 9)
    plain = nn.Conv2d(8, 4, 3, 1, 1, 1, 2, False)
    plain.weight = conv.weight
    torch.testing.assert_close(conv(x), blur_2d(plain(x), stride=2))
    with pytest.raises(TypeError, match="blur_first must be a bool"):
        BlurConv2d(8, 4, 3, 2, 1, 1, 1, True, "reflect")
    with pytest.raises(TypeError):  # padding_mode is keyword-only
        BlurConv2d(8, 4, 3, 2, 1, 1, 1, True, True, "reflect")
    assert BlurConv2d(8, 4, 3, 2, 1, padding_mode="reflect").padding_mode == "reflect"


def test_layer_taps_edits_are_seen_and_filter_is_derived():
    """The layers' filter is outer(blur_taps, blur_taps): every edit of the buffer is seen."""
    x = torch.rand(2, 4, 20, 20)
    pool = BlurPool2d(channels=4)
    conv = BlurConv2d(4, 4, 3, 2, 1)
    maxpool = BlurMaxPool2d(2)
    new_taps = torch.tensor([0.5, 0.0, 0.5])
    expected_filter = torch.outer(new_taps, new_taps)
    for edit in ("data", "copy_", "numpy"):
        for layer in (pool, conv, maxpool):
            layer.blur_taps = torch.tensor([0.25, 0.5, 0.25])
            layer(x)  # a call before the edit
            if edit == "data":
                layer.blur_taps.data = new_taps.clone()
            elif edit == "copy_":
                layer.blur_taps.data.copy_(new_taps)
            else:
                layer.blur_taps.numpy()[:] = new_taps.numpy()
            torch.testing.assert_close(layer.blur_filter.reshape(-1, 3, 3)[0], expected_filter)
        torch.testing.assert_close(pool(x), blur_2d(x, 2, expected_filter))
        plain = nn.Conv2d(4, 4, 3, 2, 1)
        plain.weight, plain.bias = conv.weight, conv.bias
        torch.testing.assert_close(conv(x), plain(blur_2d(x, 1, expected_filter)))
        dense = torch.nn.functional.max_pool2d(x, 2, 1)
        torch.testing.assert_close(maxpool(x), blur_2d(dense, 2, expected_filter))


def _blurpooled_resnet() -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    apply_blurpool(model)
    return model.eval()


@pytest.mark.parametrize("convert", ["double", "bfloat16", "build_inside"])
def test_inference_mode_on_converted_or_built_models(convert):
    """Issue 13.1: a blurpooled model converted with .double()/.to(bfloat16), or built inside
    inference_mode, runs under inference_mode on 64x64 images (planes >= 256 pixels)."""
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    reference_model = _blurpooled_resnet()
    with torch.no_grad():
        reference = reference_model(x)
    if convert == "build_inside":
        with torch.inference_mode():
            model = _blurpooled_resnet()
            out = model(x)
        dtype = torch.float32
    else:
        dtype = torch.float64 if convert == "double" else torch.bfloat16
        model = _blurpooled_resnet()
        with torch.inference_mode():  # deployment code converts and runs inside the block
            model = model.double() if convert == "double" else model.to(torch.bfloat16)
            out = model(x.to(dtype))
            out_again = model(x.to(dtype))
        assert torch.equal(out, out_again)
        with torch.no_grad():  # and outside it (inference tensors cannot be saved for backward)
            assert torch.equal(model(x.to(dtype)), out)
    assert out.dtype == dtype and torch.isfinite(out).all()
    tol = 0.1 if dtype == torch.bfloat16 else 1e-4
    scale = reference.abs().max()
    torch.testing.assert_close(out.float() / scale, reference / scale, rtol=tol, atol=tol)


def test_blurconv_constructor_and_validation():
    conv = BlurConv2d(4, 6, 3, stride=2, padding=1, blur_first=False, dtype=torch.float64)
    assert conv.blur_filter.shape == (6, 1, 3, 3) and conv.blur_filter.dtype == torch.float64
    assert conv(torch.randn(1, 4, 7, 7, dtype=torch.float64)).shape == (1, 6, 4, 4)
    with pytest.raises(TypeError, match="blur_first"):
        BlurConv2d(4, 6, 3, blur_first=1)
    with pytest.raises(TypeError, match=r"conv must be an nn.Conv2d"):
        BlurConv2d.from_conv2d(nn.Linear(2, 2))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, dilation=2),
    ],
)
def test_blurmaxpool_keeps_the_pool_shape(kwargs):
    pool = nn.MaxPool2d(**kwargs)
    blur = BlurMaxPool2d.from_maxpool2d(pool)
    assert isinstance(blur, nn.MaxPool2d) and not blur.return_indices
    for h, w in [(8, 8), (9, 13)]:
        x = torch.randn(2, 3, h, w)
        assert blur(x).shape == pool(x).shape
    assert list(blur.state_dict()) == []
    with pytest.raises(ValueError, match="return_indices"):
        BlurMaxPool2d.from_maxpool2d(nn.MaxPool2d(2, return_indices=True))


def test_blurpool2d():
    x = torch.randn(2, 5, 9, 8)
    fixed, any_channels = BlurPool2d(channels=5), BlurPool2d()
    torch.testing.assert_close(fixed(x), any_channels(x))
    torch.testing.assert_close(fixed(x), blur_2d(x, stride=2))
    assert BlurPool2d(stride=(1, 2))(x).shape == (2, 5, 9, 4)
    with pytest.raises(ValueError, match="channels"):
        BlurPool2d(channels=-1)
    with pytest.raises(ValueError, match="stride"):
        BlurPool2d(stride=0)
    assert BlurPool2d(2, 1)(x).shape == (2, 5, 5, 4)  # Composer's positional (stride, padding)
    with pytest.raises(ValueError, match="padding must be 1"):
        BlurPool2d(2, 0)


def test_conversions_are_surgery_policies():
    model = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2), nn.MaxPool2d(2))
    surgery.replace_module_classes(
        model, {nn.Conv2d: BlurConv2d.from_conv2d, nn.MaxPool2d: BlurMaxPool2d.from_maxpool2d}
    )
    assert [type(m) for m in model] == [BlurConv2d, BlurMaxPool2d]


@pytest.mark.parametrize(
    ("factory", "convs", "pools"),
    [
        (torchvision.models.resnet18, 6, 1),
        (torchvision.models.resnet50, 6, 1),
        (torchvision.models.mobilenet_v3_small, None, 0),
    ],
)
def test_apply_blurpool_on_torchvision_models(factory, convs, pools):
    model = factory()
    expected = _expected_convs(model)
    if convs is not None:
        assert expected == convs
    x = torch.randn(*X32)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    model.eval()
    with torch.no_grad():
        reference_shape = model(x).shape
    checkpoint = {k: v.clone() for k, v in model.state_dict().items()}
    params = [id(p) for p in model.parameters()]

    assert apply_blurpool(model, optimizers=opt) is model
    assert sum(isinstance(m, BlurConv2d) for m in model.modules()) == expected > 0
    assert sum(isinstance(m, BlurMaxPool2d) for m in model.modules()) == pools
    assert [id(p) for p in model.parameters()] == params
    assert list(model.state_dict()) == list(checkpoint)
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        assert model(x).shape == reference_shape
    train_step(model, x, opt)

    # Checkpoints load both ways: old into new, new into a fresh old model.
    model.load_state_dict(checkpoint)
    fresh = factory()
    fresh.load_state_dict(model.state_dict())


def test_apply_blurpool_options_and_idempotence():
    model = torchvision.models.resnet18()
    apply_blurpool(model, replace_maxpools=False, blur_first=False, min_channels=128)
    assert isinstance(model.maxpool, nn.MaxPool2d) and not isinstance(model.maxpool, BlurMaxPool2d)
    blurred = [m for m in model.modules() if isinstance(m, BlurConv2d)]
    assert len(blurred) == 4 and not any(m.blur_first for m in blurred)
    assert model(torch.randn(*X32)).shape == (2, 1000)
    apply_blurpool(model, replace_convs=False)
    assert isinstance(model.maxpool, BlurMaxPool2d)
    apply_blurpool(model)  # the two 64-channel strided convs skipped above
    assert sum(isinstance(m, BlurConv2d) for m in model.modules()) == 6
    assert_idempotent(model, apply_blurpool, "strided nn.Conv2d")


def test_apply_blurpool_no_effect_and_skips():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2),  # too few input channels
        nn.Conv2d(32, 32, 3),  # not strided
        nn.MaxPool2d(3, stride=1),  # not strided
        nn.MaxPool2d(2, return_indices=True),  # indices
    )
    assert_no_effect(lambda: apply_blurpool(model), "strided nn.Conv2d with in_channels >= 16")
    assert all(type(m) in (nn.Conv2d, nn.MaxPool2d) for m in model)
    assert_no_effect(
        lambda: apply_blurpool(model, replace_convs=False, replace_maxpools=False), "both False"
    )


def test_apply_blurpool_converts_ceil_mode_pools_keeping_their_size():
    """blurmax_pool2d reproduces ceil_mode output sizes, so apply_blurpool converts them."""
    model = nn.Sequential(nn.MaxPool2d(3, stride=2, ceil_mode=True))
    x = torch.randn(2, 3, 10, 9)
    expected_shape = model(x).shape
    apply_blurpool(model)
    assert type(model[0]) is BlurMaxPool2d and model[0].ceil_mode
    assert model(x).shape == expected_shape


def test_apply_blurpool_validation():
    with pytest.raises(TypeError, match=r"model must be an nn.Module"):
        apply_blurpool("resnet")
    with pytest.raises(ValueError, match="min_channels must be >= 0"):
        apply_blurpool(nn.Conv2d(3, 3, 3), min_channels=-1)
    with pytest.raises(TypeError, match="blur_first must be a bool"):
        apply_blurpool(nn.Conv2d(3, 3, 3), blur_first="yes")


def test_apply_blurpool_keeps_dtype_and_layout():
    model = torchvision.models.resnet18().to(torch.bfloat16)
    apply_blurpool(model)
    assert_dtype(model, torch.bfloat16)
    x = torch.randn(2, 3, 16, 16, dtype=torch.bfloat16)
    assert model(x).dtype == torch.bfloat16


def test_blurpool_overhead_is_only_the_blur():
    """With an all-ones-per-pixel input the blur (which sums to 1 inside the image) is the
    identity away from the border, so a blurred conv equals the plain conv there."""
    conv = nn.Conv2d(16, 4, 3, stride=2, padding=1)
    blur = BlurConv2d.from_conv2d(conv)
    x = torch.ones(1, 16, 12, 12)
    torch.testing.assert_close(blur(x)[..., 1:-1, 1:-1], conv(x)[..., 1:-1, 1:-1])
