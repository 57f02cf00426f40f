"""What the ``AugMix`` and ``RandAugment`` transforms share: the set resolved, its repr, a base class."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from augment._args import AUGMIX_MIN_SEVERITY, check_depth, check_one_of, check_severity
from augment._ops import kernels_of
from augment._random import RngLike, RngStream
from augment.primitives import augmentation_sets

__all__ = ["SetTransform", "resolve_set", "set_repr"]


def resolve_set(
    augmentation_set: object, sets: dict[str, list[Callable[..., Any]]]
) -> tuple[Callable[..., Any], ...]:
    """The operations of ``augmentation_set``: a set name, or a sequence of callables."""
    if isinstance(augmentation_set, str):
        check_one_of(augmentation_set, "augmentation_set", list(sets))
        return tuple(sets[augmentation_set])
    if isinstance(augmentation_set, Sequence):
        ops = tuple(augmentation_set)
        if not ops:
            raise ValueError("augmentation_set must not be empty")
        for op in ops:
            if not callable(op):
                raise TypeError(
                    "augmentation_set must hold callables (img, level) -> img, "
                    f"got an item of type {type(op).__name__}"
                )
        return ops
    raise TypeError(
        "augmentation_set must be a set name (one of "
        + ", ".join(repr(k) for k in sets)
        + f") or a sequence of callables, got {type(augmentation_set).__name__}"
    )


def set_repr(augmentation_set: str | Sequence[Callable[..., Any]]) -> str:
    """A set name as its repr, a sequence of callables as ``[name, ...]``."""
    if isinstance(augmentation_set, str):
        return repr(augmentation_set)
    return "[" + ", ".join(getattr(op, "__name__", repr(op)) for op in augmentation_set) + "]"


class SetTransform:
    """What the ``AugMix`` and ``RandAugment`` transforms share: the checked ``severity``,
    ``depth`` and ``augmentation_set`` (compiled to kernels once) and the ``rng`` stream."""

    def __init__(
        self,
        severity: float,
        depth: int,
        augmentation_set: str | Sequence[Callable[..., Any]],
        rng: RngLike,
        *,
        random_depth: bool,
        min_severity: float = AUGMIX_MIN_SEVERITY,
    ) -> None:
        self._ops = resolve_set(augmentation_set, augmentation_sets)
        check_severity(severity, minimum=min_severity)
        self.severity = severity
        self.depth = check_depth(depth, allow_random=random_depth)
        self.augmentation_set = augmentation_set if isinstance(augmentation_set, str) else self._ops
        self._kernels = kernels_of(self._ops)
        self._stream = RngStream(rng)

    @property
    def rng(self) -> RngLike:
        return self._stream.rng

    # The kernels are found again from the operations after unpickling: a kernel is not
    # reachable by its name (that name is its public function's), so it does not pickle itself.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_kernels"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._kernels = kernels_of(self._ops)
