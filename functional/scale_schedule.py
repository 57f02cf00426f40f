"""Scale the duration of a torch LR scheduler in place (the "scale schedule" speed-up).

Training for a fraction ``ssr`` of the original budget works much better when the learning-rate
schedule is compressed to fit the shorter run than when the run simply stops part-way through
it (see Li, Yumer, Ramanan, "Budgeted Training: Rethinking Deep Neural Network Training Under
Resource Constraints", ICLR 2020, https://arxiv.org/abs/1905.04753).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from torch.optim import lr_scheduler as lrs

from functional._args import check_int, check_positive
from functional._numeric import round_half_up

__all__ = ["scale_scheduler"]

SUPPORTED_SCHEDULERS: tuple[type, ...] = (
    lrs.StepLR,
    lrs.MultiStepLR,
    lrs.CosineAnnealingLR,
    lrs.CosineAnnealingWarmRestarts,
    lrs.ExponentialLR,
    lrs.LinearLR,
    lrs.ConstantLR,
    lrs.PolynomialLR,
    lrs.OneCycleLR,
    lrs.CyclicLR,
    lrs.SequentialLR,
    lrs.ChainedScheduler,
)

_Edit = Callable[[], None]


def _supported_names() -> str:
    return ", ".join(t.__name__ for t in SUPPORTED_SCHEDULERS)


def _scaled_length(value: float, ratio: float, where: str) -> int:
    scaled = round_half_up(value * ratio)
    if scaled <= 0:
        raise ValueError(
            f"scale_scheduler: {where}={value} scaled by {ratio:g} rounds to {scaled}; "
            "a schedule length must stay >= 1, use a larger ssr"
        )
    return scaled


def _plan_step(s: lrs.StepLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    step_size = _scaled_length(s.step_size, ratio, f"{name}.step_size")
    edits.append(lambda: setattr(s, "step_size", step_size))


def _plan_multi_step(s: lrs.MultiStepLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    milestones: Counter[int] = Counter()
    for m, count in s.milestones.items():
        milestones[_scaled_length(m, ratio, f"{name}.milestones[{m}]")] += count
    edits.append(lambda: setattr(s, "milestones", milestones))


def _plan_cosine(s: lrs.CosineAnnealingLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    t_max = _scaled_length(s.T_max, ratio, f"{name}.T_max")
    edits.append(lambda: setattr(s, "T_max", t_max))


def _plan_warm_restarts(
    s: lrs.CosineAnnealingWarmRestarts, ratio: float, name: str, edits: list[_Edit]
) -> None:
    t_0 = _scaled_length(s.T_0, ratio, f"{name}.T_0")

    def edit_restarts() -> None:
        s.T_0 = t_0
        s.T_i = t_0  # the current period, still the first one (last_epoch == 0)

    edits.append(edit_restarts)


def _plan_exponential(s: lrs.ExponentialLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    gamma = s.gamma ** (1.0 / ratio)
    edits.append(lambda: setattr(s, "gamma", gamma))


def _plan_total_iters(
    s: lrs.LinearLR | lrs.ConstantLR | lrs.PolynomialLR,
    ratio: float,
    name: str,
    edits: list[_Edit],
) -> None:
    total_iters = _scaled_length(s.total_iters, ratio, f"{name}.total_iters")
    edits.append(lambda: setattr(s, "total_iters", total_iters))


def _plan_one_cycle(s: lrs.OneCycleLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    old_total = s.total_steps
    total = _scaled_length(old_total, ratio, f"{name}.total_steps")
    # Phase k of torch's OneCycleLR ends at step frac_k·total_steps - (k + 1), the last one
    # at total_steps - 1; keep every frac_k and rebuild the ends for the new total.
    ends: list[float] = []
    for k, phase in enumerate(s._schedule_phases):
        frac = (phase["end_step"] + k + 1) / old_total
        ends.append(float(frac * total) - (k + 1))
    ends[-1] = total - 1

    def edit_one_cycle() -> None:
        s.total_steps = total
        for phase, end in zip(s._schedule_phases, ends, strict=True):
            phase["end_step"] = end

    edits.append(edit_one_cycle)


def _plan_cyclic(s: lrs.CyclicLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    up_size = s.total_size * s.step_ratio
    up = _scaled_length(up_size, ratio, f"{name}.step_size_up")
    down = _scaled_length(s.total_size - up_size, ratio, f"{name}.step_size_down")

    def edit_cyclic() -> None:
        # torch stores total_size as a float although mypy infers int from its __init__
        # (torch converts the int-annotated step sizes with float() first).
        s.total_size = float(up + down)  # type: ignore[assignment]
        s.step_ratio = up / (up + down)

    edits.append(edit_cyclic)


def _plan_sequential(s: lrs.SequentialLR, ratio: float, name: str, edits: list[_Edit]) -> None:
    bounds = [
        _scaled_length(m, ratio, f"{name}.milestones[{i}]") for i, m in enumerate(s._milestones)
    ]
    for i in range(1, len(bounds)):
        if bounds[i] <= bounds[i - 1]:
            raise ValueError(
                f"scale_scheduler: {name}.milestones {list(s._milestones)} scaled by {ratio:g} "
                f"round to {bounds}, leaving child {i} no steps; use a larger ssr"
            )
    _plan_children(s, ratio, name, edits)
    edits.append(lambda: setattr(s, "_milestones", bounds))


def _plan_children(
    s: lrs.SequentialLR | lrs.ChainedScheduler, ratio: float, name: str, edits: list[_Edit]
) -> None:
    for i, child in enumerate(s._schedulers):
        _plan(child, ratio, f"{name}._schedulers[{i}]", edits)


# One planner per supported type, tried in order (first isinstance match wins); each reads
# the scheduler, raises on a length that cannot be scaled, and appends the edits to make.
_PLANNERS: tuple[tuple[type | tuple[type, ...], Callable[..., None]], ...] = (
    (lrs.StepLR, _plan_step),
    (lrs.MultiStepLR, _plan_multi_step),
    (lrs.CosineAnnealingLR, _plan_cosine),
    (lrs.CosineAnnealingWarmRestarts, _plan_warm_restarts),
    (lrs.ExponentialLR, _plan_exponential),
    ((lrs.LinearLR, lrs.ConstantLR, lrs.PolynomialLR), _plan_total_iters),
    (lrs.OneCycleLR, _plan_one_cycle),
    (lrs.CyclicLR, _plan_cyclic),
    (lrs.SequentialLR, _plan_sequential),
    (lrs.ChainedScheduler, _plan_children),
)


def _check_fresh(scheduler: object, where: str) -> None:
    """Refuse a scheduler of an unsupported type or one that has already stepped."""
    if not isinstance(scheduler, SUPPORTED_SCHEDULERS):
        raise ValueError(
            f"scale_scheduler does not support {where} of type {type(scheduler).__name__}; "
            f"supported: {_supported_names()} (write the schedule as a function of training "
            "progress instead)"
        )
    # ChainedScheduler keeps no step count of its own; its children are checked one by one.
    last_epoch = getattr(scheduler, "last_epoch", 0)
    if last_epoch > 0:
        raise ValueError(
            f"scale_scheduler: {where} ({type(scheduler).__name__}) has already been stepped "
            f"(last_epoch={last_epoch}); scale it right after constructing it"
        )


def _plan(scheduler: object, ratio: float, where: str, edits: list[_Edit]) -> None:
    """Append the in-place edits that scale ``scheduler``; raise before anything is changed."""
    _check_fresh(scheduler, where)
    name = f"{where}.{type(scheduler).__name__}"
    for types, planner in _PLANNERS:
        if isinstance(scheduler, types):
            planner(scheduler, ratio, name, edits)
            return


def scale_scheduler(
    scheduler: lrs.LRScheduler, ssr: float, orig_max_epochs: int | None = None
) -> lrs.LRScheduler:
    r"""Make ``scheduler`` take ``ssr`` times as many steps, editing it in place.

    Lengths :math:`n` (in scheduler steps) become :math:`\operatorname{round}(n \cdot r)`,
    halves rounded up, where :math:`r` is ``ssr``; a length that rounds to 0 raises
    ``ValueError``. Decay rates per step become :math:`\gamma^{1/r}`. So where the lengths
    scale exactly, the new schedule is the old one resampled:
    :math:`\text{lr}_\text{new}(t) = \text{lr}_\text{old}(t / r)` whenever :math:`t / r` is an
    integer step (e.g. ``ssr=0.5``: the new step ``t`` has the old step ``2t``'s rate), and the
    scaled scheduler behaves exactly like one constructed with the scaled lengths.

    ================================ ========================================================
    scheduler                        what is scaled
    ================================ ========================================================
    ``StepLR``                       ``step_size``
    ``MultiStepLR``                  every milestone (milestones that merge keep every decay)
    ``CosineAnnealingLR``            ``T_max``
    ``CosineAnnealingWarmRestarts``  ``T_0`` (and the current period ``T_i``; ``T_mult`` kept)
    ``ExponentialLR``                ``gamma`` becomes ``gamma ** (1 / r)``
    ``LinearLR``, ``ConstantLR``,    ``total_iters``
    ``PolynomialLR``
    ``OneCycleLR``                   ``total_steps``; the phase fractions (``pct_start``) kept
    ``CyclicLR``                     ``step_size_up`` and ``step_size_down``
    ``SequentialLR``                 the milestones and, recursively, every child
    ``ChainedScheduler``             every child, recursively
    ================================ ========================================================

    Other schedulers (``LambdaLR``, ``MultiplicativeLR``, ``ReduceLROnPlateau``, ...) have no
    well-defined length and raise ``ValueError`` naming the supported types. Scale a scheduler
    right after constructing it: one that has already stepped raises ``ValueError``. Nothing is
    changed when an error is raised.

    ``orig_max_epochs`` is the length of the original run, in scheduler steps (epochs when the
    scheduler is stepped once per epoch). When given, the new run lasts
    ``new = round(orig_max_epochs · ssr)`` steps and every length is scaled by
    :math:`r = \text{new} / \text{orig_max_epochs}` instead of ``ssr``, so the schedule keeps
    the same shape relative to the run your loop actually performs (a ``T_max`` equal to the
    original run becomes exactly ``new``).

    Args:
        scheduler: the torch LR scheduler to edit.
        ssr: the scale schedule ratio, a finite number > 0 (0.5: half as many steps).
        orig_max_epochs: optional length of the original run in scheduler steps, >= 1.

    Returns:
        ``scheduler`` itself, edited.

    Example:
        >>> import torch
        >>> from functional import scale_scheduler
        >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[30, 60, 80], gamma=0.1)
        >>> sorted(scale_scheduler(sched, 0.5).milestones)
        [15, 30, 40]
    """
    ratio = check_positive(ssr, "ssr")
    if orig_max_epochs is not None:
        orig = check_int(orig_max_epochs, "orig_max_epochs", minimum=1)
        new = round_half_up(orig * ratio)
        if new == 0:
            raise ValueError(
                f"scale_scheduler: orig_max_epochs={orig} scaled by ssr={ssr} rounds to 0 steps"
            )
        ratio = new / orig
    edits: list[_Edit] = []
    _plan(scheduler, ratio, "scheduler", edits)
    for edit in edits:
        edit()
    return scheduler
