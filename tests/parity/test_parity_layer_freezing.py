"""Layer freezing against Composer 0.32.1's ``freeze_layers(model, optimizers, current_duration,
freeze_start, freeze_level)``: the duration form in our words, and side by side with Composer
where the two agree (the scheduled fraction; skipped without Composer)."""

from __future__ import annotations

import pytest
import torch

import functional as F


def _stack(n: int = 6) -> torch.nn.Sequential:
    torch.manual_seed(0)  # the weights do not matter here; the layer count does
    return torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(n)])


@pytest.mark.parametrize("duration", [0.0, 0.5, 0.55, 0.8, 1.0])
def test_duration_form_freezes_the_first_layers_and_leaves_the_optimizer(duration) -> None:
    model = _stack()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    n_frozen, fraction = F.freeze_layers(model, opt, current_duration=duration, freeze_start=0.5)
    assert fraction == pytest.approx(max(0.0, (duration - 0.5) / 0.5))
    assert n_frozen == int(fraction * 6 + 1e-9)
    frozen = [not m.weight.requires_grad for m in model]
    assert frozen == [i < n_frozen for i in range(6)]
    assert len(opt.param_groups[0]["params"]) == 2 * (6 - n_frozen)


@pytest.mark.parametrize("duration", [0.2, 0.6, 0.9, 1.0])
@pytest.mark.parametrize("freeze_start,freeze_level", [(0.5, 1.0), (0.0, 0.5)])
def test_side_by_side_scheduled_fraction(duration, freeze_start, freeze_level) -> None:
    composer_lf = pytest.importorskip("composer.algorithms.layer_freezing.layer_freezing")
    ours, theirs = _stack(), _stack()
    _, fraction = F.freeze_layers(
        ours, None, current_duration=duration, freeze_start=freeze_start, freeze_level=freeze_level
    )
    opt = torch.optim.SGD(theirs.parameters(), lr=0.1)
    _, their_fraction = composer_lf.freeze_layers(
        theirs, opt, current_duration=duration, freeze_start=freeze_start, freeze_level=freeze_level
    )
    assert fraction == pytest.approx(their_fraction)
    # Layers: ours are every module owning parameters; Composer's are the leaf modules owning
    # parameters minus the last one (its depth is int(fraction * (L - 1))).
