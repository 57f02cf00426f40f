"""Squeeze-and-Excitation blocks and apply_se."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

import surgery
from functional import SqueezeExcite2d, SqueezeExciteConv2d, apply_se, apply_squeeze_excite
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


def test_block_matches_its_definition():
    se = SqueezeExcite2d(8, latent_channels=3)
    x = torch.randn(2, 8, 5, 4)
    gate = torch.sigmoid(se.fc2(torch.relu(se.fc1(x.mean(dim=(2, 3))))))
    torch.testing.assert_close(se(x), x * gate[:, :, None, None])
    assert SqueezeExcite2d(16, 0.25).fc1.out_features == 4
    assert SqueezeExcite2d(4, 0.1).fc1.out_features == 1  # a fraction never rounds to 0


@pytest.mark.parametrize(
    ("latent", "error", "match"),
    [
        (0, ValueError, r"latent_channels must be an int >= 1 or a float in \(0, 1\), got 0"),
        (2.5, ValueError, r"latent_channels must be an int >= 1 .*, got 2.5"),
        (float("inf"), ValueError, r"latent_channels must be an int >= 1 .*, got inf"),
        ("8", TypeError, r"latent_channels must be an int >= 1 or a float in \(0, 1\), got str"),
    ],
)
def test_latent_validation(latent, error, match):
    with pytest.raises(error, match=match):
        SqueezeExcite2d(8, latent)
    with pytest.raises(error, match=match):
        apply_se(nn.Conv2d(8, 8, 1), latent_channels=latent)


def test_conv_subclass_keeps_conv_keys_and_parameters():
    conv = nn.Conv2d(8, 16, 3, padding=1)
    se_conv = SqueezeExciteConv2d.from_conv2d(conv, latent_channels=4)
    assert se_conv.weight is conv.weight and se_conv.bias is conv.bias
    keys = list(se_conv.state_dict())
    assert keys[:2] == ["weight", "bias"] and all(k.startswith("se.") for k in keys[2:])
    x = torch.randn(2, 8, 6, 6)
    torch.testing.assert_close(se_conv(x), se_conv.se(conv(x)))
    direct = SqueezeExciteConv2d(8, 16, 3, padding=1, latent_channels=0.5)
    assert direct.se.fc1.out_features == 8 and direct(x).shape == (2, 16, 6, 6)


def test_apply_se_on_resnet50():
    model = torchvision.models.resnet50()
    expected = sum(
        1
        for m in model.modules()
        if type(m) is nn.Conv2d and min(m.in_channels, m.out_channels) >= 128
    )
    x = torch.randn(2, 3, 32, 32)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    old_groups = [list(g["params"]) for g in opt.param_groups]
    checkpoint = {k: v.clone() for k, v in model.state_dict().items()}

    assert apply_se(model, optimizers=opt) is model
    converted = [m for m in model.modules() if isinstance(m, SqueezeExciteConv2d)]
    assert len(converted) == expected == 42
    assert all(m.se.fc1.out_features == 64 for m in converted)
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    # New block parameters sit right after their convolution's weight, in the same group.
    params = opt.param_groups[0]["params"]
    i = next(k for k, p in enumerate(params) if p is converted[0].weight)
    assert params[i + 1] is converted[0].se.fc1.weight
    assert len(params) == len(old_groups[0]) + 4 * len(converted)
    assert set(checkpoint) <= set(model.state_dict())
    train_step(model, x, opt)

    # Old checkpoint -> new model via remap; new checkpoint -> old model with strict=False.
    model.load_state_dict(surgery.remap_state_dict(checkpoint, model))
    torch.testing.assert_close(
        converted[0].weight, checkpoint[_name_of(model, converted[0]) + ".weight"]
    )
    fresh = torchvision.models.resnet50()
    result = fresh.load_state_dict(model.state_dict(), strict=False)
    assert result.missing_keys == [] and all(".se." in k for k in result.unexpected_keys)
    assert_idempotent(model, apply_squeeze_excite, "already have a squeeze-excite block")


def _name_of(model: nn.Module, module: nn.Module) -> str:
    return next(n for n, m in model.named_modules() if m is module)


def test_no_effect_dtype_and_alias():
    assert apply_squeeze_excite is apply_se
    small = torchvision.models.mobilenet_v3_small()
    assert_no_effect(
        lambda: apply_se(small, min_channels=1024), "min(in_channels, out_channels) >= 1024"
    )
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3)).to(torch.float64)
    apply_se(model, latent_channels=0.25, min_channels=16)
    assert isinstance(model[2], SqueezeExciteConv2d) and type(model[0]) is nn.Conv2d
    assert_dtype(model, torch.float64)
    assert model(torch.randn(1, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64


def test_seed_constructor_with_an_existing_conv():
    """Issue 14 #3: ``SqueezeExciteConv2d(..., conv=existing_conv)`` as in the seed."""
    conv = nn.Conv2d(8, 16, 3, padding=1, stride=2)
    se_conv = SqueezeExciteConv2d(latent_channels=0.25, conv=conv)
    assert se_conv.weight is conv.weight and se_conv.bias is conv.bias
    assert se_conv.stride == (2, 2) and se_conv.se.fc1.out_features == 4
    x = torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(se_conv(x), se_conv.se(conv(x)))
    se_conv.se.fc1.weight.data.zero_()  # the block is the clone's own
    assert not hasattr(conv, "se")
    with pytest.raises(TypeError, match=r"either nn\.Conv2d arguments or conv="):
        SqueezeExciteConv2d(8, 16, 3, conv=conv)
    with pytest.raises(TypeError, match=r"conv must be an nn\.Conv2d"):
        SqueezeExciteConv2d(conv=nn.Linear(2, 2))


def _frozen_backbone() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A classifier fine-tuned on a frozen backbone: only the head is trainable and optimized."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip
    for p in model[:4].parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(model[6].parameters(), lr=0.1)
    return model, opt


def test_frozen_backbone_blocks_inherit_frozen_state_and_warn():
    """Issue 13 #4: blocks after frozen convolutions are frozen and join no optimizer (the
    backbone stays frozen), and a warning names the layers and how to train them."""
    model, opt = _frozen_backbone()
    with pytest.warns(
        UserWarning, match=r"apply_se: these layers are frozen.*: 2; .*requires_grad_"
    ):
        apply_se(model, latent_channels=2, min_channels=8, optimizers=opt)
    block = model[2].se
    assert not any(p.requires_grad for p in block.parameters())
    assert_optimizer_matches(opt, model)


def test_partial_optimizer_orphan_blocks_are_named():
    """Trainable convolutions that no passed optimizer holds: their blocks stay trainable (for
    an optimizer the user adds them to) and a warning names them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3), nn.Flatten(), nn.LazyLinear(2))
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    with pytest.warns(UserWarning, match=r"no optimizer passed holds these layers.*: 1;"):
        apply_se(model, latent_channels=2, min_channels=3, optimizers=opt)
    assert all(p.requires_grad for p in model[1].se.parameters())
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in model[0].se.parameters()} <= held  # the held one joined
    assert not held & {id(p) for p in model[1].se.parameters()}


def test_no_warning_when_everything_is_trainable_and_held(no_warnings):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    apply_se(model, latent_channels=2, min_channels=3, optimizers=opt)
    assert_optimizer_matches(opt, model)
    apply_se(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3)), 2, 3)  # no optimizer
