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

from collections.abc import Callable, Iterator, Mapping, MutableMapping

import torch
from torch import nn

from surgery._types import OptimizerArg, ReplacementFunction, as_optimizer_list
from surgery.handover import LazyReference, adopt, check_backward_hooks, plan_move
from surgery.optim import rebuild_param_groups
from surgery.wrappers import check_unwrapped

__all__ = ["count_module_instances", "replace_module_classes", "replace_modules"]


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
            Every parameter that leaves the model during the call -- those of the replaced
            modules, and any a policy removed as a side effect -- leaves them with its state.
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
    counters = indices

    def choose(module: nn.Module) -> nn.Module | None:
        return _first_replacement(module, policy_items, counters, exact_type)

    return _replace(model, choose, opts, recurse=recurse_on_replacements, dry_run=dry_run)


def replace_modules(
    model: nn.Module,
    replacements: Mapping[nn.Module, nn.Module],
    *,
    optimizers: OptimizerArg = None,
    dry_run: bool = False,
) -> dict[nn.Module, nn.Module]:
    """Replace given submodule instances of ``model`` by given modules, in place.

    The instance-keyed counterpart of :func:`replace_module_classes`, with the same guarantees:
    one walk over the model; a module shared by several parents is replaced in every parent;
    each replacement is moved to the replaced module's device and floating dtype, takes its
    train/eval mode and receives its forward, forward-pre and backward hooks; ``optimizers``
    are rebuilt in one pass -- parameter objects that survive keep their state and place, new
    parameters join the param group of the parameters they replace, and parameters that leave
    the model leave the optimizers together with their state. Nothing changes when a
    replacement is refused.

    Keys are looked up inside replacements too, so a key that a replacement reuses
    (``{block: NewBlock(block.norm), block.norm: other}``) is replaced there as well. A key
    that sits only inside another key's module, and is not reused by that module's
    replacement, leaves the model with it and does not appear in the result. A key mapped to
    itself is left as it is.

    Args:
        model: the model to change in place. Must not be wrapped in DDP, FSDP or
            ``torch.compile``; apply surgery first, then wrap.
        replacements: ``{old_module: new_module}``; every key a submodule of ``model`` (not
            ``model`` itself), no module both a key and the value of another key.
        optimizers: optimizers to keep consistent (see :func:`update_params_in_optimizer`).
        dry_run: compute and return the mapping without changing the model or the optimizers.

    Returns:
        ``{old_module: new_module}`` for every replacement made, in traversal order.

    Raises:
        TypeError: a wrapped model (DDP, FSDP, ``torch.compile``, TorchScript), a
            ``replacements`` that is not a mapping, or a key or value that is not an
            ``nn.Module``.
        ValueError: a key that is not a submodule of ``model``, ``model`` itself as a key (change
            it in place instead), a module that is both a key and another key's value, a
            replacement holding meta-device tensors for a module that has data, or backward
            hooks of both kinds (full and legacy) on one module.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> mapping = replace_modules(model, {model[1]: nn.GELU()})
        >>> type(model[1]).__name__, len(mapping)
        ('GELU', 1)
    """
    check_unwrapped(model)
    targets = _check_replacements(model, replacements)
    opts = as_optimizer_list(optimizers)
    return _replace(model, targets.get, opts, recurse=True, dry_run=dry_run)


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


def _check_replacements(
    model: nn.Module, replacements: Mapping[nn.Module, nn.Module]
) -> dict[nn.Module, nn.Module]:
    """``replacements`` checked, without the keys mapped to themselves."""
    items = _replacement_items(replacements)
    present = set(model.modules())
    for old, new in items:
        if old is model:
            raise ValueError(
                f"replacements cannot replace the model itself ({_describe(model)}); change "
                "it in place, or replace its submodules"
            )
        if old not in present:
            raise ValueError(
                f"replacements key {_describe(old)} is not a submodule of model; pass modules "
                "of this model (model.named_modules() lists them)"
            )
        if new is model:
            raise ValueError(
                f"replacements cannot install the model inside itself (for {_describe(old)})"
            )
    targets = {old: new for old, new in items if new is not old}
    for new in targets.values():
        if new in targets:
            raise ValueError(
                f"{_describe(new)} is both a key of replacements and the replacement of "
                "another key; replace in two calls"
            )
    return targets


def _replacement_items(
    replacements: Mapping[nn.Module, nn.Module],
) -> list[tuple[nn.Module, nn.Module]]:
    if not isinstance(replacements, Mapping):
        raise TypeError(
            "replacements must be a mapping of nn.Module -> nn.Module, "
            f"got {type(replacements).__name__}"
        )
    items = list(replacements.items())
    for old, new in items:
        if not isinstance(old, nn.Module):
            raise TypeError(f"replacements keys must be nn.Modules, got {type(old).__name__}")
        if not isinstance(new, nn.Module):
            raise TypeError(
                f"replacements[{_describe(old)}] must be an nn.Module, got "
                f"{type(new).__name__}; leave out a module that should stay"
            )
    return items


