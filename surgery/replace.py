"""The module-replacement engine.

``replace_module_classes`` walks a model once, in the order of ``model.named_modules()``, asks the
policies for a replacement of every module whose class matches, installs each replacement in
every parent of the module it replaces, moves it to that module's device and floating dtype,
carries the hooks over, and finally brings the optimizers in line in one linear pass.

Conventions for policy authors (so checkpoints keep loading):

* Reuse the original ``nn.Parameter`` objects wherever the weights survive; the optimizer then
  keeps their state and nothing has to be copied.
* Keep state_dict keys stable: subclass the replaced layer (``class BlurConv2d(nn.Conv2d)``) or
  register the reused parameters under the names they had. New tensors go under new names.
* Where keys must differ, implement ``surgery_remap_state_dict(state_dict, prefix)`` on the
  replacement; :func:`surgery.remap_state_dict` calls it to translate pre-surgery checkpoints.
* Make the policy idempotent by checking the module's type, not a marker attribute: return
  ``None`` for a module that is already a replacement.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping

import torch
from torch import nn

from surgery._types import OptimizerArg, ReplacementFunction, as_optimizer_list
from surgery.optim import rebuild_param_groups
from surgery.wrappers import check_unwrapped

__all__ = ["count_module_instances", "replace_module_classes"]

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


def replace_module_classes(
    model: nn.Module,
    policies: Mapping[type[nn.Module], ReplacementFunction],
    *,
    optimizers: OptimizerArg = None,
    recurse_on_replacements: bool = False,
    indices: MutableMapping[type[nn.Module], int] | None = None,
    exact_type: bool = False,
    dry_run: bool = False,
) -> dict[nn.Module, nn.Module]:
    """Replace the submodules of ``model`` that match ``policies``, in place.

    Every submodule is visited once, in ``model.named_modules()`` order. For each one, the
    policies are tried in mapping order: a policy matches when the module is an instance of its
    key (``type(module) is key`` with ``exact_type=True``); it is called as
    ``policy(module, index)``, where ``index`` counts the calls made for that key so far
    (continuing from ``indices`` when given), and the first one to return a module wins; ``None``
    passes the module on to the next matching policy. The root module itself is never replaced.

    A module shared by several parents is replaced once and the one replacement is installed in
    every parent. Each replacement is moved to the replaced module's device and floating dtype,
    takes its train/eval mode, and receives its forward, forward-pre and backward hooks.

    Args:
        model: the model to change in place. Must not be wrapped in DDP, FSDP or
            ``torch.compile``; apply surgery first, then wrap.
        policies: mapping from module class to replacement function.
        optimizers: optimizers to keep consistent (see :func:`update_params_in_optimizer`).
        recurse_on_replacements: also apply the policies inside replacement modules.
        indices: running per-class counters, updated in place; a fresh dict when ``None``.
        exact_type: match ``type(module) is cls`` instead of ``isinstance``.
        dry_run: compute and return the mapping without changing the model or the optimizers.

    Returns:
        ``{old_module: new_module}`` for every replacement, in traversal order.

    All policies run before anything is installed: when one raises, or a replacement is
    refused, the model, its hooks and the optimizers are left exactly as they were.

    Raises:
        TypeError: for a wrapped model (DDP, FSDP, ``torch.compile``, TorchScript), a malformed
            policy mapping, or a policy that returns something other than an ``nn.Module`` or
            ``None``.
        ValueError: for a replacement holding meta-device tensors (no data) for a module that
            has data, or backward hooks of both kinds (full and legacy) on one module.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> mapping = replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})
        >>> type(model[1]).__name__, len(mapping)
        ('GELU', 1)
    """
    check_unwrapped(model)
    policy_items = _check_policies(policies)
    opts = as_optimizer_list(optimizers)
    if indices is None:
        indices = {}
    elif not isinstance(indices, MutableMapping):
        raise TypeError(
            f"indices must be a dict of class -> int or None, got {type(indices).__name__}"
        )

    replaced: dict[nn.Module, nn.Module] = {}
    decision: dict[int, nn.Module | None] = {id(model): None}
    fallback = _LazyReference(model)
    # Nothing is installed until every policy has run: a policy that raises (or returns
    # something that is not a module) leaves the model, its hooks and the optimizers untouched.
    installs: list[tuple[nn.Module, str, nn.Module]] = []

    # Iterative pre-order walk: a stack of (parent, iterator over its children).
    stack: list[tuple[nn.Module, Iterator[tuple[str, nn.Module | None]]]] = [
        (model, iter(list(model._modules.items())))
    ]
    on_path: set[int] = {id(model)}
    while stack:
        parent, children = stack[-1]
        step = next(children, None)
        if step is None:
            stack.pop()
            on_path.discard(id(parent))
            continue
        name, child = step
        if child is None:
            continue
        key = id(child)
        if key in decision:  # seen before: shared module, or an original inside its replacement
            new = decision[key]
            if new is not None and id(new) not in on_path:
                installs.append((parent, name, new))
            continue
        new = _first_replacement(child, policy_items, indices, exact_type)
        decision[key] = new
        if new is None:
            descend = child
        else:
            replaced[child] = new
            decision.setdefault(id(new), None)
            installs.append((parent, name, new))
            descend = new if recurse_on_replacements else None
        if descend is not None and descend._modules:
            stack.append((descend, iter(list(descend._modules.items()))))
            on_path.add(id(descend))

    if dry_run or not replaced:
        return replaced
    # Check everything that can be refused before changing anything, then commit.
    moves = [_plan_move(old, new, fallback) for old, new in replaced.items()]
    for old, new in replaced.items():
        _check_backward_hooks(old, new)
    for (old, new), move in zip(replaced.items(), moves, strict=True):
        _adopt(old, new, move)
    for parent, name, new in installs:
        parent._modules[name] = new

    if opts:
        model_params = {id(p) for p in model.parameters()}
        pairs = [(list(old.parameters()), list(new.parameters())) for old, new in replaced.items()]
        removed = {id(p) for old_params, _ in pairs for p in old_params} - model_params
        for opt in opts:
            rebuild_param_groups(opt, pairs, removed)
    return replaced


def count_module_instances(
    model: nn.Module, module_class: type[nn.Module] | tuple[type[nn.Module], ...]
) -> int:
    """Count the distinct modules in ``model`` (itself included) that are instances of ``module_class``.

    A module shared by several parents counts once.

    Example:
        >>> from torch import nn
        >>> relu = nn.ReLU()
        >>> count_module_instances(nn.Sequential(relu, nn.Linear(2, 2), relu), nn.ReLU)
        1
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    classes = module_class if isinstance(module_class, tuple) else (module_class,)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(
                f"module_class must be an nn.Module subclass or a tuple of them, got {cls!r}"
            )
    return sum(1 for m in model.modules() if isinstance(m, classes))


