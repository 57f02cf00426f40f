"""Weight standardization through parametrize."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torchvision
from torch import nn
from torch.nn.utils import parametrize

import surgery
from functional import WeightStandardizer, apply_weight_standardization
from tests.functional._model_checks import (
    assert_no_effect,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    sgd_with_state,
    train_step,
)
from tests.strategies import calibrate_batchnorm


def standardized(w: torch.Tensor) -> torch.Tensor:
    flat = w.reshape(w.shape[0], -1).double()
    out = (flat - flat.mean(1, keepdim=True)) / (
        flat.var(1, unbiased=False, keepdim=True) + 1e-10
    ).sqrt()
    return out.reshape(w.shape).to(w.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_standardizer(dtype):
    w = (torch.randn(6, 3, 3, 3) * 4 + 1).to(dtype)
    out = WeightStandardizer()(w)
    assert out.dtype == dtype
    torch.testing.assert_close(out, standardized(w))
    flat = out.double().reshape(6, -1)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(flat.mean(1), torch.zeros(6, dtype=torch.float64), atol=tol, rtol=0)
    torch.testing.assert_close(
        flat.std(1, unbiased=False), torch.ones(6, dtype=torch.float64), atol=tol, rtol=0
    )


def test_apply_on_resnet18():
    model = torchvision.models.resnet18()
    x = torch.randn(2, 3, 32, 32)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    reference = copy.deepcopy(model).eval()
    checkpoint = copy.deepcopy(model.state_dict())
    weights = {n: m.weight for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert len(weights) == 20

    assert apply_weight_standardization(model, n_last_layers_ignore=1) is model
    done = {n for n, m in model.named_modules() if parametrize.is_parametrized(m, "weight")}
    assert done == set(weights) - {"layer4.1.conv2"}  # the last convolution called
    for name in done:
        conv = model.get_submodule(name)
        assert conv.parametrizations.weight.original is weights[name]  # same Parameter
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)

    # Each convolution now uses the standardized weight, and the model computes what the
    # original computes with those weights.
    with torch.no_grad():
        for name in done:
            used = model.get_submodule(name).weight
            torch.testing.assert_close(used, standardized(weights[name]), rtol=1e-5, atol=1e-5)
            reference.get_submodule(name).weight.copy_(used)
        # BatchNorm statistics of the standardized model on x: evaluation well-conditioned on
        # any CPU (random-init statistics can overflow a deep network to inf/NaN).
        calibrate_batchnorm(model, x)
        for name, buffer in model.named_buffers():
            reference.get_buffer(name).copy_(buffer)
        expected = reference(x)
        assert torch.isfinite(expected).all()
        assert torch.equal(model.eval()(x), expected)
    train_step(model, x, opt)

    # Checkpoints with the plain keys load directly and through remap_state_dict.
    assert "conv1.parametrizations.weight.original" in model.state_dict()
    model.load_state_dict(checkpoint)
    assert torch.equal(model.conv1.parametrizations.weight.original, checkpoint["conv1.weight"])
    model.load_state_dict(surgery.remap_state_dict(checkpoint, model))
    fresh = apply_weight_standardization(torchvision.models.resnet18(), n_last_layers_ignore=1)
    fresh.load_state_dict(model.state_dict())

    assert_no_effect(
        lambda: apply_weight_standardization(model, n_last_layers_ignore=1), "nn.Conv1d/2d/3d"
    )
    assert all(len(model.get_submodule(n).parametrizations.weight) == 1 for n in done)
    apply_weight_standardization(model)  # now the last one too
    assert parametrize.is_parametrized(model.layer4[1].conv2)


class CallOrder(nn.Module):
    """Registration order differs from call order."""

    def __init__(self, traceable: bool = True):
        super().__init__()
        self.late = nn.Conv1d(4, 4, 1)
        self.early = nn.Conv1d(2, 4, 1)
        self.traceable = traceable

    def forward(self, x):
        if not self.traceable and x.sum() > 0:  # data-dependent: torch.fx cannot trace it
            x = x + 0
        return self.late(self.early(x))


def test_n_last_layers_follows_the_call_order():
    model = apply_weight_standardization(CallOrder(), n_last_layers_ignore=1)
    assert parametrize.is_parametrized(model.early) and not parametrize.is_parametrized(model.late)
    untraceable = CallOrder(traceable=False)
    with pytest.warns(UserWarning, match="registration order"):
        apply_weight_standardization(untraceable, n_last_layers_ignore=1)
    assert parametrize.is_parametrized(untraceable.late)
    assert untraceable(torch.randn(1, 2, 3)).shape == (1, 4, 3)


def test_no_effect_and_validation():
    assert_no_effect(lambda: apply_weight_standardization(nn.Linear(3, 3)), "nn.Conv1d/2d/3d")
    assert_no_effect(
        lambda: apply_weight_standardization(nn.Conv2d(3, 3, 1), n_last_layers_ignore=2),
        "n_last_layers_ignore=2",
    )
    with pytest.raises(ValueError, match="n_last_layers_ignore must be >= 0"):
        apply_weight_standardization(nn.Conv2d(3, 3, 1), n_last_layers_ignore=-1)
    with pytest.raises(TypeError, match="n_last_layers_ignore must be an int"):
        apply_weight_standardization(nn.Conv2d(3, 3, 1), n_last_layers_ignore=0.5)
    conv = nn.Conv3d(2, 2, 1).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_weight_standardization(conv)
    assert conv.weight.dtype == torch.bfloat16


def test_pickling_is_refused_and_the_state_dict_route_works(tmp_path):
    """Issue 13 #9: parametrized modules cannot be pickled whole (torch's limit, documented);
    saving the state_dict, then building, standardizing and loading gives the same model."""
    import io
    import pickle

    torch.manual_seed(0)
    model = apply_weight_standardization(
        nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.Conv2d(8, 4, 3))
    )
    with pytest.raises(RuntimeError, match="state_dict"):
        pickle.dumps(model)
    with pytest.raises(RuntimeError, match="state_dict"):
        torch.save(model, io.BytesIO())
    path = tmp_path / "ws.pt"
    torch.save(model.state_dict(), path)

    torch.manual_seed(1)  # a different initialisation, overwritten by the checkpoint
    restored = apply_weight_standardization(
        nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.Conv2d(8, 4, 3))
    )
    restored.load_state_dict(torch.load(path, weights_only=True))
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(restored(x), model(x))
    assert copy.deepcopy(model)(x).shape == (2, 4, 4, 4)
