"""Low-precision LayerNorm/GroupNorm on timm models: plain norms converted, the rest refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from functional import (
    LowPrecisionGroupNorm,
    LowPrecisionLayerNorm,
    LowPrecisionLayerNorm2d,
    apply_low_precision_groupnorm,
    apply_low_precision_layernorm,
)
from tests.functional._model_checks import (
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    train_step,
)

timm = pytest.importorskip("timm")
from timm.layers import norm as timm_norm  # noqa: E402


def _convnext() -> nn.Module:
    # conv_mlp=False: channels-last LayerNorm in the blocks, LayerNorm2d in stem and downsampling
    return timm.create_model("convnext_atto", num_classes=5, depths=(1, 1, 1, 1), conv_mlp=False)


def _vit() -> nn.Module:
    return timm.create_model(
        "vit_tiny_patch16_224", num_classes=5, img_size=32, patch_size=8, depth=2
    )


@pytest.mark.parametrize(
    ("build", "classes"),
    [
        (_convnext, {"LowPrecisionLayerNorm", "LowPrecisionLayerNorm2d"}),
        (_vit, {"LowPrecisionLayerNorm"}),
    ],
)
def test_timm_layer_norms_are_converted_exactly_outside_autocast(build, classes):
    torch.manual_seed(0)  # timm's init draws from the global generator
    model = build().eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(x)
    kinds = {type(m).__name__ for m in model.modules() if isinstance(m, nn.LayerNorm)}
    assert kinds and kinds <= {"LayerNorm", "LayerNorm2d"}
    count = sum(isinstance(m, nn.LayerNorm) for m in model.modules())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    keys = list(model.state_dict())
    assert apply_low_precision_layernorm(model, torch.bfloat16, optimizers=opt) is model
    converted = [type(m).__name__ for m in model.modules() if isinstance(m, LowPrecisionLayerNorm)]
    assert set(converted) == classes and len(converted) == count
    assert list(model.state_dict()) == keys
    assert_optimizer_matches(opt, model)
    with torch.no_grad():
        assert torch.equal(model(x), reference)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), reference, rtol=0.15, atol=0.15)
    train_step(model, x, opt)
    assert_idempotent(
        model, lambda m: apply_low_precision_layernorm(m, torch.bfloat16), "nn.LayerNorm"
    )


def test_the_channels_first_layer_runs_in_low_precision_under_autocast():
    timm_ln = timm_norm.LayerNorm2d(6)
    with torch.no_grad():
        timm_ln.weight.uniform_(0.5, 2.0)
        timm_ln.bias.uniform_(-1.0, 1.0)
    lp = LowPrecisionLayerNorm2d.from_layernorm(timm_ln, torch.bfloat16)
    x = torch.randn(2, 6, 3, 4)
    assert torch.equal(lp(x), timm_ln(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lp(x)
    expected = torch.nn.functional.layer_norm(
        x.bfloat16().permute(0, 2, 3, 1), (6,), lp.weight.bfloat16(), lp.bias.bfloat16(), lp.eps
    ).permute(0, 3, 1, 2)
    assert out.dtype == torch.float32 and out.shape == x.shape
    torch.testing.assert_close(out, expected.float(), rtol=0, atol=0)


def test_timm_group_norms_are_converted():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        timm_norm.GroupNorm(8, num_groups=4),
        timm_norm.GroupNorm1(8),
        nn.GroupNorm(2, 8),
    )
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        reference = model(x)
    apply_low_precision_groupnorm(model, torch.bfloat16)
    assert all(isinstance(m, LowPrecisionGroupNorm) for m in model[1:])
    with torch.no_grad():
        assert torch.equal(model(x), reference)


def test_norms_that_are_not_plain_are_refused_by_name():
    class ScaledLayerNorm(nn.LayerNorm):
        def forward(self, x):
            return super().forward(x) * 2

    fp32 = timm_norm.LayerNormFp32(4)
    exp2d = timm_norm.LayerNormExp2d(4)
    fast = timm_norm.LayerNorm(4)
    fast._fast_norm = True
    model = nn.Sequential(ScaledLayerNorm(4), fp32, exp2d, fast)
    assert_no_effect(
        lambda: apply_low_precision_layernorm(model, torch.bfloat16),
        "ScaledLayerNorm (a subclass whose forward is not known to be a plain norm)",
    )
    assert_no_effect(lambda: apply_low_precision_layernorm(model, torch.bfloat16), "LayerNormFp32")
    assert_no_effect(lambda: apply_low_precision_layernorm(model, torch.bfloat16), "timm fast norm")
    assert [type(m) for m in model] == [
        ScaledLayerNorm,
        timm_norm.LayerNormFp32,
        timm_norm.LayerNormExp2d,
        timm_norm.LayerNorm,
    ]
    mixed = nn.Sequential(nn.LayerNorm(4), ScaledLayerNorm(4))  # converts one, names the other
    assert_no_effect(
        lambda: apply_low_precision_layernorm(mixed, torch.bfloat16), "ScaledLayerNorm"
    )
    assert type(mixed[0]) is LowPrecisionLayerNorm and type(mixed[1]) is ScaledLayerNorm
