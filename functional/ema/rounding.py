"""Low-precision EMAs: the update of bfloat16 and float16 EMA tensors computed in float32 and
rounded stochastically (:func:`_lerp_stochastic_`), and the warning given when such an EMA is
updated with round-to-nearest, where small updates round away (:func:`_warn_round_to_nearest`).
Private to the package: :mod:`~functional.ema.update` uses it.
"""

from __future__ import annotations

import warnings

import torch

# EMA dtypes whose update (1 - s)·(model - ema) is smaller than half a unit in the last place for
# the usual smoothing factors (bfloat16 keeps 8 significant bits, float16 11).
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _round_stochastic_(out: torch.Tensor, x: torch.Tensor, generator: torch.Generator) -> None:
    r"""Write ``x`` (float32) into the low-precision ``out``, rounded stochastically.

    ``x`` lies between two neighbours of ``out``'s dtype, :math:`y` (the nearest) and :math:`z`
    (the next one towards ``x``); it becomes :math:`z` with probability
    :math:`(x - y) / (z - y)` and :math:`y` otherwise, so the rounding is unbiased:
    :math:`\mathbb{E}[\text{out}] = x`. Values the dtype holds exactly stay as they are; NaN and
    infinities round to nearest.
    """
    nearest = x.to(out.dtype)
    low = nearest.float()
    away = torch.where(x > low, torch.inf, -torch.inf).to(out.dtype)
    other = torch.nextafter(nearest, away)
    chance = (x - low) / (other.float() - low)
    draw = torch.rand(x.shape, generator=generator, device=x.device)
    out.copy_(torch.where(draw < chance, other, nearest))


def _lerp_stochastic_(
    ema_list: list[torch.Tensor],
    model_list: list[torch.Tensor],
    weight: float | torch.Tensor,
    generator: torch.Generator,
) -> None:
    """``ema ← lerp(ema, model, weight)`` computed in float32 and rounded stochastically into
    each low-precision EMA tensor; one tensor at a time, so the float32 temporaries are the size
    of the largest tensor."""
    if isinstance(weight, torch.Tensor):
        weight = weight.to(torch.float32)
    for ema, value in zip(ema_list, model_list, strict=True):
        target = torch.lerp(ema.float(), value.to(ema.device, torch.float32), weight)
        _round_stochastic_(ema, target, generator)


def _warn_round_to_nearest(dtype: torch.dtype) -> None:
    """Warn that a low-precision EMA rounds small updates away, and say the two fixes."""
    warnings.warn(
        f"compute_ema: ema_model holds {dtype} tensors; an update (1 - smoothing)·(model - ema) "
        "smaller than half a unit in the last place rounds away, so the EMA lags or stops "
        f"moving (a {dtype} EMA at smoothing 0.999 does not move at all). Keep the EMA in "
        "float32 (e.g. ema_model = copy.deepcopy(model).float()), or pass "
        "generator=torch.Generator(device) for stochastic rounding",
        UserWarning,
        stacklevel=3,
    )
