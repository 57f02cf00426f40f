"""How ``augment`` declares an image operation: once, as its kernel, with a decorator.

A *kernel* is ``(PIL image, level, random source) -> PIL image``; it may return its input
unchanged. Decorating it declares the operation::

    @operation(draws=True)
    def rotate(img: Image.Image, level: float, src: random.Random) -> Image.Image:
        \"\"\"The public function's docstring.\"\"\"

binds ``rotate`` to the public function ``rotate(img, level, *, rng=None)`` (any image kind,
checked arguments, the kernel's name and docstring) and records the kernel in the table that
:func:`kernels_of` reads, so that the transforms call kernels directly. ``draws=False`` marks a
kernel that never draws: its public function hands it a source that raises if it does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from PIL import Image

from augment._args import check_in_range, check_rng
from augment._images import ImageLike, as_pil, from_pil
from augment._random import NO_DRAWS, RngLike, call_source

__all__ = ["Kernel", "LevelFreeOp", "Op", "kernels_of", "level_free_operation", "operation"]

Kernel = Callable[[Image.Image, float, random.Random], Image.Image]

# The module users find the operations in (``help``, pickling by reference, doctests).
_PUBLIC_MODULE = "augment.primitives"


class Op(Protocol):
    """A public operation: ``op(img, level, *, rng=None) -> img``."""

    def __call__(self, img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike: ...


class LevelFreeOp(Protocol):
    """A public operation that ignores its level: ``op(img, level=0.0, *, rng=None) -> img``."""

    def __call__(self, img: ImageLike, level: float = 0.0, *, rng: RngLike = None) -> ImageLike: ...


_KERNELS: dict[Callable[..., Any], Kernel] = {}
"""Every declared operation's public function -> its kernel."""


def _declare(kernel: Kernel, draws: bool, defaults: tuple[float, ...] | None) -> Op:
    def op(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
        pil, kind = as_pil(img)
        lv = check_in_range(level, "level", 0.0, 10.0)
        check_rng(rng)
        out = kernel(pil, lv, call_source(rng) if draws else NO_DRAWS)
        if out is pil:  # never hand the caller's own image object back
            out = pil.copy()
        return from_pil(out, kind)

    op.__name__ = op.__qualname__ = kernel.__name__
    op.__doc__ = kernel.__doc__
    op.__module__ = _PUBLIC_MODULE
    op.__defaults__ = defaults
    _KERNELS[op] = kernel
    return op


def operation(*, draws: bool) -> Callable[[Kernel], Op]:
    """Declare the decorated kernel as an operation (see the module docstring)."""
    return lambda kernel: _declare(kernel, draws, None)


def level_free_operation(kernel: Kernel) -> LevelFreeOp:
    """Declare a kernel that ignores its level (0 by default) and never draws."""
    # ``_declare`` gives ``level`` its default through ``__defaults__``, which typing cannot see
    return cast(LevelFreeOp, _declare(kernel, False, (0.0,)))


class _UserOp:
    """A caller's ``(img, level) -> img`` set member, as a kernel (picklable if ``op`` is)."""

    __slots__ = ("op",)

    def __init__(self, op: Callable[..., Any]) -> None:
        self.op = op

    def __call__(self, img: Image.Image, level: float, src: random.Random) -> Image.Image:
        out = self.op(img, level)
        name = getattr(self.op, "__name__", self.op)
        if not isinstance(out, Image.Image):
            raise TypeError(
                f"augmentation_set op {name!r} must return a PIL image, got {type(out).__name__}"
            )
        if out.size != img.size or out.mode != img.mode:
            raise ValueError(
                f"augmentation_set op {name!r} must keep the image's size and mode, got size "
                f"{out.size} and mode {out.mode!r} for an image of size {img.size} and mode "
                f"{img.mode!r} (every op must keep the size and mode)"
            )
        return out


def kernels_of(ops: Sequence[Callable[..., Any]]) -> tuple[Kernel, ...]:
    """The kernels of a set's members: ours directly, a caller's callable as ``op(img, level)``.

    A caller's callable gets no ``rng``: its own randomness is its own business.
    """
    return tuple(_KERNELS.get(op) or _UserOp(op) for op in ops)
