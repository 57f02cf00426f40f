"""Checks shared by the tests of the model transforms (``apply_*``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from surgery import NoEffectWarning


def trainable_ids(model: nn.Module) -> set[int]:
    return {id(p) for p in model.parameters() if p.requires_grad}


def optimizer_ids(opt: torch.optim.Optimizer) -> list[int]:
    return [id(p) for g in opt.param_groups for p in g["params"]]


def assert_optimizer_matches(opt: torch.optim.Optimizer, model: nn.Module) -> None:
    """The optimizer holds each trainable parameter of the model exactly once, and nothing else;
    its state only covers parameters it holds; ``state_dict()`` works."""
    held = optimizer_ids(opt)
    assert len(held) == len(set(held)), "a parameter appears twice in the optimizer"
    assert set(held) == trainable_ids(model)
    assert {id(p) for p in opt.state} <= set(held)
    opt.state_dict()


def sgd_with_state(model: nn.Module, x: torch.Tensor) -> torch.optim.Optimizer:
    """An SGD-with-momentum optimizer over ``model`` that has taken one step (so it has state)."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    train_step(model, x, opt)
    return opt


def train_step(model: nn.Module, x: torch.Tensor, opt: torch.optim.Optimizer) -> torch.Tensor:
    """One forward/backward/step in training mode; returns the (finite) loss."""
    model.train()
    opt.zero_grad(set_to_none=True)
    out = model(x)
    loss = out.float().mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    return loss.detach()


def momentum_of(opt: torch.optim.Optimizer) -> dict[int, torch.Tensor]:
    return {id(p): s["momentum_buffer"] for p, s in opt.state.items() if "momentum_buffer" in s}


def assert_state_survives(
    before: dict[int, torch.Tensor], opt: torch.optim.Optimizer, model: nn.Module
) -> None:
    """Every parameter still in the model kept its very momentum buffer through surgery."""
    after = momentum_of(opt)
    alive = {id(p) for p in model.parameters()}
    for pid, buf in before.items():
        if pid in alive:
            assert after[pid] is buf


def assert_no_effect(fn: Callable[[], object], match: str) -> None:
    """``fn`` emits a NoEffectWarning whose message matches ``match`` (a substring)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    messages = [str(w.message) for w in caught if issubclass(w.category, NoEffectWarning)]
    assert messages, "expected a NoEffectWarning"
    assert any(match in m for m in messages), messages


def structure(model: nn.Module) -> list[tuple[str, type]]:
    return [(name, type(m)) for name, m in model.named_modules()]


def assert_idempotent(model: nn.Module, apply: Callable[[nn.Module], object], match: str) -> None:
    """Applying the transform again changes nothing and says so."""
    before = structure(model)
    modules = list(model.modules())
    params = [id(p) for p in model.parameters()]
    assert_no_effect(lambda: apply(model), match)
    assert structure(model) == before
    assert all(a is b for a, b in zip(modules, model.modules(), strict=True))
    assert params == [id(p) for p in model.parameters()]


def assert_dtype(model: nn.Module, dtype: torch.dtype) -> None:
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point():
            assert t.dtype == dtype, f"{name} is {t.dtype}, expected {dtype}"
