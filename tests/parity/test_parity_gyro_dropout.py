"""Gyro dropout as Composer 0.32.1 defines it: what its layer guarantees, checked on ours, and
side by side with Composer's ``GyroDropoutLayer`` where Composer is importable.

The two draw their masks from different random streams (Composer: NumPy's and torch's global
generators at the first step; here: a per-layer seed), so the side-by-side checks compare the
pattern, the scaling and the schedule, not the masks themselves.
"""

from __future__ import annotations

import warnings
from types import ModuleType

import pytest
import torch
from torch import nn

import functional as F
from tests.parity._peer import composer_algorithms

# Composer's own test configuration: 196 steps per epoch, 100 epochs, sigma 256, tau 16.
COMPOSER_CASE = {"iters_per_epoch": 196, "max_epoch": 100, "p": 0.5, "sigma": 256, "tau": 16}


@pytest.fixture
def gyro(request: pytest.FixtureRequest) -> ModuleType:
    return composer_algorithms(request).gyro_dropout


def _x(batch: int = 256, features: int = 512, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, features, generator=torch.Generator().manual_seed(seed))


def _check_pattern(y: torch.Tensor, x: torch.Tensor, mask: torch.Tensor, p: float, tau: int):
    """Composer's guarantees: y = x·mask/(1-p) elementwise; the mask is 0/1 and the same for
    each of ``tau`` contiguous groups of samples."""
    assert torch.equal(y, x * mask * (1 / (1 - p)))
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    group = x.shape[0] // tau
    for start in range(0, x.shape[0], group):
        assert (mask[start : start + group] == mask[start]).all()


def test_mask_and_scaling_as_composer_tests_them():
    layer = F.GyroDropoutLayer(**COMPOSER_CASE, seed=0)
    x = _x()
    _check_pattern(layer(x), x, layer.dropout_mask, layer.p, layer.tau)


def test_schedule_formula_and_eval_identity():
    layer = F.GyroDropoutLayer(**COMPOSER_CASE, seed=0)
    assert layer.iter_num == (196 * 100 // 256) * 16  # Composer: int(iters·epochs/sigma)·tau
    x = _x()
    assert layer.eval()(x) is x


def test_side_by_side_same_pattern_scaling_and_schedule(gyro: ModuleType):
    theirs = gyro.GyroDropoutLayer(**COMPOSER_CASE)
    ours = F.GyroDropoutLayer(**COMPOSER_CASE, seed=0)
    x = _x()
    torch.manual_seed(0)  # Composer draws from the global generators
    y_theirs = theirs(x)
    y_ours = ours(x)
    _check_pattern(y_theirs, x, theirs.dropout_mask, 0.5, 16)
    _check_pattern(y_ours, x, ours.dropout_mask, 0.5, 16)
    assert theirs.iter_num == ours.iter_num
    for mask in (theirs.dropout_mask, ours.dropout_mask):  # keep rate 1 - p (131072 units)
        assert abs(float(mask.mean()) - 0.5) < 0.02
    assert torch.equal(theirs.eval()(x), ours.eval()(x))


def test_side_by_side_the_same_layers_are_replaced(gyro: ModuleType):
    def model() -> nn.Module:
        return nn.Sequential(
            nn.Linear(8, 16), nn.Dropout(0.1), nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.2)),
            nn.Dropout2d(0.1), nn.Linear(16, 2),
        )  # fmt: skip

    theirs, ours = model(), model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gyro.apply_gyro_dropout(theirs, 10, 5, 0.5, 8, 2)
    F.apply_gyro_dropout(ours, 10, 5, 0.5, 8, 2)

    def replaced(m: nn.Module, cls: type) -> list[str]:
        return [name for name, sub in m.named_modules() if isinstance(sub, cls)]

    assert (
        replaced(theirs, gyro.GyroDropoutLayer)
        == replaced(ours, F.GyroDropoutLayer)
        == ["1", "2.1"]
    )
