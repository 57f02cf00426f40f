"""Types and small helpers shared by the surgery engine and the transforms built on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import torch
from torch import nn

__all__ = [
    "NoEffectWarning",
    "OptimizerArg",
    "ReplacementFunction",
    "as_optimizer_list",
]

ReplacementFunction: TypeAlias = Callable[[nn.Module, int], "nn.Module | None"]
"""A policy: called with a matching module and its running index, returns a replacement or None."""

OptimizerArg: TypeAlias = "torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None"


class NoEffectWarning(UserWarning):
    """A model transform found nothing to change.

    Transforms emit it instead of silently returning an untouched model; the message names
    what the transform looks for. Silence it with ``warnings.simplefilter("ignore", NoEffectWarning)``
    where an empty match is expected (for example when re-applying an idempotent transform).
    """


def as_optimizer_list(
    optimizers: OptimizerArg, *, argument: str = "optimizers"
) -> list[torch.optim.Optimizer]:
    """Normalise ``None``, one optimizer or a sequence of optimizers into a list, checking types."""
    if optimizers is None:
        return []
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    if isinstance(optimizers, (str, bytes)) or not isinstance(optimizers, Sequence):
        raise TypeError(
            f"{argument} must be a torch.optim.Optimizer, a sequence of them or None, "
            f"got {type(optimizers).__name__}"
        )
    result = list(optimizers)
    for i, opt in enumerate(result):
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(
                f"{argument}[{i}] must be a torch.optim.Optimizer, got {type(opt).__name__}"
            )
    return result
