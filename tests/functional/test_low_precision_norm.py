"""Low-precision LayerNorm / GroupNorm."""

from __future__ import annotations

import enum

import pytest
import torch
import torch.nn.functional as TF
import torchvision
from torch import nn

from functional import (
    LowPrecisionGroupNorm,
    LowPrecisionLayerNorm,
    apply_low_precision_groupnorm,
    apply_low_precision_layernorm,
)
from tests.functional._model_checks import (
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    train_step,
)


def _randomize(norm: nn.Module) -> nn.Module:
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2)
        norm.bias.uniform_(-1, 1)
    return norm


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layernorm_semantics(dtype):
    ln = _randomize(nn.LayerNorm(16))
    lp = LowPrecisionLayerNorm.from_layernorm(ln, dtype)
    assert lp.weight is ln.weight and list(lp.state_dict()) == ["weight", "bias"]
    x = torch.randn(3, 5, 16)
    assert torch.equal(lp(x), ln(x))  # outside autocast: exactly LayerNorm
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lp(x)
    expected = TF.layer_norm(x.to(dtype), (16,), ln.weight.to(dtype), ln.bias.to(dtype), ln.eps)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected.float(), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half_in = lp(x.to(dtype))
    assert half_in.dtype == dtype


def test_groupnorm_semantics():
    gn = _randomize(nn.GroupNorm(2, 8))
    lp = LowPrecisionGroupNorm.from_groupnorm(gn, torch.bfloat16)
    x = torch.randn(2, 8, 4, 4)
    assert torch.equal(lp(x), gn(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lp(x)
    expected = TF.group_norm(x.bfloat16(), 2, gn.weight.bfloat16(), gn.bias.bfloat16(), gn.eps)
    torch.testing.assert_close(out, expected.float(), rtol=0, atol=0)
    assert "low_precision_dtype=torch.bfloat16" in repr(lp)


def test_apply_on_vit():
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64
    )
    n_ln = sum(type(m) is nn.LayerNorm for m in vit.modules())
    x = torch.randn(2, 3, 32, 32)
    vit.eval()
    with torch.no_grad():
        reference = vit(x)
    opt = torch.optim.AdamW(vit.parameters(), lr=1e-3)
    keys = list(vit.state_dict())
    assert apply_low_precision_layernorm(vit, torch.bfloat16, optimizers=opt) is vit
    assert sum(isinstance(m, LowPrecisionLayerNorm) for m in vit.modules()) == n_ln == 5
    assert list(vit.state_dict()) == keys
    assert_optimizer_matches(opt, vit)
    with torch.no_grad():
        assert torch.equal(vit(x), reference)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(vit(x).float(), reference, rtol=0.1, atol=0.1)
    train_step(vit, x, opt)
    assert_idempotent(
        vit, lambda m: apply_low_precision_layernorm(m, torch.bfloat16), "nn.LayerNorm"
    )


def test_convnext_channels_first_layernorm_is_converted_keeping_its_layout():
    model = torchvision.models.convnext_tiny()
    x = torch.randn(1, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        reference = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            reference_autocast = model(x)
    n_2d = sum(type(m).__name__ == "LayerNorm2d" for m in model.modules())
    keys = list(model.state_dict())
    apply_low_precision_layernorm(model, torch.bfloat16)
    kinds = [type(m).__name__ for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert set(kinds) == {"LowPrecisionLayerNorm2d", "LowPrecisionLayerNorm"}
    assert kinds.count("LowPrecisionLayerNorm2d") == n_2d > 0
    assert list(model.state_dict()) == keys
    with torch.no_grad():
        assert torch.equal(model(x), reference)  # outside autocast: the very same computation
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), reference_autocast.float(), rtol=0.1, atol=0.1)


def test_apply_groupnorm_and_dtype_rules():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(4, 8), nn.ReLU())
    apply_low_precision_groupnorm(model, torch.float16)
    assert (
        isinstance(model[1], LowPrecisionGroupNorm)
        and model[1].low_precision_dtype == torch.float16
    )
    assert_no_effect(lambda: apply_low_precision_groupnorm(model, torch.float16), "nn.GroupNorm")
    assert_no_effect(lambda: apply_low_precision_layernorm(model, torch.float16), "nn.LayerNorm")
    ln = nn.Sequential(nn.LayerNorm(4))
    assert_no_effect(
        lambda: apply_low_precision_layernorm(ln, torch.float32),
        "only torch.float16 and torch.bfloat16",
    )
    assert type(ln[0]) is nn.LayerNorm
    with pytest.raises(ValueError, match="dtype must be a floating-point"):
        apply_low_precision_layernorm(ln, torch.int8)
    with pytest.raises(ValueError, match=r"dtype must be a torch.dtype or one of Composer's"):
        apply_low_precision_layernorm(ln, "bf16")
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype"):
        apply_low_precision_layernorm(ln, 16)
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype"):
        LowPrecisionLayerNorm(4, low_precision_dtype="bf16")
    bf16 = nn.Sequential(nn.LayerNorm(4)).to(torch.bfloat16)
    apply_low_precision_layernorm(bf16, torch.bfloat16)
    assert bf16[0].weight.dtype == torch.bfloat16
    assert bf16(torch.randn(2, 4, dtype=torch.bfloat16)).dtype == torch.bfloat16


class _Precision(enum.Enum):  # the shape of Composer's ``Precision`` enum
    FP32 = "fp32"
    AMP_FP16 = "amp_fp16"
    AMP_BF16 = "amp_bf16"
    AMP_FP8 = "amp_fp8"


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("amp_bf16", torch.bfloat16),
        (_Precision.AMP_FP16, torch.float16),
        ("fp32", None),
        (_Precision.AMP_FP8, None),
    ],
)
def test_composer_precision_settings_stand_for_their_dtype(precision, dtype):
    """A ported ``apply_low_precision_layernorm(model, state.precision, optimizers)``: the
    autocast settings convert in their dtype; full precision and fp8 only warn, as in Composer."""
    model = nn.Sequential(nn.LayerNorm(4), nn.GroupNorm(2, 4))
    if dtype is None:
        assert_no_effect(lambda: apply_low_precision_layernorm(model, precision), "'amp_bf16'")
        assert type(model[0]) is nn.LayerNorm
        return
    apply_low_precision_layernorm(model, precision)
    apply_low_precision_groupnorm(model, precision)
    assert model[0].low_precision_dtype == model[1].low_precision_dtype == dtype
