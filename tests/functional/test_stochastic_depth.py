"""Stochastic depth on torchvision ResNets and registered blocks."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import functional as F
from functional import (
    STOCHASTIC_BLOCKS,
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
    apply_stochastic_depth,
    register_stochastic_block,
)
from functional.stochastic_depth import generators
from tests.devicecheck import no_host_reads
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
from tests.strategies import calibrate_batchnorm

X = (2, 3, 32, 32)
MODELS = [
    (torchvision.models.resnet18, "ResNetBasicBlock", BasicBlock, StochasticBasicBlock, 8),
    (torchvision.models.resnet50, "ResNetBottleneck", Bottleneck, StochasticBottleneck, 16),
]


def _inputs(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("factory", "name", "plain", "stochastic", "count", "method"),
    [(*MODELS[0], "sample"), (*MODELS[1], "block")],
)
def test_eval_is_exactly_the_original_and_training_works(
    factory, name, plain, stochastic, count, method
):
    x = _inputs(8, 3, 32, 32)  # 8 samples: the 1x1 maps of the last stage give real statistics
    model = calibrate_batchnorm(factory(num_classes=10), x)
    opt = sgd_with_state(model, x)  # lr 1e-3: one small step keeps the calibrated regime
    calibrate_batchnorm(model, x)
    before = momentum_of(opt)
    model.eval()
    with torch.no_grad():
        reference = model(x)
    assert torch.isfinite(reference).all() and reference.abs().max() < 1e3
    keys = list(model.state_dict())
    params = [id(p) for p in model.parameters()]

    assert apply_stochastic_depth(model, method, name, drop_rate=0.5, optimizers=opt) is model
    blocks = [m for m in model.modules() if isinstance(m, plain)]
    assert len(blocks) == count and all(type(b) is stochastic for b in blocks)
    assert [round(b.drop_rate, 12) for b in blocks] == [
        round(0.5 * (i + 1) / count, 12) for i in range(count)
    ]
    # the original keys, plus each block's stochastic state (rate, stream position, seed)
    new_keys = list(model.state_dict())
    assert [k for k in new_keys if not k.endswith("._extra_state")] == keys
    assert len(new_keys) == len(keys) + count
    assert [id(p) for p in model.parameters()] == params
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        out = model(x)
    # The same ops in the same order: equal up to rounding on any CPU.
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    train_step(model, x, opt)
    assert_idempotent(model, lambda m: apply_stochastic_depth(m, method, name), plain.__qualname__)


def test_uniform_distribution_and_zero_rate_training_is_the_original():
    model = torchvision.models.resnet18(num_classes=10)
    twin = copy.deepcopy(model)
    apply_stochastic_depth(
        model, "block", "ResNetBasicBlock", drop_rate=0.0, drop_distribution="uniform"
    )
    assert {b.drop_rate for b in model.modules() if isinstance(b, StochasticBlock)} == {0.0}
    x = _inputs(*X)
    # Training mode: BatchNorm uses batch statistics, so activations stay normalised.
    torch.testing.assert_close(model.train()(x), twin.train()(x), rtol=1e-5, atol=1e-5)
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
        monkeypatch.setattr(generators, "_rank", lambda: rank)
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


@pytest.mark.parametrize("method", ["block", "sample"])
@pytest.mark.parametrize("skip_dropped", [True, False])
def test_training_step_reads_no_device_value(method, skip_dropped):
    """Forward and backward in both modes never read a tensor value on the host."""
    model = torchvision.models.resnet18(num_classes=10)
    apply_stochastic_depth(
        model, method, "ResNetBasicBlock", drop_rate=0.5, skip_dropped=skip_dropped, seed=3
    )
    x = _inputs(*X)
    with no_host_reads():
        for _ in range(3):
            out = model.train()(x)
            out.sum().backward()
    assert out.shape == (2, 10)


def test_sample_method_drops_per_sample():
    block = StochasticBottleneck(16, 4, drop_rate=0.5, stochastic_method="sample").train()
    x = _inputs(1, 16, 4, 4).expand(64, -1, -1, -1).contiguous()
    out = block(x)
    with torch.no_grad():
        kept = torch.relu(x + 2 * block._branch(x))  # same batch statistics: same samples
    dropped = (out - torch.relu(x)).abs().amax(dim=(1, 2, 3)) < 1e-6
    assert dropped.any() and (~dropped).any()  # 64 samples at p = 0.5: both occur
    torch.testing.assert_close(out[~dropped], kept[~dropped], rtol=1e-5, atol=1e-5)


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
    with pytest.raises(ValueError, match=r"register it first: F\.register_stochastic_block\("):
        apply_stochastic_depth(model, "block", "ResNetBlock")  # issue 22.5: say how to add one
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


def test_models_pickled_before_the_package_split_still_load():
    """Stochastic blocks pickled when stochastic_depth was one module name their classes
    ``functional.stochastic_depth.<name>``; the package re-exports every one of them."""
    block = StochasticBasicBlock(4, 4, drop_rate=0.3)
    block._drop_generators = generators._DropGenerators(5, shared=True)
    payload = pickle.dumps(block, protocol=0)  # protocol 0 writes module paths as plain lines
    for module in ("layers", "generators"):
        new_path = f"functional.stochastic_depth.{module}\n".encode()
        assert new_path in payload
        payload = payload.replace(new_path, b"functional.stochastic_depth\n")
    restored = pickle.loads(payload)
    assert type(restored) is StochasticBasicBlock
    assert type(restored._drop_generators) is generators._DropGenerators
    assert restored.drop_rate == 0.3


def test_blocks_pickled_before_device_draws_were_counted_still_load_and_draw():
    """A block pickled before it had the buffers ``drop_draws`` and ``drop_stream_keys`` gets
    them on unpickling: its device draws start at the beginning of its stream, as a fresh
    block's do."""
    model = torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    apply_stochastic_depth(model, "sample", "ResNetBasicBlock", drop_rate=0.5, seed=3)
    block = model.layer2[0]
    old = copy.copy(block)  # the old layout: no counter, no keys, no cached rate units
    old._buffers = {k: v for k, v in old._buffers.items() if k == "drop_rate_units"}
    del old.__dict__["_drop_units"]
    restored = pickle.loads(pickle.dumps(old))
    assert int(restored.drop_draws) == 0 and torch.equal(
        restored.drop_rate_units, block.drop_rate_units
    )
    ones = torch.ones(64, 1, 1, 1)
    assert torch.equal(restored.device_scale(ones), block.device_scale(ones))


