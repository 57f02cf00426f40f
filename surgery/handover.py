"""What a replacement takes over from the module it replaces.

The engine (:mod:`surgery.replace`) decides which modules are replaced; this module hands each
replacement its place: the replaced module's device and floating dtype (the model's first
floating tensor stands in for a module without one), its memory format (a channels-last
module's replacement stores its 4-D tensors channels-last too), its train/eval mode and the user's hooks,
forward and backward, full or legacy, whose handles keep working because the hook dictionaries
move as objects. :func:`plan_move` and :func:`check_backward_hooks` refuse what cannot be handed
over before anything changes, so the engine stays all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["LazyReference", "Move", "adopt", "check_backward_hooks", "plan_move"]

# Hook dictionaries of nn.Module that belong to the user, not to the module's implementation.
# RemovableHandle keeps weak references to these dict objects, so they move as objects.
_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)


class LazyReference:
    """The model's first floating tensor, looked up only when a replaced module has none."""

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._found: torch.Tensor | None = None
        self._searched = False

    def get(self) -> torch.Tensor | None:
        if not self._searched:
            self._searched = True
            self._found = _first_tensor(self._model)
        return self._found


def _first_tensor(module: nn.Module) -> torch.Tensor | None:
    """The first floating parameter or buffer of ``module``, else the first tensor of any dtype."""
    any_tensor = None
    for t in _tensors(module):
        if t.is_floating_point():
            return t
        if any_tensor is None:
            any_tensor = t
    return any_tensor


def _tensors(module: nn.Module) -> Iterator[torch.Tensor]:
    yield from module.parameters()
    yield from module.buffers()


Move = tuple[torch.device, "torch.dtype | None"] | None


def plan_move(old: nn.Module, new: nn.Module, fallback: LazyReference) -> Move:
    """Where ``new`` must go: ``old``'s device and floating dtype (the model's first floating
    tensor stands in for what ``old`` lacks). ``None`` when nothing has to move.

    Raises ``ValueError`` for a replacement holding meta tensors (no data) for a real module.
    """
    own = _first_tensor(old)
    device = own.device if own is not None else None
    dtype = own.dtype if own is not None and own.is_floating_point() else None
    if device is None or dtype is None:
        model_ref = fallback.get()
        if model_ref is not None:
            device = device if device is not None else model_ref.device
            if dtype is None and model_ref.is_floating_point():
                dtype = model_ref.dtype
    if device is None:
        return None
    needs_move = False
    for t in _tensors(new):
        if t.device != device:
            if t.is_meta:
                raise ValueError(
                    f"the replacement {type(new).__name__} for a {type(old).__name__} on "
                    f"{device} holds tensors on the meta device, which have no data to move; "
                    "build the replacement's new tensors on the replaced module's device (or "
                    "reuse its parameters), or call model.to_empty(device=...) afterwards"
                )
            needs_move = True
        elif dtype is not None and t.is_floating_point() and t.dtype != dtype:
            needs_move = True
    return (device, dtype) if needs_move else None


def _is_channels_last(module: nn.Module) -> bool:
    """Whether ``module``'s 4-D tensors are stored channels-last (``apply_channels_last``): at
    least one of them only in that format, none only in the default one."""
    four_d = [t for t in _tensors(module) if t.ndim == 4]
    return any(
        not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last) for t in four_d
    ) and all(t.is_contiguous(memory_format=torch.channels_last) for t in four_d)


def _to_channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if t.ndim == 4 else t


def check_backward_hooks(old: nn.Module, new: nn.Module) -> None:
    """Torch runs a module's backward hooks either all as full or all as legacy hooks."""
    old_kind = getattr(old, "_is_full_backward_hook", None)
    new_kind = getattr(new, "_is_full_backward_hook", None)
    if old._backward_hooks and new._backward_hooks and old_kind != new_kind:
        raise ValueError(
            f"cannot move the backward hooks of a {type(old).__name__} to its replacement "
            f"{type(new).__name__}: one has full backward hooks (register_full_backward_hook), "
            "the other legacy ones (register_backward_hook), and torch cannot run both on one "
            "module; register the same kind on both"
        )


def adopt(old: nn.Module, new: nn.Module, move: Move) -> None:
    """Give ``new`` the place of ``old``: device, floating dtype, channels-last memory format,
    train/eval mode and hooks."""
    if move is not None:
        device, dtype = move

        def convert(t: torch.Tensor) -> torch.Tensor:
            # floating tensors take the dtype; integer, bool and complex tensors keep theirs
            # (Module.to(dtype) would cast complex tensors to real, dropping imaginary parts)
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        new._apply(convert)
    if _is_channels_last(old):
        new._apply(_to_channels_last)
    if new.training != old.training:
        new.train(old.training)
    if old._backward_hooks and getattr(old, "_is_full_backward_hook", None) is not None:
        # whether the backward hooks are full or legacy ones is a flag on the module
        new._is_full_backward_hook = old._is_full_backward_hook
    for attr in _HOOK_DICTS:
        old_hooks = getattr(old, attr, None)
        if not old_hooks:
            continue
        new_hooks = getattr(new, attr)
        old_hooks.update(new_hooks)  # the replacement's own hooks run after the user's
        object.__setattr__(new, attr, old_hooks)
        object.__setattr__(old, attr, type(old_hooks)())
