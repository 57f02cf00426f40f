"""Argument checks and small helpers shared by every module of ``functional``.

Every public callable validates at entry with these, so messages read the same everywhere:
the argument's name, the rule, and the value received.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from surgery import NoEffectWarning

__all__ = [
    "check_generator",
    "check_in_range",
    "check_int",
    "check_module",
    "check_ndim",
    "check_one_of",
    "check_positive",
    "check_probability",
    "check_tensor",
    "warn_no_effect",
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
    if math.isnan(value):
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
    if v < 0 or (v == 0 and not allow_zero) or math.isinf(v):
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


def warn_no_effect(transform: str, looked_for: str, *, stacklevel: int = 3) -> None:
    """Emit :class:`surgery.NoEffectWarning` for a transform that matched nothing."""
    warnings.warn(
        f"{transform} changed nothing: the model has no {looked_for}",
        NoEffectWarning,
        stacklevel=stacklevel,
    )


# ---------------------------------------------------------------------------------------------
# Numeric helpers shared by the training-state helpers (SAM, gradient clipping, schedules, SWA)
# ---------------------------------------------------------------------------------------------


def round_half_up(value: float) -> int:
    """Nearest integer, halves rounded up (``2.5 -> 3``), robust to ``0.29 * 100 = 28.999...``.

    Python's ``round`` rounds halves to even and ``int`` truncates; lengths of schedules and
    training phases scaled by a ratio want the nearest integer, ties going to the longer phase.
    """
    return math.floor(value + 0.5 + 1e-9)


def group_by_device_and_dtype(
    tensors: Sequence[torch.Tensor], *others: Sequence[torch.Tensor]
) -> dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]]:
    """Split parallel tensor lists into groups that ``torch._foreach_*`` kernels accept.

    The key of each group is the ``(device, dtype)`` of ``tensors[i]``; the value holds one list
    per argument (``tensors`` first, then each of ``others``), in the original order.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
    for i, t in enumerate(tensors):
        lists = groups.setdefault((t.device, t.dtype), [[] for _ in range(1 + len(others))])
        lists[0].append(t)
        for j, other in enumerate(others, start=1):
            lists[j].append(other[i])
    return groups


def foreach_total_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of all ``tensors`` taken together, with ``torch._foreach_norm``.

    Accumulates in float32 (float64 when a tensor is float64); returns a 0-d tensor on the first
    tensor's device (CPU and 0.0 for an empty list). Non-finite entries give a non-finite norm.
    """
    if len(tensors) == 0:
        return torch.zeros((), dtype=torch.float32)
    out_device = tensors[0].device
    out_dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    partial = []
    for (_, dtype), (group,) in group_by_device_and_dtype(tensors).items():
        acc = dtype if dtype in (torch.float32, torch.float64) else torch.float32
        norms = torch._foreach_norm(group, 2.0, dtype=acc)
        partial.append(torch.linalg.vector_norm(torch.stack(norms)).to(out_device, out_dtype))
    return partial[0] if len(partial) == 1 else torch.linalg.vector_norm(torch.stack(partial))
def clone_module_as(module: nn.Module, cls: type[nn.Module]) -> nn.Module:
    """A new instance of ``cls`` that shares ``module``'s parameters, buffers and submodules.

    The building block of the replacement policies that subclass the layer they replace
    (``BlurConv2d(nn.Conv2d)``, ``GhostBatchNorm2d(nn.BatchNorm2d)``, ...): nothing is
    re-initialised or copied, so the very same ``Parameter`` objects (and with them the
    optimizer state) and the state_dict keys survive, and so do the layer's plain attributes
    (``stride``, ``eps``, ``padding_mode``, ...). Dictionaries and sets of the module's
    internals are copied shallowly, so registering a new tensor or submodule on the clone leaves
    ``module`` untouched. ``cls`` is normally a subclass of ``type(module)`` that only adds
    state; the caller sets that extra state on the clone.
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"cls must be an nn.Module subclass, got {cls!r}")
    clone = cls.__new__(cls)
    state = {}
    for key, value in module.__dict__.items():
        state[key] = value.copy() if isinstance(value, (dict, set)) else value
    clone.__dict__.update(state)
    return clone