@pytest.mark.parametrize("method", ["block", "sample"])
def test_meta_device_forward(method):
    """Issue 13.8: shape-only model building on the meta device works in both modes."""
    with torch.device("meta"):
        model = torchvision.models.resnet18(num_classes=10)
    apply_stochastic_depth(model, method, "ResNetBasicBlock", drop_rate=0.3, seed=0)
    assert all(b.drop_rate_units.is_meta for b in model.modules() if isinstance(b, StochasticBlock))
    out = model.train()(torch.empty(2, 3, 32, 32, device="meta"))
    assert out.shape == (2, 10) and out.is_meta
    assert model.eval()(torch.empty(2, 3, 32, 32, device="meta")).shape == (2, 10)


def test_device_decisions_without_skipping():
    """skip_dropped=False: every branch runs and every parameter gets a gradient (no
    find_unused_parameters under DDP); the decisions keep the rate and the 1/(1-p) scale."""
    block = StochasticBasicBlock(4, 4, drop_rate=0.25, skip_dropped=False).train()
    block._attach_streams(generators._DropGenerators(5, shared=True), 0)
    branch = torch.ones(1, 1, 1, 1)
    scales = torch.stack([block.device_scale(branch) for _ in range(4000)]).flatten()
    assert set(scales.tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    assert abs((scales > 0).float().mean().item() - 0.75) < 0.03
    model = torchvision.models.resnet18(num_classes=10)
    apply_stochastic_depth(
        model, "block", "ResNetBasicBlock", drop_rate=1.0, skip_dropped=False, seed=0
    )
    model.train()(_inputs(*X)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.layer2[1].conv1.weight.grad.abs().max() == 0  # dropped: a zero gradient


def test_rate_buffer_survives_dtype_conversion_and_follows_the_rate():
    model = torchvision.models.resnet18(num_classes=10)
    apply_stochastic_depth(model, "sample", "ResNetBasicBlock", drop_rate=0.2)
    model.to(torch.bfloat16)
    block = model.layer4[1]
    assert block.drop_rate_units.dtype == torch.int64
    assert block.drop_rate_units.item() == round(0.2 * 2**24)
    block.drop_rate = 0.7
    assert block.drop_rate == 0.7 and block.drop_rate_units.item() == round(0.7 * 2**24)
    assert "drop_rate_units" not in model.state_dict()  # the rate is in the block's state
    with pytest.raises(ValueError, match=r"drop_rate must be in \[0.0, 1.0\], got 1.5"):
        block.drop_rate = 1.5


# The seed's StochasticDepth(stochastic_method, target_layer_name, drop_rate, drop_distribution,
# drop_warmup, use_same_gpu_seed): drop_warmup is the fraction of training over which the drop
# rate rises linearly to drop_rate.
@pytest.mark.parametrize(
    ("progress", "drop_warmup", "expected"),
    [
        (0.0, 0.0, 0.2),
        (0.5, 0.0, 0.2),
        (0.0, 0.4, 0.0),
        (0.1, 0.4, 0.05),
        (0.2, 0.4, 0.1),
        (0.4, 0.4, 0.2),
        (0.9, 0.4, 0.2),
        (1.0, 1.0, 0.2),
        (0.5, 1.0, 0.1),
    ],
)
def test_drop_warmup_schedule(progress, drop_warmup, expected):
    got = F.stochastic_depth_drop_rate(progress, drop_rate=0.2, drop_warmup=drop_warmup)
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(progress=-0.1), r"progress must be in \[0.0, 1.0\]"),
        (dict(progress=0.5, drop_rate=1.2), r"drop_rate must be in \[0.0, 1.0\]"),
        (dict(progress=0.5, drop_warmup=1.5), r"drop_warmup must be in \[0.0, 1.0\]"),
        (dict(progress=float("nan")), "progress must not be NaN"),
    ],
)
def test_drop_warmup_schedule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        F.stochastic_depth_drop_rate(**kwargs)


