"""The argument checks of ``augment``: its own, so that ``import augment`` needs no ``functional``.

Messages name the argument, the rule and the value received, in the words ``functional`` uses.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = [
    "AUGMIX_MIN_SEVERITY",
    "RANDAUGMENT_MIN_SEVERITY",
    "check_alpha",
    "check_depth",
    "check_in_range",
    "check_int",
    "check_one_of",
    "check_rng",
    "check_severity",
    "check_values",
]

# The lowest severity of each transform, as the seeds state: AugMix 0, RandAugment 1.
AUGMIX_MIN_SEVERITY = 0.0
RANDAUGMENT_MIN_SEVERITY = 1.0


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return float(value)


def check_in_range(value: object, name: str, low: float, high: float) -> float:
    """A real number in the closed interval ``[low, high]``, as a float."""
    v = _real(value, name)
    if low <= v <= high:
        return v
    raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is None or int(value) >= minimum:
        return int(value)
    raise ValueError(f"{name} must be >= {minimum}, got {int(value)}")


def check_one_of(value: object, name: str, choices: Sequence[object]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_rng(rng: object, name: str = "rng") -> None:
    if rng is not None and not isinstance(rng, (random.Random, np.random.Generator)):
        raise TypeError(
            f"{name} must be a random.Random, a numpy.random.Generator or None, "
            f"got {type(rng).__name__}"
        )


def check_severity(severity: object, *, minimum: float = AUGMIX_MIN_SEVERITY) -> float:
    """A severity in ``[minimum, 10]`` (see the ``*_MIN_SEVERITY`` constants)."""
    return check_in_range(severity, "severity", minimum, 10.0)


def check_alpha(alpha: object) -> float:
    a = _real(alpha, "alpha")
    if not 0.0 < a < math.inf:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    return a


def check_depth(depth: object, *, allow_random: bool) -> int:
    if not allow_random:
        return check_int(depth, "depth", minimum=0)
    d = check_int(depth, "depth")
    if d != -1 and d < 1:
        raise ValueError(
            f"depth must be -1 (a random depth in [1, 3] per chain) or an int >= 1, got {depth}"
        )
    return d


def check_values(ok: torch.Tensor, rule: str, got: Callable[[], str]) -> None:
    """Require the 0-d bool tensor ``ok`` (a check of a tensor's contents) to hold, without
    making the host wait for a device: on CPU tensors checked at once (``ValueError(f"{rule},
    got {got()}")``); on accelerators queued as a device-side assert (``torch._assert_async``,
    raised at the next synchronisation); skipped under ``torch.compile``. ``augment``'s own
    copy of ``functional``'s rule, which it may not import."""
    if torch.compiler.is_compiling():
        return
    if ok.device.type == "cpu":
        if not bool(ok):
            raise ValueError(f"{rule}, got {got()}")
    else:
        torch._assert_async(ok, rule)
