"""The EMA's smoothing factor: :func:`ema_smoothing` turns a half-life (a number of steps, or a
time string such as ``'50ba'`` or ``'1ep'``) and an update interval into the :math:`s` that
:func:`~functional.compute_ema` takes."""

from __future__ import annotations

import math
import re

from functional._args import check_in_range

__all__ = ["ema_smoothing"]

# A time string of the EMA seed: an integer number of batches or epochs ('50ba', '1ep').
_TIME_STRING = re.compile(r"([0-9]+)(ba|ep)")


def _parse_time(value: str, name: str) -> tuple[int, str]:
    match = _TIME_STRING.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"{name} must be a number or a time string of an integer and a unit, 'ba' (batches) "
            f"or 'ep' (epochs), such as '50ba' or '1ep'; got {value!r}"
        )
    return int(match.group(1)), match.group(2)


def ema_smoothing(half_life: float | str, update_interval: float | str = 1) -> float:
    r"""The EMA smoothing factor that halves old weights' influence every ``half_life`` steps.

    .. math::
        s = \exp\Bigl(-\ln 2 \cdot \frac{\text{update_interval}}{\text{half_life}}\Bigr)

    Both arguments are numbers in the same unit (batches or epochs), or, as in the EMA seed
    (Composer's ``EMA(half_life='50ba', update_interval='1ba')``), time strings: an integer
    followed by ``'ba'`` (batches) or ``'ep'`` (epochs). The units of the two strings must
    match; a number given as ``update_interval`` next to a time-string ``half_life`` is in
    ``half_life``'s unit (the default 1 means one update per batch for ``'50ba'``, per epoch
    for ``'2ep'``). Call :func:`compute_ema` every ``update_interval`` batches (or epochs) with
    the result.

    Args:
        half_life: half-life of the average, ``>= 0``: a number of steps, or a time string
            (``'50ba'``, ``'1ep'``; integer values). 0 means no averaging (``s = 0``),
            ``math.inf`` means no update (``s = 1``).
        update_interval: steps between two EMA updates, ``> 0`` and finite, in the units of
            ``half_life``; or a time string in the same unit as a time-string ``half_life``.

    Returns:
        The smoothing factor in ``[0, 1]`` for :func:`compute_ema`.

    Raises:
        ValueError: for a negative or NaN value, a malformed time string (a unit other than
            ``'ba'``/``'ep'``, a non-integer value such as ``'1.5ba'``), units that differ, or a
            time-string ``update_interval`` with a numeric ``half_life``.

    Example:
        >>> import functional as F
        >>> F.ema_smoothing(half_life=10)
        0.9330329915368074
        >>> F.ema_smoothing(half_life=10, update_interval=10)
        0.5
        >>> F.ema_smoothing("50ba", "25ba") == F.ema_smoothing(50, 25)
        True
    """
    unit = None
    if isinstance(half_life, str):
        half_life, unit = _parse_time(half_life, "half_life")
    if isinstance(update_interval, str):
        interval, interval_unit = _parse_time(update_interval, "update_interval")
        if unit is None:
            raise ValueError(
                f"update_interval is a time string ({update_interval!r}) but half_life is a "
                f"number ({half_life!r}); give both as time strings in one unit, or both as numbers"
            )
        if interval_unit != unit:
            raise ValueError(
                f"update_interval and half_life must be in the same unit, got "
                f"update_interval={update_interval!r} and half_life in {unit!r}"
            )
        update_interval = interval
    half_life = check_in_range(half_life, "half_life", 0.0, math.inf)
    update_interval = check_in_range(
        update_interval, "update_interval", 0.0, math.inf, low_inclusive=False
    )
    if math.isinf(update_interval):
        raise ValueError(f"update_interval must be finite, got {update_interval}")
    if half_life == 0.0:
        return 0.0
    return math.exp(-math.log(2.0) * update_interval / half_life)
