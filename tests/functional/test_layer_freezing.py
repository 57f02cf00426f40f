"""Progressive layer freezing."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision
from torch import nn

from functional import freeze_layers
from tests.functional._model_checks import assert_no_effect, assert_optimizer_matches


class Owner(nn.Module):
    """A module owning a parameter next to its children: a layer by the documented rule."""

    def __init__(self):
        super().__init__()
        self.token = nn.Parameter(torch.zeros(4))
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

    def forward(self, x):
        return self.body(x + self.token)


@pytest.mark.parametrize(
    ("epoch", "expected_fraction", "expected_frozen"),
    [(0, 0.0, 0), (4, 0.0, 0), (5, 0.0, 0), (6, 0.2, 0), (8, 0.6, 1), (10, 1.0, 3)],
)
def test_schedule(epoch, expected_fraction, expected_frozen):
    model = Owner()
    n, fraction = freeze_layers(model, None, epoch, 10, freeze_start=0.5, freeze_level=1.0)
    assert fraction == pytest.approx(expected_fraction)
    assert n == expected_frozen
    layers = [model, model.body[0], model.body[2]]
    assert [
        not layer.weight.requires_grad if layer is not model else not model.token.requires_grad
        for layer in layers
    ] == [i < n for i in range(3)]


def test_freeze_level_and_rounding():
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(10)])
    assert freeze_layers(model, None, 3, 10, freeze_start=0.0, freeze_level=1.0) == (
        3,
        pytest.approx(0.3),
    )
    assert freeze_layers(model, None, 10, 10, freeze_start=0.2, freeze_level=0.5)[0] == 5
    # A later schedule asking for fewer layers never unfreezes the frozen ones.
    assert freeze_layers(model, None, 10, 10, freeze_start=1.0) == (0, 0.0)
    assert sum(not m.weight.requires_grad for m in model) == 5


def test_frozen_parameters_leave_the_optimizers_with_their_state():
    model = torchvision.models.resnet18()
    x = torch.randn(4, 3, 32, 32)
    convs_and_heads = [
        p for n, p in model.named_parameters() if not n.startswith(("bn", "layer1.0.bn"))
    ]
    rest = [p for p in model.parameters() if all(p is not q for q in convs_and_heads)]
    opt_a = torch.optim.Adam(convs_and_heads, lr=1e-3)
    opt_b = torch.optim.SGD(rest, lr=1e-3, momentum=0.9)
    model(x).mean().backward()
    opt_a.step(), opt_b.step()

    n, _ = freeze_layers(model, [opt_a, opt_b], current_epoch=3, max_epochs=4, freeze_start=0.0)
    layers = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    assert n == int(0.75 * len(layers))
    frozen = [p for m in layers[:n] for p in m.parameters(recurse=False)]
    assert all(not p.requires_grad and p.grad is None for p in frozen)
    held = {id(p) for o in (opt_a, opt_b) for g in o.param_groups for p in g["params"]}
    assert held == {id(p) for p in model.parameters() if p.requires_grad}
    assert not any(id(p) in held for p in frozen)
    for opt in (opt_a, opt_b):
        assert all(p.requires_grad for p in opt.state)
        copy.deepcopy(opt).load_state_dict(opt.state_dict())  # state_dict round-trips

    # Frozen BatchNorm statistics stay fixed and the frozen prefix is a fixed function.
    frozen_bn = model.bn1
    stats = (frozen_bn.running_mean.clone(), frozen_bn.running_var.clone())
    model.train()
    model(x).mean().backward()
    assert torch.equal(frozen_bn.running_mean, stats[0]) and torch.equal(
        frozen_bn.running_var, stats[1]
    )
    assert not frozen_bn.training
    assert model.layer4[1].bn2.training  # not frozen
    opt_a.step(), opt_b.step()
    # Calling again keeps everything consistent and frozen.
    freeze_layers(model, [opt_a, opt_b], current_epoch=4, max_epochs=4, freeze_start=0.0)
    assert all(not p.requires_grad for p in model.parameters())
    assert all(not g["params"] for o in (opt_a, opt_b) for g in o.param_groups)


def test_single_optimizer_consistency():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    freeze_layers(model, opt, 2, 3, freeze_start=0.0)
    assert_optimizer_matches(opt, model)
    assert not model[1].training


def test_validation_and_no_effect():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="max_epochs must be >= 1"):
        freeze_layers(model, None, 0, 0)
    with pytest.raises(ValueError, match=r"current_epoch must be <= max_epochs \(4\), got 5"):
        freeze_layers(model, None, 5, 4)
    with pytest.raises(ValueError, match=r"freeze_start must be in \[0.0, 1.0\]"):
        freeze_layers(model, None, 1, 4, freeze_start=1.5)
    with pytest.raises(ValueError, match=r"freeze_level must be in \[0.0, 1.0\]"):
        freeze_layers(model, None, 1, 4, freeze_level=-0.1)
    with pytest.raises(TypeError, match="current_epoch must be an int"):
        freeze_layers(model, None, 1.5, 4)
    with pytest.raises(TypeError, match="optimizers must be"):
        freeze_layers(model, "adam", 1, 4)
    assert_no_effect(lambda: freeze_layers(nn.ReLU(), None, 4, 4), "modules with parameters")


class _RecordingLogger:
    """A minimal logger with Composer's ``log_metrics(dict)`` method."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def log_metrics(self, metrics: dict) -> None:
        self.records.append(dict(metrics))


