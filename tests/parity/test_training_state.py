"""Composer's training-state helpers (EMA, SAM, SWA, gradient clipping, scale schedule): what
they guarantee, checked here, and side by side with Composer 0.32.1 (the ``composer`` fixture)
from the same weights and gradients.
"""

from __future__ import annotations

import copy
from types import ModuleType

import pytest
import torch
from torch import nn

import functional as F


def _model(seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return model


def _data(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(8, 4, generator=gen), torch.randint(2, (8,), generator=gen)


def _with_grads(seed: int = 0) -> nn.Module:
    model = _model(seed)
    x, y = _data()
    nn.functional.cross_entropy(model(x), y).backward()
    return model


# --- compute_ema --------------------------------------------------------------------------


def test_compute_ema_moves_each_float_tensor_by_one_minus_smoothing() -> None:
    model, ema = _model(0), _model(1)
    model(_data()[0])  # moves the BatchNorm statistics
    old = copy.deepcopy(ema.state_dict())
    F.compute_ema(model, ema, smoothing=0.75)
    for name, value in ema.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.75 * old[name] + 0.25 * model.state_dict()[name])
        else:
            assert torch.equal(value, model.state_dict()[name])  # integer buffers are copied


def test_compute_ema_matches_composer(composer: ModuleType) -> None:
    model = _model(0)
    model(_data()[0])
    ours, theirs = _model(1), _model(1)
    F.compute_ema(model, ours, smoothing=0.9)
    composer.compute_ema(model, theirs, smoothing=0.9)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        if a.is_floating_point():
            torch.testing.assert_close(a, b, msg=name)
        else:  # Composer blends integer buffers too, truncating: the guide says so
            assert a == model.state_dict()[name] and b == int(0.9 * 0 + 0.1 * 1)


# --- gradient clipping --------------------------------------------------------------------


def test_gradient_clipping_rules() -> None:
    norm_model, value_model = _with_grads(), _with_grads()
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in norm_model.parameters()]))
    returned = F.apply_gradient_clipping(norm_model, "norm", 0.1)
    torch.testing.assert_close(returned, total)
    clipped = torch.stack([p.grad.norm() for p in norm_model.parameters()]).norm()
    torch.testing.assert_close(clipped, torch.tensor(0.1), rtol=1e-4, atol=0)
    F.apply_gradient_clipping(value_model, "value", 0.01)
    assert all(p.grad.abs().max() <= 0.01 for p in value_model.parameters())


@pytest.mark.parametrize(
    ("kind", "threshold"), [("norm", 0.1), ("value", 0.05), ("adaptive", 0.01)]
)
def test_gradient_clipping_matches_composer(
    composer: ModuleType, kind: str, threshold: float
) -> None:
    ours, theirs = _with_grads(), _with_grads()
    F.apply_gradient_clipping(ours, kind, threshold)
    composer.apply_gradient_clipping(theirs, kind, threshold, fsdp_enabled=False)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


# --- SAM ----------------------------------------------------------------------------------


def _sam_run(make_sam, interval: int, steps: int = 3) -> nn.Module:
    model = _model(0)
    sam = make_sam(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), interval)
    x, y = _data()

    def closure(**_composer_keywords) -> torch.Tensor:
        sam.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    for _ in range(steps):
        sam.step(closure)
    return model


def test_sam_step_descends_from_w_with_the_perturbed_gradient() -> None:
    model = _model(0)
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    sam = F.SAMOptimizer(base, rho=0.05)
    x, y = _data()
    reference = copy.deepcopy(model)
    grads = torch.autograd.grad(
        nn.functional.cross_entropy(reference(x), y), list(reference.parameters())
    )
    scale = 0.05 / (torch.stack([g.norm() for g in grads]).norm() + 1e-12)
    with torch.no_grad():
        for p, g in zip(reference.parameters(), grads, strict=True):
            p.add_(g * scale)
    perturbed = torch.autograd.grad(
        nn.functional.cross_entropy(reference(x), y), list(reference.parameters())
    )

    def closure() -> torch.Tensor:
        sam.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    before = [p.detach().clone() for p in model.parameters()]
    sam.step(closure)
    for p, w, g in zip(model.parameters(), before, perturbed, strict=True):
        torch.testing.assert_close(p, w - 0.1 * g)


@pytest.mark.parametrize("interval", [1, 2])
def test_sam_matches_composer(composer: ModuleType, interval: int) -> None:
    from composer.algorithms.sam import SAMOptimizer

    ours = _sam_run(lambda opt, k: F.SAMOptimizer(opt, rho=0.05, interval=k), interval)
    theirs = _sam_run(lambda opt, k: SAMOptimizer(opt, rho=0.05, interval=k), interval)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b)


# --- SWA ----------------------------------------------------------------------------------


def test_swa_averages_the_weights_of_the_swa_units_equally() -> None:
    model = _model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    swa = F.SWA(model, opt, total_steps=4, swa_start=0.5)
    x, y = _data()
    seen = []
    for _ in range(4):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        swa.step()
        seen.append([p.detach().clone() for p in model.parameters()])
    averaged = list(swa.averaged_model.module.parameters())
    for i, p in enumerate(averaged):  # units 2 and 3 of 0..3 form the SWA phase
        torch.testing.assert_close(p, (seen[2][i] + seen[3][i]) / 2)


# --- scale schedule -----------------------------------------------------------------------


def test_scale_scheduler_stretches_the_schedule_by_the_ratio() -> None:
    """Composer 0.32.1 has no ``scale_scheduler``: its Trainer's ``scale_schedule_ratio`` scales
    the training length and the schedule together; here the loop runs ``ssr`` times as many
    steps and the scheduler is scaled to match."""
    opt = torch.optim.SGD(_model().parameters(), lr=1.0)
    step = F.scale_scheduler(torch.optim.lr_scheduler.StepLR(opt, step_size=10), 0.5)
    assert step.step_size == 5
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(
        torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0), T_max=8
    )
    assert F.scale_scheduler(cosine, 0.25).T_max == 2
    with pytest.raises(ValueError):
        F.scale_scheduler(torch.optim.lr_scheduler.StepLR(opt, step_size=1), 0.1)  # 0 steps
