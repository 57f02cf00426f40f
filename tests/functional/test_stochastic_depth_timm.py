"""Stochastic depth on timm's residual blocks (issue 26): the built-in timm entries of
``STOCHASTIC_BLOCKS`` on real timm models built from small configs (random init, nothing
downloaded)."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import functional as F
from functional.stochastic_depth import STOCHASTIC_BLOCKS, StochasticBlock
from functional.stochastic_depth.timm_blocks import BranchDrop
from tests.devicecheck import compile_counter
from tests.functional._model_checks import (
    assert_optimizer_matches,
    assert_state_survives,
    momentum_of,
    sgd_with_state,
    train_step,
)

timm = pytest.importorskip("timm")

# (timm model, its kwargs, target_layer_name, number of blocks, drop paths per block)
FAMILIES = {
    "resnet18": ("resnet18", {}, "TimmResNetBasicBlock", 8, 1),
    "resnet50d": ("resnet50d", {}, "TimmResNetBottleneck", 16, 1),
    "convnext": ("convnext_atto", {}, "TimmConvNeXtBlock", 12, 1),
    "vit": ("vit_tiny_patch16_224", dict(img_size=32, depth=3), "TimmViTBlock", 3, 2),
    "deit": ("deit_tiny_patch16_224", dict(img_size=32, depth=2), "TimmViTBlock", 2, 2),
    "efficientnet": ("efficientnet_b0", {}, "TimmInvertedResidual", 15, 1),
    "efficientnet_ds": ("efficientnet_b0", {}, "TimmDepthwiseSeparableConv", 1, 1),
    "regnetx": ("regnetx_002", {}, "TimmRegNetBottleneck", 13, 1),
}


def build(family: str, seed: int = 0) -> nn.Module:
    name, kwargs, *_ = FAMILIES[family]
    torch.manual_seed(seed)
    return timm.create_model(name, pretrained=False, num_classes=5, **kwargs)


def _x(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _blocks(model: nn.Module) -> list[StochasticBlock]:
    return [m for m in model.modules() if isinstance(m, StochasticBlock)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_applies_keeps_keys_and_optimizer_and_eval_is_the_original(family: str) -> None:
    _, _, layer, count, paths = FAMILIES[family]
    model = build(family)
    x = _x()
    opt = sgd_with_state(model, x)
    before = momentum_of(opt)
    keys = list(model.state_dict())
    params = [id(p) for p in model.parameters()]
    model.eval()
    with torch.no_grad():
        reference = model(x)

    assert F.apply_stochastic_depth(model, "block", layer, drop_rate=0.4, optimizers=opt) is model
    blocks = _blocks(model)
    target = STOCHASTIC_BLOCKS[layer][0]
    assert len(blocks) == count and all(isinstance(b, target) for b in blocks)
    assert sum(isinstance(m, BranchDrop) for m in model.modules()) == count * paths
    assert [b.drop_rate for b in blocks] == pytest.approx(
        [0.4 * (i + 1) / count for i in range(count)]
    )
    new_keys = list(model.state_dict())
    assert [k for k in new_keys if not k.endswith("._extra_state")] == keys
    assert [id(p) for p in model.parameters()] == params
    assert_optimizer_matches(opt, model)
    assert_state_survives(before, opt, model)
    with torch.no_grad():
        assert torch.equal(model(x), reference)  # the very same computation
    train_step(model, x, opt)


def _branch_calls(model: nn.Module, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(branch, what its BranchDrop returned) for each call in one training forward."""
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    hooks = [
        m.register_forward_hook(
            lambda _m, args, out: calls.append((args[0].detach().clone(), out.detach().clone()))
        )
        for m in model.modules()
        if isinstance(m, BranchDrop)
    ]
    try:
        model.train()(x)
    finally:
        for hook in hooks:
            hook.remove()
    return calls


def _dropped(model: nn.Module, x: torch.Tensor) -> list[bool]:
    return [bool(torch.equal(out, torch.zeros_like(out))) for _, out in _branch_calls(model, x)]


@pytest.mark.parametrize("family", ["resnet18", "vit", "efficientnet"])
@pytest.mark.parametrize("method", ["block", "sample"])
def test_rates_follow_the_schedule_and_decide(family: str, method: str) -> None:
    """Rate 0 keeps every branch, rate 1 drops every one (uniform), and a warm-up set from
    the loop reaches every block with its linear share, as for torchvision blocks."""
    _, _, layer, count, _ = FAMILIES[family]
    model = build(family)
    F.apply_stochastic_depth(model, method, layer, drop_rate=0.2, seed=1)
    x = _x()
    F.set_stochastic_depth_drop_rate(model, 0.0)
    assert all(torch.equal(branch, out) for branch, out in _branch_calls(model, x))
    for progress in (0.0, 0.25, 1.0):
        rate = F.stochastic_depth_drop_rate(progress, 0.2, drop_warmup=0.5)
        F.set_stochastic_depth_drop_rate(model, rate)
        expected = [rate * (i + 1) / count for i in range(count)]
        assert [b.drop_rate for b in _blocks(model)] == pytest.approx(expected)
    uniform = build(family)
    F.apply_stochastic_depth(
        uniform, method, layer, drop_rate=1.0, drop_distribution="uniform", seed=1
    )
    dropped = _dropped(uniform, x)
    assert dropped and all(dropped)


