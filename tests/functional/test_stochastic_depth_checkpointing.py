"""Stochastic depth under activation checkpointing: the recompute in the backward pass repeats
the original forward's decisions, so the gradients equal those of the same steps without
checkpointing (same initialisation, same seed), in ``'block'`` mode (host and device decisions)
and ``'sample'`` mode, with reentrant and non-reentrant checkpointing, for a block checkpointed
alone and for a segment of several blocks (torchvision ResNet with Bottleneck blocks), and for
timm's ``set_grad_checkpointing()`` (a ViT: two decisions per block and forward). The draw
counts end where the run without checkpointing leaves them. Two forwards before one backward
(two augmented views, R-Drop): each recompute replays the decisions of the forward it repeats,
whichever order the backward runs them in."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchvision.models.resnet import Bottleneck

import functional as F

STEPS = 2
MODES = [("block", True), ("block", False), ("sample", True)]


class _Checkpointed(nn.Module):
    """Runs ``inner`` under ``torch.utils.checkpoint.checkpoint``."""

    def __init__(self, inner: nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.inner = inner
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, x, use_reentrant=self.reentrant)


def _resnet(method: str, skip_dropped: bool) -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.resnet.ResNet(
        Bottleneck, [2, 2, 1, 1], num_classes=5, width_per_group=16
    )
    return F.apply_stochastic_depth(
        model.train(),
        method,
        "ResNetBottleneck",
        drop_rate=0.5,
        drop_distribution="uniform",
        seed=3,
        skip_dropped=skip_dropped,
    )


def _checkpoint_resnet(model: nn.Module, reentrant: bool) -> nn.Module:
    """Segments of two blocks (layer1, layer2) and single blocks (layer3, layer4)."""
    model.layer1 = _Checkpointed(model.layer1, reentrant)
    model.layer2 = _Checkpointed(model.layer2, reentrant)
    model.layer3[0] = _Checkpointed(model.layer3[0], reentrant)
    model.layer4[0] = _Checkpointed(model.layer4[0], reentrant)
    return model


def _grads_per_step(model: nn.Module, x_shape: tuple[int, ...]) -> list[list[torch.Tensor]]:
    """The gradients of ``STEPS`` SGD steps on fixed data."""
    g = torch.Generator().manual_seed(7)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for _ in range(STEPS):
        x = torch.randn(x_shape, generator=g)
        y = torch.randint(0, 5, (x_shape[0],), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        grads.append(
            [torch.zeros(()) if p.grad is None else p.grad.clone() for p in model.parameters()]
        )
        opt.step()
    return grads


def _extra_states(model: nn.Module) -> list[torch.Tensor]:
    return [v for k, v in model.state_dict().items() if k.endswith("_extra_state")]


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize(("method", "skip_dropped"), MODES)
def test_resnet_checkpointed_gradients_equal_plain(
    method: str, skip_dropped: bool, reentrant: bool
) -> None:
    plain = _resnet(method, skip_dropped)
    checkpointed = _checkpoint_resnet(_resnet(method, skip_dropped), reentrant)
    expected = _grads_per_step(plain, (4, 3, 16, 16))
    got = _grads_per_step(checkpointed, (4, 3, 16, 16))
    for step_expected, step_got in zip(expected, got, strict=True):
        for e, g in zip(step_expected, step_got, strict=True):
            torch.testing.assert_close(g, e)
    for e, g in zip(_extra_states(plain), _extra_states(checkpointed), strict=True):
        assert torch.equal(g, e)


def _two_view_grads(model: nn.Module, *, separate: bool) -> list[torch.Tensor]:
    """The gradients of one step whose loss sums two forwards (two views of a batch) before
    one backward; ``separate``: one backward per view, the first view's first."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn((4, 3, 16, 16), generator=g)
    y = torch.randint(0, 5, (4,), generator=g)
    first = nn.functional.cross_entropy(model(x), y)
    second = nn.functional.cross_entropy(model(x.flip(-1)), y)
    if separate:
        first.backward()
        second.backward()
    else:
        (first + second).backward()
    return [torch.zeros(()) if p.grad is None else p.grad for p in model.parameters()]


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize(("method", "skip_dropped"), MODES)
def test_two_forwards_before_one_backward_replay_their_own_decisions(
    method: str, skip_dropped: bool, reentrant: bool
) -> None:
    """Each recompute repeats the decisions of the forward it belongs to, not the last one."""
    plain = _resnet(method, skip_dropped)
    checkpointed = _checkpoint_resnet(_resnet(method, skip_dropped), reentrant)
    expected = _two_view_grads(plain, separate=False)
    got = _two_view_grads(checkpointed, separate=False)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
    for e, g in zip(_extra_states(plain), _extra_states(checkpointed), strict=True):
        assert torch.equal(g, e)


@pytest.mark.parametrize("reentrant", [True, False])
def test_two_forwards_backward_in_forward_order(reentrant: bool) -> None:
    """Backward of the first view's loss, then of the second's: the recomputes run in the
    order of the forwards (not last-in first-out) and still replay their own decisions."""
    plain = _resnet("sample", True)
    checkpointed = _checkpoint_resnet(_resnet("sample", True), reentrant)
    expected = _two_view_grads(plain, separate=True)
    got = _two_view_grads(checkpointed, separate=True)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)


timm = pytest.importorskip("timm")


def _vit(method: str, skip_dropped: bool) -> nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=32, depth=3
    )
    return F.apply_stochastic_depth(
        model.train(),
        method,
        "TimmViTBlock",
        drop_rate=0.5,
        drop_distribution="uniform",
        seed=3,
        skip_dropped=skip_dropped,
    )


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize(("method", "skip_dropped"), MODES)
def test_timm_grad_checkpointing_gradients_equal_plain(
    method: str, skip_dropped: bool, reentrant: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _vit(method, skip_dropped)
    checkpointed = _vit(method, skip_dropped)
    checkpointed.set_grad_checkpointing()
    real = torch.utils.checkpoint.checkpoint
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        kwargs["use_reentrant"] = reentrant
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counted)
    expected = _grads_per_step(plain, (2, 3, 32, 32))
    got = _grads_per_step(checkpointed, (2, 3, 32, 32))
    assert calls  # timm did checkpoint
    for step_expected, step_got in zip(expected, got, strict=True):
        for e, g in zip(step_expected, step_got, strict=True):
            torch.testing.assert_close(g, e)
    for e, g in zip(_extra_states(plain), _extra_states(checkpointed), strict=True):
        assert torch.equal(g, e)
