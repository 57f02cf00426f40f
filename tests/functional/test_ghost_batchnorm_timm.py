"""Ghost batch norm on timm models: BatchNormAct2d keeps its activation; the no-effect message."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from functional import GhostBatchNorm2d, GhostBatchNormAct2d, apply_ghost_batchnorm
from tests.functional._model_checks import (
    assert_idempotent,
    assert_no_effect,
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    sgd_with_state,
    train_step,
)
from tests.functional.test_ghost_batchnorm import randomized, reference
from tests.strategies import calibrate_batchnorm

timm = pytest.importorskip("timm")
from timm.layers.norm_act import BatchNormAct2d  # noqa: E402


@pytest.mark.parametrize("name", ["efficientnet_b0", "mobilenetv3_small_050", "regnety_002"])
def test_timm_models_convert_batchnorm_act_keeping_the_activation(name):
    torch.manual_seed(0)  # timm's init draws from the global generator
    model = timm.create_model(name, num_classes=5)
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    fused = {n: (m.act, m.drop) for n, m in model.named_modules() if type(m) is BatchNormAct2d}
    assert fused
    calibrate_batchnorm(model, x)
    model.eval()
    with torch.no_grad():
        expected = model(x)
    keys = list(model.state_dict())

    assert apply_ghost_batchnorm(model, ghost_batch_size=4, optimizers=opt) is model
    modules = dict(model.named_modules())
    for n, (act, drop) in fused.items():
        assert type(modules[n]) is GhostBatchNormAct2d
        assert modules[n].act is act and modules[n].drop is drop
    assert not any(type(m) is BatchNormAct2d for m in model.modules())
    assert list(model.state_dict()) == keys
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        assert torch.equal(model(x), expected)  # evaluation: exactly the original
    train_step(model, x, opt)
    fresh = timm.create_model(name, num_classes=5)
    apply_ghost_batchnorm(fresh, ghost_batch_size=4)
    fresh.load_state_dict(model.state_dict())
    assert_idempotent(model, apply_ghost_batchnorm, "nn.BatchNorm2d")


@pytest.mark.parametrize("act", [nn.ReLU(inplace=True), nn.SiLU(), nn.Hardswish()])
def test_training_applies_the_activation_after_the_ghost_batches(act):
    bn = BatchNormAct2d(4, act_layer=type(act))
    randomized(bn)
    ghost = GhostBatchNormAct2d.from_batchnorm(copy.deepcopy(bn), ghost_batch_size=3)
    x = torch.randn(8, 4, 5, 5, dtype=torch.float32)
    out = ghost(x)
    expected = type(act)()(reference(x, ghost, 3))
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, reference(x, ghost, 3))  # the activation did something
    bn.load_state_dict(ghost.state_dict())  # the running statistics the training pass left
    ghost.eval(), bn.eval()
    assert torch.equal(ghost(x), bn(x))


def test_batchnorm_act_without_a_fused_activation_and_the_layer_checks():
    bn = BatchNormAct2d(3, apply_act=False)
    ghost = GhostBatchNormAct2d.from_batchnorm(bn, ghost_batch_size=2)
    x = torch.randn(5, 3, 2, 2)
    torch.testing.assert_close(ghost(x), reference(x, ghost, 2))
    with pytest.raises(TypeError, match="without `drop`"):
        GhostBatchNormAct2d.from_batchnorm(nn.BatchNorm2d(3))
    plain = nn.Sequential(nn.BatchNorm2d(3))
    apply_ghost_batchnorm(plain)
    assert type(plain[0]) is GhostBatchNorm2d  # a plain BatchNorm2d gets no activation


def test_no_effect_message_says_exact_types_and_names_the_subclasses_seen():
    class MyBN(nn.BatchNorm2d):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(MyBN(2), nn.SyncBatchNorm(2), nn.Conv2d(2, 2, 1))
    assert_no_effect(lambda: apply_ghost_batchnorm(model), "exact type")
    assert_no_effect(lambda: apply_ghost_batchnorm(model), "subclasses it saw: MyBN, SyncBatchNorm")
    assert [type(m) for m in model] == [MyBN, nn.SyncBatchNorm, nn.Conv2d]
