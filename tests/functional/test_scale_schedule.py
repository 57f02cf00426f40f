"""scale_scheduler: scaled schedules equal freshly built ones and the resampled originals."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.optim import lr_scheduler as lrs

from functional import scale_scheduler
from functional._numeric import round_half_up


def optimizer(momentum: float = 0.9) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=1.0, momentum=momentum)


def lr_curve(sched: lrs.LRScheduler, n: int) -> list[float]:
    out = []
    for _ in range(n):
        out.append(sched.optimizer.param_groups[0]["lr"])
        sched.optimizer.step()
        sched.step()
    return out


# Each factory builds a scheduler whose lengths are L(n) for the base lengths n; L is the
# identity for the original and "n scaled by ssr, rounded" for the expected scaled scheduler.
def _sequential(opt, L):
    warm = lrs.LinearLR(opt, start_factor=0.1, total_iters=L(4))
    cos = lrs.CosineAnnealingLR(opt, T_max=L(12))
    return lrs.SequentialLR(opt, [warm, cos], milestones=[L(4)])


def _chained(opt, L):
    return lrs.ChainedScheduler(
        [
            lrs.ConstantLR(opt, factor=0.5, total_iters=L(6)),
            lrs.ExponentialLR(opt, 0.9 ** (1 / (L(10) / 10))),
        ]
    )


FACTORIES = {
    "StepLR": lambda opt, L: lrs.StepLR(opt, step_size=L(4), gamma=0.5),
    "MultiStepLR": lambda opt, L: lrs.MultiStepLR(opt, milestones=[L(4), L(10), L(12)], gamma=0.3),
    "CosineAnnealingLR": lambda opt, L: lrs.CosineAnnealingLR(opt, T_max=L(16), eta_min=0.01),
    "CosineAnnealingWarmRestarts": lambda opt, L: lrs.CosineAnnealingWarmRestarts(
        opt, T_0=L(4), T_mult=2
    ),
    "LinearLR": lambda opt, L: lrs.LinearLR(
        opt, start_factor=0.2, end_factor=0.9, total_iters=L(8)
    ),
    "ConstantLR": lambda opt, L: lrs.ConstantLR(opt, factor=0.25, total_iters=L(6)),
    "PolynomialLR": lambda opt, L: lrs.PolynomialLR(opt, total_iters=L(12), power=2.0),
    "OneCycleLR": lambda opt, L: lrs.OneCycleLR(opt, max_lr=2.0, total_steps=L(20), pct_start=0.3),
    "OneCycleLR-3phase": lambda opt, L: lrs.OneCycleLR(
        opt, max_lr=2.0, total_steps=L(20), three_phase=True
    ),
    "CyclicLR": lambda opt, L: lrs.CyclicLR(opt, 0.1, 1.0, step_size_up=L(4), step_size_down=L(6)),
    "SequentialLR": _sequential,
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("ssr", [0.5, 2.0, 0.3, 1.7])
def test_scaled_equals_freshly_built(name, ssr):
    factory = FACTORIES[name]
    scaled = factory(optimizer(), lambda n: n)
    assert scale_scheduler(scaled, ssr) is scaled
    expected = factory(optimizer(), lambda n: round_half_up(n * ssr))
    n = round_half_up(20 * ssr) if name.startswith("OneCycle") else 40
    torch.testing.assert_close(lr_curve(scaled, n), lr_curve(expected, n), rtol=1e-12, atol=1e-12)


def test_exponential_gamma():
    sched = lrs.ExponentialLR(optimizer(), gamma=0.81)
    scale_scheduler(sched, 2.0)
    assert math.isclose(sched.gamma, 0.9)
    assert scale_scheduler(lrs.ExponentialLR(optimizer(), gamma=0.9), 0.5).gamma == pytest.approx(
        0.81
    )


RESAMPLED = [
    "StepLR",
    "MultiStepLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "LinearLR",
    "ConstantLR",
    "PolynomialLR",
    "SequentialLR",
    "Exponential",
    "Chained",
]


def build(name, opt):
    if name == "Exponential":
        return lrs.ExponentialLR(opt, gamma=0.8)
    if name == "Chained":
        return _chained(opt, lambda n: n)
    return FACTORIES[name](opt, lambda n: n)


@pytest.mark.parametrize("name", RESAMPLED)
def test_half_speed_is_the_original_resampled(name):
    """ssr = 0.5: step t of the scaled schedule has the rate of step 2t of the original."""
    original = lr_curve(build(name, optimizer()), 40)
    scaled = lr_curve(scale_scheduler(build(name, optimizer()), 0.5), 20)
    torch.testing.assert_close(scaled, original[::2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", RESAMPLED)
def test_double_length_is_the_original_resampled(name):
    """ssr = 2: step 2t of the scaled schedule has the rate of step t of the original."""
    original = lr_curve(build(name, optimizer()), 20)
    scaled = lr_curve(scale_scheduler(build(name, optimizer()), 2.0), 40)
    torch.testing.assert_close(scaled[::2], original, rtol=1e-9, atol=1e-12)


def test_rounding_is_to_nearest():
    # 0.29 * 100 is 28.999999999999996 in floating point: truncation would give 28.
    assert scale_scheduler(lrs.StepLR(optimizer(), step_size=100), 0.29).step_size == 29
    assert scale_scheduler(lrs.StepLR(optimizer(), step_size=5), 0.5).step_size == 3  # half up
    assert scale_scheduler(lrs.StepLR(optimizer(), step_size=10), 0.33).step_size == 3
    sched = scale_scheduler(lrs.MultiStepLR(optimizer(), milestones=[3, 4, 9]), 0.3)
    assert dict(sched.milestones) == {1: 2, 3: 1}  # merged milestones keep both decays


def test_orig_max_epochs_scales_by_the_realised_ratio():
    # 90 epochs at ssr 0.33 is a 30-epoch run (29.7 rounded): ratio 1/3 exactly.
    sched = scale_scheduler(lrs.MultiStepLR(optimizer(), milestones=[30, 60, 80]), 0.33, 90)
    assert sorted(sched.milestones) == [10, 20, 27]
    cos = scale_scheduler(lrs.CosineAnnealingLR(optimizer(), T_max=90), 0.33, orig_max_epochs=90)
    assert cos.T_max == 30
    assert sorted(
        scale_scheduler(lrs.MultiStepLR(optimizer(), milestones=[30, 60, 80]), 0.33).milestones
    ) == [10, 20, 26]
    with pytest.raises(ValueError, match=r"orig_max_epochs=3 scaled by ssr=0\.1 rounds to 0"):
        scale_scheduler(lrs.StepLR(optimizer(), step_size=2), 0.1, orig_max_epochs=3)
    with pytest.raises(ValueError, match="orig_max_epochs must be >= 1, got 0"):
        scale_scheduler(lrs.StepLR(optimizer(), step_size=2), 0.5, orig_max_epochs=0)


def test_warm_restarts_first_period_is_scaled():
    sched = scale_scheduler(lrs.CosineAnnealingWarmRestarts(optimizer(), T_0=10), 0.5)
    curve = lr_curve(sched, 11)
    assert curve[5] == 1.0 and curve[10] == 1.0  # restarts every 5 steps, from the first period


def test_unsupported_types_raise_and_name_the_supported_ones():
    for sched in (
        lrs.LambdaLR(optimizer(), lambda e: 0.9**e),
        lrs.MultiplicativeLR(optimizer(), lambda e: 0.9),
        lrs.ReduceLROnPlateau(optimizer()),
    ):
        name = type(sched).__name__
        with pytest.raises(
            ValueError,
            match=rf"does not support scheduler of type {name}; supported: StepLR, MultiStepLR",
        ):
            scale_scheduler(sched, 0.5)
    with pytest.raises(ValueError, match="of type SGD"):
        scale_scheduler(optimizer(), 0.5)
    opt = optimizer()
    seq = lrs.SequentialLR(
        opt, [lrs.LambdaLR(opt, lambda e: 1.0), lrs.StepLR(opt, 2)], milestones=[3]
    )
    with pytest.raises(
        ValueError, match=r"scheduler.SequentialLR._schedulers\[0\] of type LambdaLR"
    ):
        scale_scheduler(seq, 0.5)


def test_zero_length_raises_and_changes_nothing():
    with pytest.raises(ValueError, match=r"step_size=1 scaled by 0.4 rounds to 0"):
        scale_scheduler(lrs.StepLR(optimizer(), step_size=1), 0.4)
    with pytest.raises(ValueError, match=r"milestones\[1\]=1 scaled by 0.4 rounds to 0"):
        scale_scheduler(lrs.MultiStepLR(optimizer(), milestones=[1, 10]), 0.4)
    opt = optimizer()
    warm = lrs.LinearLR(opt, total_iters=4)
    seq = lrs.SequentialLR(opt, [warm, lrs.StepLR(opt, step_size=1)], milestones=[4])
    with pytest.raises(ValueError, match=r"step_size=1 scaled by 0\.2 rounds to 0"):
        scale_scheduler(seq, 0.2)
    assert seq._milestones == [4] and warm.total_iters == 4  # planned first, applied after
    opt = optimizer()
    seq = lrs.SequentialLR(
        opt, [lrs.ConstantLR(opt), lrs.StepLR(opt, 9), lrs.StepLR(opt, 9)], milestones=[3, 4]
    )
    with pytest.raises(ValueError, match="leaving child 1 no steps"):
        scale_scheduler(seq, 0.5)


def test_stepped_scheduler_is_refused():
    sched = lrs.StepLR(optimizer(), step_size=4)
    sched.optimizer.step()
    sched.step()
    with pytest.raises(ValueError, match=r"already been stepped \(last_epoch=1\)"):
        scale_scheduler(sched, 0.5)


def test_ssr_validation():
    sched = lrs.StepLR(optimizer(), step_size=4)
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="ssr must be a finite number > 0"):
            scale_scheduler(sched, bad)
    with pytest.raises(ValueError, match="ssr must not be NaN"):
        scale_scheduler(sched, float("nan"))
    with pytest.raises(TypeError, match="ssr must be a real number"):
        scale_scheduler(sched, "0.5")
    assert sched.step_size == 4


def test_scaled_scheduler_state_dict_round_trips():
    sched = scale_scheduler(lrs.StepLR(optimizer(), step_size=10), 0.5)
    restored = lrs.StepLR(optimizer(), step_size=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored.load_state_dict(sched.state_dict())
    assert restored.step_size == 5
