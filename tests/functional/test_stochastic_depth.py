"""Stochastic depth on torchvision ResNets and registered blocks."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import functional.stochastic_depth as sd
from functional import (
    STOCHASTIC_BLOCKS,
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
    apply_stochastic_depth,
    register_stochastic_block,
)
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

X = (2, 3, 32, 32)
MODELS = [
    (torchvision.models.resnet18, "ResNetBasicBlock", BasicBlock, StochasticBasicBlock, 8),
    (torchvision.models.resnet50, "ResNetBottleneck", Bottleneck, StochasticBottleneck, 16),
]


@pytest.mark.parametrize(
    ("factory", "name", "plain", "stochastic", "count", "method"),
    [(*MODELS[0], "sample"), (*MODELS[1], "block")],
)
def test_eval_is_exactly_the_original_and_training_works(
    factory, name, plain, stochastic, count, method
):
    model = factory()
    x = torch.randn(*X)
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    model.eval()
    with torch.no_grad():
        reference = model(x)
    keys = list(model.state_dict())
    params = [id(p) for p in model.parameters()]

    assert apply_stochastic_depth(model, method, name, drop_rate=0.5, optimizers=opt) is model
    blocks = [m for m in model.modules() if isinstance(m, plain)]
    assert len(blocks) == count and all(type(b) is stochastic for b in blocks)
    assert [round(b.drop_rate, 12) for b in blocks] == [
        round(0.5 * (i + 1) / count, 12) for i in range(count)
    ]
    assert list(model.state_dict()) == keys
    assert [id(p) for p in model.parameters()] == params
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        assert torch.equal(model(x), reference)
    train_step(model, x, opt)
    assert_idempotent(model, lambda m: apply_stochastic_depth(m, method, name), plain.__qualname__)


def test_uniform_distribution_and_zero_rate_training_is_the_original():
    model = torchvision.models.resnet18()
    twin = copy.deepcopy(model)
    apply_stochastic_depth(
        model, "block", "ResNetBasicBlock", drop_rate=0.0, drop_distribution="uniform"
    )
    assert {b.drop_rate for b in model.modules() if isinstance(b, StochasticBlock)} == {0.0}
    x = torch.randn(*X)
    assert torch.equal(model.train()(x), twin.train()(x))
    apply_stochastic_depth(
        twin, "sample", "ResNetBasicBlock", drop_rate=0.3, drop_distribution="uniform"
    )
    assert {b.drop_rate for b in twin.modules() if isinstance(b, StochasticBlock)} == {0.3}


@pytest.mark.parametrize("with_downsample", [False, True])
def test_dropped_branch_leaves_the_shortcut(with_downsample):
    downsample = (
        nn.Sequential(nn.Conv2d(8, 16, 1, stride=2), nn.BatchNorm2d(16))
        if with_downsample
        else None
    )
    block = StochasticBasicBlock(
        8,
        16 if with_downsample else 8,
        stride=2 if with_downsample else 1,
        downsample=downsample,
        drop_rate=1.0,
    )
    x = torch.randn(2, 8, 6, 6)
    shortcut = block.downsample(x) if with_downsample else x
    torch.testing.assert_close(block.train()(x), torch.relu(shortcut))


def test_kept_branches_are_scaled_by_the_inverse_keep_probability():
    block = StochasticBottleneck(16, 4, drop_rate=0.25, stochastic_method="sample")
    branch = torch.ones(4000, 1, 1, 1)
    torch.manual_seed(1)
    scale = block.train().sample_scale(branch)
    values = set(scale.flatten().tolist())
    assert values <= {0.0, torch.tensor(1 / 0.75).item()}
    kept = (scale > 0).float().mean().item()
    assert abs(kept - 0.75) < 0.03  # ~4.4 standard deviations
    assert block.eval().sample_scale(branch) is None
    assert block.train().block_scale() is None  # 'sample' mode draws no block decision
    block.stochastic_method = "block"
    decisions = [block.block_scale() for _ in range(4000)]
    assert set(decisions) == {0.0, 1 / 0.75}
    assert abs(sum(d > 0 for d in decisions) / 4000 - 0.75) < 0.03
    assert block.sample_scale(branch) is None and block.eval().block_scale() is None


def test_dropped_block_skips_its_branch():
    model = torchvision.models.resnet18()
    apply_stochastic_depth(
        model, "block", "ResNetBasicBlock", drop_rate=1.0, drop_distribution="uniform"
    )
    calls = []
    model.layer2[1].conv1.register_forward_hook(lambda *args: calls.append(1))
    model.train()(torch.randn(*X)).sum().backward()
    assert calls == []
    assert model.layer2[1].conv1.weight.grad is None  # never computed, never reached
    assert model.layer2[0].downsample[0].weight.grad is not None  # the shortcut still runs


def test_decisions_are_reproducible_and_shared_or_independent_across_ranks(monkeypatch):
    def draws(model, n=8):
        blocks = [m for m in model.modules() if isinstance(m, StochasticBlock)]
        return [[b.block_scale() > 0 for b in blocks] for _ in range(n)]

    def build(rank, shared, seed=123):
        monkeypatch.setattr(sd, "_rank", lambda: rank)
        model = torchvision.models.resnet18().train()
        apply_stochastic_depth(
            model,
            "block",
            "ResNetBasicBlock",
            drop_rate=0.5,
            drop_distribution="uniform",
            use_same_gpu_seed=shared,
            seed=seed,
        )
        return draws(model)

    assert build(0, True) == build(1, True)  # same decisions on every rank
    assert build(0, False) != build(1, False)  # independent decisions
    assert build(0, False) == build(0, False)  # reproducible
    assert build(0, True, seed=1) != build(0, True, seed=2)


def test_training_forward_never_synchronises(monkeypatch):
    model = torchvision.models.resnet18()
    apply_stochastic_depth(model, "block", "ResNetBasicBlock", drop_rate=0.5)
    x = torch.randn(*X)

    def forbidden(*_args, **_kwargs):
        raise AssertionError("host synchronisation inside the forward pass")

    for name in ("item", "__bool__", "tolist", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    out = model.train()(x)
    monkeypatch.undo()
    assert out.shape == (2, 1000)


def test_sample_method_drops_per_sample():
    block = StochasticBottleneck(16, 4, drop_rate=0.5, stochastic_method="sample").train()
    with torch.no_grad():
        for m in (block.bn3,):
            m.weight.fill_(1.0)
    x = torch.randn(1, 16, 4, 4).expand(64, -1, -1, -1).contiguous()
    out = block(x)
    distinct = {tuple(o.flatten()[:4].tolist()) for o in out.round(decimals=4)}
    assert len(distinct) == 2  # each sample either kept its branch or dropped it


def test_registry_for_user_blocks():
    class Residual(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Linear(width, width)
            self.scale = 3

        def forward(self, x):
            return x + self.body(x)

    class StochasticResidual(StochasticBlock, Residual):
        def forward(self, x):
            return self.add_branch(x, self.body(x))

    register_stochastic_block("TestResidual", Residual, StochasticResidual)
    try:
        model = nn.Sequential(Residual(4), nn.ReLU(), Residual(4))
        x = torch.randn(3, 4)
        reference = model(x)
        apply_stochastic_depth(model, "sample", "TestResidual", drop_rate=0.4)
        assert type(model[0]) is StochasticResidual and model[0].scale == 3
        assert [model[0].drop_rate, model[2].drop_rate] == pytest.approx([0.2, 0.4])
        torch.testing.assert_close(model.eval()(x), reference, rtol=0, atol=0)
        model.train()(x).sum().backward()
    finally:
        del STOCHASTIC_BLOCKS["TestResidual"]
    with pytest.raises(TypeError, match="stochastic must subclass both"):
        register_stochastic_block("Bad", Residual, StochasticBottleneck)
    with pytest.raises(TypeError, match=r"target must be an nn.Module subclass"):
        register_stochastic_block("Bad", int, StochasticBottleneck)


def test_validation_and_no_effect():
    model = torchvision.models.resnet18()
    with pytest.raises(
        ValueError, match="target_layer_name must be one of 'ResNetBasicBlock', 'ResNetBottleneck'"
    ):
        apply_stochastic_depth(model, "block", "ResNetBlock")
    with pytest.raises(ValueError, match="stochastic_method must be one of"):
        apply_stochastic_depth(model, "layer", "ResNetBasicBlock")
    with pytest.raises(ValueError, match="drop_distribution must be one of"):
        apply_stochastic_depth(model, "block", "ResNetBasicBlock", drop_distribution="cosine")
    with pytest.raises(ValueError, match=r"drop_rate must be in \[0.0, 1.0\]"):
        apply_stochastic_depth(model, "block", "ResNetBasicBlock", drop_rate=1.5)
    with pytest.raises(TypeError, match="use_same_gpu_seed must be a bool"):
        apply_stochastic_depth(model, "block", "ResNetBasicBlock", use_same_gpu_seed=1)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        apply_stochastic_depth(model, "block", "ResNetBasicBlock", seed=-1)
    assert_no_effect(
        lambda: apply_stochastic_depth(model, "block", "ResNetBottleneck"),
        "torchvision.models.resnet.Bottleneck blocks",
    )
    assert all(type(m) is not StochasticBottleneck for m in model.modules())


def test_dtype_copy_and_pickle():
    model = torchvision.models.resnet18().to(torch.bfloat16)
    apply_stochastic_depth(model, "sample", "ResNetBasicBlock", drop_rate=0.2)
    assert_dtype(model, torch.bfloat16)
    x = torch.randn(2, 3, 16, 16, dtype=torch.bfloat16)
    assert model.train()(x).dtype == torch.bfloat16
    clone = copy.deepcopy(model)
    blocks = [m for m in clone.modules() if isinstance(m, StochasticBlock)]
    assert len({id(b._drop_generators) for b in blocks}) == 1  # still one shared stream
    restored = pickle.loads(pickle.dumps(model))
    assert restored.eval()(x).shape == (2, 1000)