@pytest.mark.parametrize("drop_distribution", ["linear", "uniform"])
def test_drop_warmup_from_the_loop_keeps_the_distribution(drop_distribution):
    """The seed's recipe without a trainer: StochasticDepth(stochastic_method='block',
    target_layer_name='ResNetBottleneck', drop_rate=0.2, drop_distribution=...,
    drop_warmup=0.5, use_same_gpu_seed=True)."""
    model = torchvision.models.resnet.ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    apply_stochastic_depth(
        model,
        stochastic_method="block",
        target_layer_name="ResNetBottleneck",
        drop_rate=0.2,
        drop_distribution=drop_distribution,
        use_same_gpu_seed=True,
    )
    blocks = [m for m in model.modules() if isinstance(m, StochasticBlock)]
    share = [(i + 1) / 4 if drop_distribution == "linear" else 1.0 for i in range(4)]
    steps = 10
    for step in range(steps + 1):
        rate = F.stochastic_depth_drop_rate(step / steps, drop_rate=0.2, drop_warmup=0.5)
        assert F.set_stochastic_depth_drop_rate(model, rate) == 4
        assert [b.drop_rate for b in blocks] == pytest.approx([rate * f for f in share])
        assert [b.drop_rate_units.item() for b in blocks] == [
            round(rate * f * 2**24) for f in share
        ]
    assert [b.drop_rate for b in blocks] == pytest.approx([0.2 * f for f in share])
    F.set_stochastic_depth_drop_rate(model, 1.0)
    assert max(b.drop_rate for b in blocks) == 1.0  # clipped at 1
    with pytest.raises(ValueError, match="convert it with apply_stochastic_depth first"):
        F.set_stochastic_depth_drop_rate(torchvision.models.resnet18(), 0.1)
    with pytest.raises(ValueError, match=r"drop_rate must be in \[0.0, 1.0\]"):
        F.set_stochastic_depth_drop_rate(model, -0.1)
    with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
        F.set_stochastic_depth_drop_rate("model", 0.1)


