"""Argument checks of Python values, types and shapes, run at entry by every public callable.

Every public callable of ``functional`` (and every ``apply_*`` transform) validates its
arguments with these, so messages read the same everywhere: the argument's name, the rule and
the value received. They look at types, shapes and Python numbers only, never at what a tensor
holds, so they always run, eagerly and under ``torch.compile``; checks of tensor contents are
in :mod:`functional._values`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import nn

__all__ = [
    "check_bool",
    "check_generator",
    "check_in_range",
    "check_int",
    "check_module",
    "check_ndim",
    "check_one_of",
    "check_pair",
    "check_positive",
    "check_probability",
    "check_same_batch",
    "check_tensor",
]


def check_tensor(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_ndim(x: torch.Tensor, name: str, ndims: int | Sequence[int], layout: str = "") -> None:
    """Require ``x.ndim`` to be one of ``ndims``; ``layout`` (e.g. "(B, C, H, W)") goes in the message."""
    check_tensor(x, name)
    allowed = (ndims,) if isinstance(ndims, int) else tuple(ndims)
    if x.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        shape = f" {layout}" if layout else ""
        raise ValueError(f"{name} must have {want} dimensions{shape}, got shape {tuple(x.shape)}")


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    # ``value != value`` rather than ``math.isnan``: the same test, and under torch.compile a
    # Python float is symbolic, where ``math.isnan`` breaks the graph.
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return value


def check_in_range(
    value: object,
    name: str,
    low: float,
    high: float,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    v = _real(value, name)
    ok_low = v >= low if low_inclusive else v > low
    ok_high = v <= high if high_inclusive else v < high
    if not (ok_low and ok_high):
        interval = f"{'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return v


def check_probability(value: object, name: str) -> float:
    return check_in_range(value, name, 0.0, 1.0)


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    v = _real(value, name)
    if v < 0 or (v == 0 and not allow_zero) or v == math.inf:  # no isinf: compile-safe
        rule = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise ValueError(f"{name} must be {rule}, got {value}")
    return v


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(value: object, name: str, *, allow_none: bool = False) -> bool | None:
    if not (isinstance(value, bool) or (allow_none and value is None)):
        allowed = "a bool or None" if allow_none else "a bool"
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    return value


def check_one_of(value: object, name: str, choices: Sequence[object]) -> None:
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")


def check_generator(generator: object, name: str = "generator") -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def check_module(model: object, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name} must be an nn.Module, got {type(model).__name__}")
    return model


def check_pair(value: object, name: str, *, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints (``(h, w)``), each ``>= minimum``, as a pair."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return pair


def check_same_batch(x: torch.Tensor, y: torch.Tensor, x_name: str, y_name: str) -> None:
    """Require ``x`` and ``y`` to have the same size along dim 0 (the batch)."""
    if y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{y_name} must have the batch size of {x_name} ({x.shape[0]}) along dim 0, "
            f"got shape {tuple(y.shape)}"
        )