def _check_policies(
    policies: Mapping[type[nn.Module], ReplacementFunction],
) -> list[tuple[type[nn.Module], ReplacementFunction]]:
    if not isinstance(policies, Mapping):
        raise TypeError(
            f"policies must be a mapping of nn.Module subclass -> replacement function, "
            f"got {type(policies).__name__}"
        )
    items = list(policies.items())
    for cls, fn in items:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(f"policies keys must be nn.Module subclasses, got {cls!r}")
        if not callable(fn):
            raise TypeError(
                f"policies[{cls.__name__}] must be callable as fn(module, index), "
                f"got {type(fn).__name__}"
            )
    return items


def _first_replacement(
    module: nn.Module,
    policy_items: list[tuple[type[nn.Module], ReplacementFunction]],
    indices: MutableMapping[type[nn.Module], int],
    exact_type: bool,
) -> nn.Module | None:
    for cls, fn in policy_items:
        if type(module) is not cls if exact_type else not isinstance(module, cls):
            continue
        index = indices.get(cls, 0)
        indices[cls] = index + 1
        new = fn(module, index)
        if new is None or new is module:
            continue
        if not isinstance(new, nn.Module):
            raise TypeError(
                f"the policy for {cls.__name__} returned {type(new).__name__} for a "
                f"{type(module).__name__}; a replacement function must return an nn.Module or None"
            )
        return new
    return None


class _LazyReference:
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


_Move = tuple[torch.device, "torch.dtype | None"] | None


def _plan_move(old: nn.Module, new: nn.Module, fallback: _LazyReference) -> _Move:
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


def _check_backward_hooks(old: nn.Module, new: nn.Module) -> None:
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


def _adopt(old: nn.Module, new: nn.Module, move: _Move) -> None:
    """Give ``new`` the place of ``old``: device, floating dtype, train/eval mode and hooks."""
    if move is not None:
        device, dtype = move

        def convert(t: torch.Tensor) -> torch.Tensor:
            # floating tensors take the dtype; integer, bool and complex tensors keep theirs
            # (Module.to(dtype) would cast complex tensors to real, dropping imaginary parts)
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        new._apply(convert)
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