def test_unregister_stochastic_block():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)

        def forward(self, x):
            return x + self.body(x)

    class StochasticResidual(StochasticBlock, Residual):
        def forward(self, x):
            return self.add_branch(x, lambda: self.body(x))

    register_stochastic_block("UnregisterMe", Residual, StochasticResidual)
    assert STOCHASTIC_BLOCKS["UnregisterMe"] == (Residual, StochasticResidual)
    F.unregister_stochastic_block("UnregisterMe")
    assert "UnregisterMe" not in STOCHASTIC_BLOCKS
    with pytest.raises(ValueError, match="target_layer_name must be one of"):
        apply_stochastic_depth(nn.Sequential(Residual()), "block", "UnregisterMe")
    with pytest.raises(ValueError, match="no stochastic block is registered for 'UnregisterMe'"):
        F.unregister_stochastic_block("UnregisterMe")
    # the registry's context manager puts everything back, for tests
    with STOCHASTIC_BLOCKS.registered("UnregisterMe", (Residual, StochasticResidual)):
        model = apply_stochastic_depth(nn.Sequential(Residual()), "block", "UnregisterMe")
        assert type(model[0]) is StochasticResidual
    assert "UnregisterMe" not in STOCHASTIC_BLOCKS
    assert list(STOCHASTIC_BLOCKS)[:2] == ["ResNetBottleneck", "ResNetBasicBlock"]


# --------------------------------------------------------------------------- saved state (issue 24)


def _converted(seed: int | None = 5, rate: float = 0.4) -> nn.Module:
    model = torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    return apply_stochastic_depth(model, "block", "ResNetBasicBlock", drop_rate=rate, seed=seed)


def _decisions(model: nn.Module, n: int = 6) -> list[list[float | None]]:
    blocks = [m for m in model.modules() if isinstance(m, StochasticBlock)]
    return [[b.train().block_scale() for b in blocks] for _ in range(n)]


def test_state_dict_holds_rate_stream_and_seed_and_restores_them(tmp_path):
    """The rate set from the loop, each block's stream position and the seed are in
    ``state_dict()`` (a plain int64 tensor per block, loadable with ``weights_only=True``);
    a freshly converted model (another seed) that loads it draws what the original draws."""
    model = _converted(seed=None)
    F.set_stochastic_depth_drop_rate(model, 0.25)
    _decisions(model, 3)
    state = model.state_dict()
    extra = state["layer2.0._extra_state"]
    assert extra.dtype == torch.int64 and extra.shape == (5,) and extra[2] == 3 and extra[4] == 0
    torch.save(state, tmp_path / "model.pt")
    fresh = _converted(seed=123, rate=0.9)
    fresh.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True), strict=True)
    assert [b.drop_rate for b in fresh.modules() if isinstance(b, StochasticBlock)] == [
        b.drop_rate for b in model.modules() if isinstance(b, StochasticBlock)
    ]
    assert fresh.layer4[0].drop_rate_units.item() == round(0.25 * 2**24)
    assert _decisions(fresh) == _decisions(model)


def test_state_dict_without_the_stochastic_state_loads_strictly():
    """A state dict of the unconverted model (pretrained weights) or of a converted model saved
    before the state was saved loads with ``strict=True``; the blocks keep their rate and
    stream. A malformed state is refused with a clear message."""
    plain = torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    model = _converted()
    before = _decisions(_converted(), 2)
    model.load_state_dict(plain.state_dict(), strict=True)
    assert model.layer4[0].drop_rate == 0.4
    assert _decisions(model, 2) == before
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0)
    bad = model.state_dict()
    bad["layer1.0._extra_state"] = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="must be an int64 tensor"):
        model.load_state_dict(bad)


def test_blocks_draw_from_their_own_counted_stream():
    """A decision depends on (seed, block, draw number) and the rank only: block 2's draws do
    not depend on whether block 1 draws."""
    a, b = _converted(), _converted()
    b.layer1[0].drop_rate = 0.0  # block 1 stops drawing: the others are unaffected
    assert [row[1:] for row in _decisions(a)] == [row[1:] for row in _decisions(b)]


@pytest.mark.parametrize("shared", [True, False])
def test_rank_zero_checkpoint_resumes_every_rank(monkeypatch, shared):
    """Rank 0 saves; every rank loads the same file. Rank 1's resumed decisions are those it
    would have drawn without interruption, with rank-specific streams too."""

    def build(rank: int) -> nn.Module:
        monkeypatch.setattr(generators, "_rank", lambda: rank)
        model = torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
        return apply_stochastic_depth(
            model, "block", "ResNetBasicBlock", drop_rate=0.5, use_same_gpu_seed=shared, seed=9
        )

    rank1 = build(1)
    straight = _decisions(rank1, 6)
    rank0 = build(0)
    _decisions(rank0, 3)
    state = rank0.state_dict()
    resumed = build(1)
    resumed.load_state_dict(state)
    assert _decisions(resumed, 3) == straight[3:]