def test_seed_logger_argument():
    """The seed's ``logger`` parameter: None logs nothing; a logger receives the figures."""
    model = nn.Sequential(*[nn.Linear(3, 3) for _ in range(4)])
    assert freeze_layers(model, None, 1, 4, 0.5, 1.0, logger=None) == (0, 0.0)
    logger = _RecordingLogger()
    n_frozen, fraction = freeze_layers(
        model,
        None,
        current_epoch=3,
        max_epochs=4,
        freeze_start=0.5,
        freeze_level=1.0,
        logger=logger,
    )
    assert (n_frozen, fraction) == (2, 0.5)
    assert logger.records == [
        {"layer_freezing/layers_frozen": 2, "layer_freezing/percentage_frozen": 0.5}
    ]
    with pytest.raises(TypeError, match="logger must be None or have a log_metrics"):
        freeze_layers(model, None, 3, 4, logger=print)


# Composer's form: current_duration, a fraction of training.


def _stack(n: int = 6) -> torch.nn.Sequential:
    return torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(n)])


@pytest.mark.parametrize("epoch,max_epochs", [(0, 4), (2, 4), (3, 4), (4, 4), (7, 10)])
def test_duration_form_equals_epoch_form(epoch, max_epochs) -> None:
    by_epoch, by_duration = _stack(), _stack()
    got_epoch = freeze_layers(by_epoch, None, epoch, max_epochs, freeze_start=0.25)
    got_duration = freeze_layers(
        by_duration, None, current_duration=epoch / max_epochs, freeze_start=0.25
    )
    assert got_epoch == got_duration
    flags = [[p.requires_grad for p in m.parameters()] for m in (by_epoch, by_duration)]
    assert flags[0] == flags[1]


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((1, 4), {"current_duration": 0.5}, "not both"),
        ((), {"max_epochs": 4, "current_duration": 0.5}, "not both"),
        ((), {}, "current_duration"),
        ((0.6,), {}, "pass current_duration=0.6"),
    ],
)
def test_forms_mixed_wrongly_raise_type_error(args, kwargs, match) -> None:
    with pytest.raises(TypeError, match=match):
        freeze_layers(_stack(), None, *args, **kwargs)


@pytest.mark.parametrize("duration", [-0.1, 1.5, float("nan")])
def test_duration_outside_unit_interval_raises(duration) -> None:
    with pytest.raises(ValueError, match="current_duration"):
        freeze_layers(_stack(), None, current_duration=duration)