def _describe(module: nn.Module) -> str:
    """A one-line name for a module in messages: ``Linear(in_features=4, ...)``."""
    return f"{type(module).__qualname__}({module.extra_repr()})"


def _replace(
    model: nn.Module,
    choose: Callable[[nn.Module], nn.Module | None],
    opts: list[torch.optim.Optimizer],
    *,
    recurse: bool,
    dry_run: bool,
) -> dict[nn.Module, nn.Module]:
    """The engine: decide every module with ``choose`` in one walk, then install atomically."""
    before = _parameters_by_id(model) if opts and not dry_run else {}
    walk = _Walk(model, choose, recurse=recurse).run()
    if dry_run:
        return walk.replaced
    if walk.replaced:
        _install(model, walk)
    if opts:
        _sync_optimizers(model, walk.replaced, before, opts)
    return walk.replaced


class _Walk:
    """One iterative pre-order walk that asks ``choose`` once per distinct module.

    It only records: ``replaced`` (``{old: new}`` in traversal order) and ``installs`` (every
    ``(parent, name, new)`` slot to fill), so a ``choose`` that raises changes nothing. A module
    met again (shared, or an original inside its own replacement) gets the first decision; a
    replacement is never itself offered to ``choose``, and is walked into only with
    ``recurse``.
    """

    def __init__(
        self, model: nn.Module, choose: Callable[[nn.Module], nn.Module | None], *, recurse: bool
    ) -> None:
        self.replaced: dict[nn.Module, nn.Module] = {}
        self.installs: list[tuple[nn.Module, str, nn.Module]] = []
        self._choose = choose
        self._recurse = recurse
        self._decision: dict[nn.Module, nn.Module | None] = {model: None}
        self._stack: list[tuple[nn.Module, Iterator[tuple[str, nn.Module | None]]]] = []
        self._on_path: set[nn.Module] = set()
        self._enter(model)

    def run(self) -> _Walk:
        while self._stack:
            parent, children = self._stack[-1]
            for name, child in children:  # the next child, if any
                if child is not None:
                    self._visit(parent, name, child)
                break
            else:
                self._stack.pop()
                self._on_path.discard(parent)
        return self

    def _enter(self, module: nn.Module) -> None:
        if module._modules:
            self._stack.append((module, iter(list(module._modules.items()))))
            self._on_path.add(module)

    def _visit(self, parent: nn.Module, name: str, child: nn.Module) -> None:
        if child in self._decision:
            new = self._decision[child]
            if new is not None and new not in self._on_path:  # no module inside itself
                self.installs.append((parent, name, new))
            return
        new = self._choose(child)
        self._decision[child] = new
        if new is None:
            self._enter(child)
            return
        self.replaced[child] = new
        self._decision.setdefault(new, None)
        self.installs.append((parent, name, new))
        if self._recurse:
            self._enter(new)


def _install(model: nn.Module, walk: _Walk) -> None:
    """Check everything that can be refused, then adopt and install every replacement."""
    fallback = LazyReference(model)
    pairs = list(walk.replaced.items())
    moves = [plan_move(old, new, fallback) for old, new in pairs]
    for old, new in pairs:
        check_backward_hooks(old, new)
    for (old, new), move in zip(pairs, moves, strict=True):
        adopt(old, new, move)
    for parent, name, new in walk.installs:
        parent._modules[name] = new


def _sync_optimizers(
    model: nn.Module,
    replaced: Mapping[nn.Module, nn.Module],
    before: Mapping[int, torch.Tensor],
    opts: list[torch.optim.Optimizer],
) -> None:
    """Bring every optimizer in line with the model, one linear pass each.

    Each replaced module's parameters are replaced by its replacement's; every parameter that
    left the model during the call leaves the optimizers with its state -- also one that a
    policy removed as a side effect, outside the modules it replaced.
    """
    # Parameters are compared by id(), as rebuild_param_groups keys them (Tensor.__hash__ is a
    # Python-level call: hashing tensors costs several times more on large models).
    now = {id(p) for p in model.parameters()}
    pairs: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = [
        (list(old.parameters()), list(new.parameters())) for old, new in replaced.items()
    ]
    paired = {id(p) for old_params, _ in pairs for p in old_params}
    removed = paired - now
    unpaired = [p for i, p in before.items() if i not in now and i not in paired]
    if unpaired:
        pairs.append((unpaired, []))
        removed.update(id(p) for p in unpaired)
    if not pairs:
        return
    for opt in opts:
        rebuild_param_groups(opt, pairs, removed)


def _parameters_by_id(model: nn.Module) -> dict[int, torch.Tensor]:
    """Every parameter of ``model`` by ``id()`` (what ``model.parameters()`` yields, faster)."""
    return {
        id(p): p for module in model.modules() for p in module._parameters.values() if p is not None
    }