def test_decisions_are_seeded_and_a_dropped_branch_gets_no_gradient() -> None:
    def pattern(seed: int) -> list[bool]:
        model = build("vit")
        F.apply_stochastic_depth(
            model, "block", "TimmViTBlock", drop_rate=0.5, drop_distribution="uniform", seed=seed
        )
        return [d for _ in range(6) for d in _dropped(model, _x())]

    first = pattern(3)
    assert first == pattern(3) and first != pattern(4)
    assert any(first) and not all(first)
    model = build("resnet18")
    F.apply_stochastic_depth(
        model, "block", "TimmResNetBasicBlock", drop_rate=1.0, drop_distribution="uniform"
    )
    model.train()(_x()).sum().backward()
    assert model.layer2[1].conv1.weight.grad is None  # dropped: its backward never ran
    assert model.layer2[0].downsample[0].weight.grad is not None


def test_copies_and_pickles_keep_their_own_blocks() -> None:
    model = build("vit")
    F.apply_stochastic_depth(model, "sample", "TimmViTBlock", drop_rate=0.3, seed=2)
    x = _x()
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        blocks = _blocks(clone)
        assert type(blocks[0]) is type(_blocks(model)[0])
        assert all(m.block in blocks for m in clone.modules() if isinstance(m, BranchDrop))
        with torch.no_grad():
            assert torch.equal(clone.eval()(x), model.eval()(x))
        assert clone.train()(x).shape == (4, 5)


def test_state_dict_round_trip_into_a_freshly_transformed_model() -> None:
    model = build("convnext")
    F.apply_stochastic_depth(model, "block", "TimmConvNeXtBlock", drop_rate=0.3, seed=5)
    F.set_stochastic_depth_drop_rate(model, 0.1)
    model.train()(_x())
    fresh = build("convnext", seed=1)
    F.apply_stochastic_depth(fresh, "block", "TimmConvNeXtBlock", drop_rate=0.3, seed=6)
    fresh.load_state_dict(model.state_dict(), strict=True)
    for a, b in zip(_blocks(model), _blocks(fresh), strict=True):
        assert (a.drop_rate, a._draws) == (b.drop_rate, b._draws)
    assert [b.block_scale() for b in _blocks(model)] == [b.block_scale() for b in _blocks(fresh)]


@pytest.mark.compile
@pytest.mark.parametrize("method", ["block", "sample"])
def test_compiled_training_one_graph_across_rates(method: str) -> None:
    """A compiled ViT training step (two drop paths per block) is one graph for every draw
    and every rate set from the loop, and rate 0 trains as eager does."""
    data = [
        (_x(seed=i), torch.randint(0, 5, (4,), generator=torch.Generator().manual_seed(i)))
        for i in range(3)
    ]

    def run(forward: Callable[[torch.Tensor], torch.Tensor], model: nn.Module) -> list[float]:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses = []
        for step, (x, y) in enumerate(data):
            F.set_stochastic_depth_drop_rate(model, [0.0, 0.3, 0.0][step])
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(forward(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    def transformed() -> nn.Module:
        model = build("vit").train()
        F.apply_stochastic_depth(model, method, "TimmViTBlock", drop_rate=0.2, seed=0)
        return model

    eager = transformed()
    eager_losses = run(eager, eager)
    torch._dynamo.reset()
    model = transformed()
    compiled, counter = compile_counter(model)
    losses = run(compiled, model)
    assert counter.frame_count == 1
    assert losses[0] == pytest.approx(eager_losses[0], rel=1e-4)  # rate 0: deterministic


@pytest.mark.slow
def test_timm_entries_are_lazy_visible_and_removable() -> None:
    """``import functional`` does not import timm and lists no timm entry; once timm is
    imported the entries appear, and removing one removes it for good."""
    code = (
        "import sys, functional as F\n"
        "assert 'timm' not in sys.modules\n"
        "assert list(F.STOCHASTIC_BLOCKS) == ['ResNetBottleneck', 'ResNetBasicBlock']\n"
        "import timm\n"
        "assert 'TimmViTBlock' in F.STOCHASTIC_BLOCKS and 'timm' in repr(F.STOCHASTIC_BLOCKS[\n"
        "    'TimmViTBlock'][0].__module__)\n"
        "F.unregister_stochastic_block('TimmViTBlock')\n"
        "assert 'TimmViTBlock' not in F.STOCHASTIC_BLOCKS and 'TimmConvNeXtBlock' in F.STOCHASTIC_BLOCKS\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
