"""Deployment of transformed models (issue 31): every model transform's result, in evaluation
mode, exports with ``torch.export.export`` with the outputs of eager mode; ``torch.jit.script``
either compiles it with those outputs or refuses at once with a ``TypeError`` that names the
layer and ``torch.export`` (never a failure deep inside TorchScript's compiler). Small models,
one export each."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.resnet import Bottleneck

import functional as F
from tests.functional._hf_models import hf_inputs, hf_model

REFUSAL = r"torch.jit.script cannot compile \w+, .*torch.export.export\(model.eval\(\)"


def _resnet() -> nn.Module:
    """A small torchvision ResNet of Bottleneck blocks."""
    torch.manual_seed(0)
    return torchvision.models.resnet.ResNet(
        Bottleneck, [1, 1, 1, 1], num_classes=5, width_per_group=8
    )


def _norms() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Flatten(2), nn.LayerNorm(100), nn.Linear(100, 4)
    )


def _dropout_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Dropout(0.5), nn.Linear(400, 4))


_IMAGES = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))

# name -> (transformed model, scripts: True, or the refusal is expected)
VISION: dict[str, tuple[Callable[[], nn.Module], bool]] = {
    "blurpool": (lambda: F.apply_blurpool(_resnet(), min_channels=0), False),
    "squeeze_excite": (lambda: F.apply_squeeze_excite(_resnet(), min_channels=8), True),
    "stochastic_depth_block": (
        lambda: F.apply_stochastic_depth(_resnet(), "block", "ResNetBottleneck"),
        True,
    ),
    "stochastic_depth_sample": (
        lambda: F.apply_stochastic_depth(_resnet(), "sample", "ResNetBottleneck"),
        True,
    ),
    "weight_standardization": (lambda: F.apply_weight_standardization(_resnet()), False),
    "ghost_batchnorm": (lambda: F.apply_ghost_batchnorm(_resnet(), ghost_batch_size=1), False),
    "channels_last": (lambda: F.apply_channels_last(_resnet()), True),
    "gyro_dropout": (
        lambda: F.apply_gyro_dropout(_dropout_cnn(), 10, 2, p=0.5, sigma=8, tau=2),
        False,
    ),
    "low_precision_layernorm": (
        lambda: F.apply_low_precision_layernorm(_norms(), torch.bfloat16),
        False,
    ),
    "low_precision_groupnorm": (
        lambda: F.apply_low_precision_groupnorm(_norms(), torch.bfloat16),
        False,
    ),
    "factorization": (
        lambda: F.apply_factorization(_resnet(), min_channels=16, latent_channels=4),
        True,
    ),
}


def _check_script(model: nn.Module, x: torch.Tensor, expected: torch.Tensor, scripts: bool) -> None:
    if scripts:
        torch.testing.assert_close(torch.jit.script(model)(x), expected)
    else:
        with pytest.raises(TypeError, match=REFUSAL):
            torch.jit.script(model)


@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_transform_exports_and_scripts_or_names_the_way_out(name: str) -> None:
    build, scripts = VISION[name]
    model = build().eval()
    with torch.no_grad():
        expected = model(_IMAGES)
        exported = torch.export.export(model, (_IMAGES,)).module()
        torch.testing.assert_close(exported(_IMAGES), expected)
        _check_script(model, _IMAGES, expected, scripts)
    torch.testing.assert_close(model(_IMAGES), expected)  # scripting left the model as it was


def test_stochastic_depth_scripts_in_evaluation_only() -> None:
    """Scripted, a stochastic-depth ResNet is the unconverted model (evaluation); scripting it
    in training mode is refused, naming ``model.eval()``, and leaves it training as before."""
    model = F.apply_stochastic_depth(_resnet(), "block", "ResNetBottleneck", drop_rate=0.5)
    with pytest.raises(TypeError, match=r"StochasticBottleneck in evaluation mode only.*eval\(\)"):
        torch.jit.script(model.train())
    plain = _resnet()
    with torch.no_grad():
        torch.testing.assert_close(
            torch.jit.script(model.eval())(_IMAGES), torch.jit.script(plain.eval())(_IMAGES)
        )
    model.train()
    model(_IMAGES).sum().backward()  # still trains after scripting (the Python forward)
    assert any(p.grad is not None for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "gated_linear_units"])
def test_language_transform_exports_and_refuses_script(name: str) -> None:
    model = hf_model("bert")
    if name == "alibi":
        F.apply_alibi(model, max_sequence_length=32)
    else:
        F.apply_gated_linear_units(model)
    ids = hf_inputs("bert")["input_ids"]
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        exported = torch.export.export(model, (), {"input_ids": ids}).module()
        torch.testing.assert_close(exported(input_ids=ids).logits, expected)
    with pytest.raises(TypeError, match=REFUSAL):
        torch.jit.script(model)
