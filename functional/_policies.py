"""Helpers of the model transforms (the ``apply_*`` functions) and their replacement policies.

A layer cloned as the subclass that replaces it (:func:`clone_module_as`), a layer width given
as a size or a fraction (:func:`latent_size`), the policies a transform's switches turn on run
in one surgery pass (:func:`replace_chosen`), the rule for the parameters a transform creates
(:func:`settle_new_parameters`), and the :class:`surgery.NoEffectWarning` of a transform that
matched nothing (:func:`warn_no_effect`) or left something undone (:class:`NoEffectReport`). :mod:`surgery` is used through its public names only.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from surgery import (
    NoEffectWarning,
    OptimizerArg,
    ReplacementFunction,
    replace_module_classes,
    update_params_in_optimizer,
)

__all__ = [
    "ModelT",
    "NoEffectReport",
    "clone_module_as",
    "latent_size",
    "replace_chosen",
    "settle_new_parameters",
    "warn_no_effect",
]

# What a model transform returns: the model it was given, so that for a type checker
# ``model = F.apply_blurpool(model)`` keeps ``model``'s own class (a ``ResNet`` stays one).
ModelT = TypeVar("ModelT", bound=nn.Module)

# The class clone_module_as builds, so that callers get that class back (not nn.Module).
_ModuleT = TypeVar("_ModuleT", bound=nn.Module)


def warn_no_effect(transform: str, looked_for: str, *, stacklevel: int = 3) -> None:
    """Emit :class:`surgery.NoEffectWarning` for a transform that matched nothing."""
    warnings.warn(
        f"{transform} changed nothing: the model has no {looked_for}",
        NoEffectWarning,
        stacklevel=stacklevel,
    )


@dataclass(frozen=True)
class NoEffectReport:
    """How a model transform words the :class:`surgery.NoEffectWarning` it owes; declared once
    per transform, :meth:`warn` is called once per run with what the run found.

    Attributes:
        transform: the transform's name, which starts every message.
        looked_for: what the transform converts, for :func:`warn_no_effect` ("... the model has
            no {looked_for}"); a callable is called only when that warning is due.
        skipped: the message for modules it recognised but left as they were, after the
            transform's name; ``{names}`` stands for their sorted, distinct names.
        separator: joins the skipped names.

    Example:
        >>> report = NoEffectReport(
        ...     "apply_x", "nn.Linear", skipped="left these layers unchanged: {names}"
        ... )
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     report.warn(changed=False, skipped=["B", "A", "B"])
        >>> [str(w.message) for w in caught]
        ['apply_x left these layers unchanged: A, B']
    """

    transform: str
    looked_for: str | Callable[[], str]
    skipped: str
    separator: str = ", "

    def warn(
        self,
        *,
        changed: bool,
        skipped: Iterable[str] = (),
        already: str | None = None,
        stacklevel: int = 3,
    ) -> None:
        """Warn about one run, in a fixed order.

        1. Modules the run ``skipped`` (recognised, left alone), whether or not it changed
           anything else.
        2. When nothing ``changed``: ``"{transform} changed nothing: {already}"`` when the run
           found modules it had converted before (``already``, else ``None``); otherwise, if
           nothing was skipped either, :func:`warn_no_effect` with ``looked_for``.

        ``stacklevel`` counts as for ``warnings.warn`` from the caller of this method: the
        default 3 points at the code that called the transform calling it.
        """
        names = sorted(set(skipped))
        if names:
            message = self.skipped.format(names=self.separator.join(names))
            warnings.warn(f"{self.transform} {message}", NoEffectWarning, stacklevel=stacklevel)
        if changed:
            return
        if already is not None:
            warnings.warn(
                f"{self.transform} changed nothing: {already}",
                NoEffectWarning,
                stacklevel=stacklevel,
            )
        elif not names:
            looked_for = self.looked_for if isinstance(self.looked_for, str) else self.looked_for()
            warn_no_effect(self.transform, looked_for, stacklevel=stacklevel + 1)


def clone_module_as(module: nn.Module, cls: type[_ModuleT]) -> _ModuleT:
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


def latent_size(value: object, name: str, reference: int) -> int:
    """A layer width given as an int ``>= 1``, or as a fraction in (0, 1) of ``reference``
    (rounded down, at least 1)."""
    rule = "an int >= 1 or a float in (0, 1)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {rule}, got {type(value).__name__}")
    number = float(value)  # a Real as the float it stands for (exact for Python floats)
    if 0 < number < 1:
        return max(1, int(number * reference))
    if number >= 1 and number.is_integer():
        return int(value) if isinstance(value, numbers.Integral) else int(number)
    raise ValueError(f"{name} must be {rule}, got {value}")


def replace_chosen(
    model: nn.Module,
    transform: str,
    choices: Sequence[tuple[bool, type[nn.Module], ReplacementFunction, str]],
    optimizers: OptimizerArg,
    *,
    none_chosen: str,
    qualifier: str = "",
    skipped: Sequence[str] = (),
) -> dict[nn.Module, nn.Module]:
    """Run the policies a transform's switches turned on; warn when nothing was replaced.

    ``choices`` holds ``(switch, layer class, policy, what it looks for)``; the policies of the
    switched-on choices run on instances of their classes, subclasses included (a policy
    decides what it takes, see :func:`functional._composition.layer_kind`). ``skipped`` is a
    list the policies fill during the run with the layers they recognised but left alone (a
    subclass with a forward of its own): when nothing is replaced, the
    :class:`surgery.NoEffectWarning` names them; when nothing was skipped either, it names what the switched-on choices
    look for, joined by "or" and followed by ``qualifier``, or says ``none_chosen`` when every
    switch is off. Returns ``replace_module_classes``'s mapping of old to new modules.
    """
    policies = {cls: policy for on, cls, policy, _ in choices if on}
    replaced = replace_module_classes(model, policies, optimizers=optimizers)
    if skipped and not replaced:
        warnings.warn(
            f"{transform} changed nothing: it left these layers unchanged, subclasses with a "
            f"forward of their own that no transform of this library made: "
            f"{', '.join(sorted(set(skipped)))}",
            NoEffectWarning,
            stacklevel=4,
        )
    elif not replaced:
        looked_for = [what for on, _, _, what in choices if on]
        warn_no_effect(
            transform,
            " or ".join(looked_for) + qualifier if looked_for else none_chosen,
            stacklevel=4,
        )
    return replaced


def settle_new_parameters(
    names: dict[int, str],
    replaced: dict[nn.Module, nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    transform: str,
    *,
    new_function: bool,
) -> None:
    """Apply the rule for parameters a transform created (see each ``apply_*``'s docstring).

    ``replaced`` maps each replaced module to its replacement; ``names`` maps ``id(module)`` to
    its name in the model (taken before surgery). A replacement's parameters that the replaced
    module did not hold are *new*. Each new parameter inherits the frozen state of the replaced
    module's ``weight``: the new parameters of a frozen layer get ``requires_grad=False`` and
    leave every optimizer (the surgery engine added them to the group of a parameter the
    optimizer held, such as a trainable bias). Then a ``UserWarning`` names

    - with ``new_function`` (the new parameters start at a random value, so the layer computes
      something new): the frozen layers, whose new parameters stay at that random value;
    - when ``optimizers`` were passed: the trainable layers whose new parameters joined none of
      them (the optimizers held none of the layer's parameters), so nothing would train them.

    Both warnings say how to train the new parameters instead.
    """
    frozen: list[str] = []
    orphans: list[str] = []
    held = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
    for old, new in replaced.items():
        old_ids = {id(p) for p in old.parameters()}
        added = [p for p in new.parameters() if id(p) not in old_ids]
        if not added:
            continue
        weight = getattr(old, "weight", None)
        trainable = weight.requires_grad if isinstance(weight, torch.Tensor) else True
        name = names.get(id(old), type(old).__name__)
        if not trainable:
            for p in added:
                p.requires_grad_(False)
            if held.intersection(id(p) for p in added):
                update_params_in_optimizer(added, [], list(optimizers))
            frozen.append(name)
        elif optimizers and not held.intersection(id(p) for p in added):
            orphans.append(name)
    if frozen and new_function:
        warnings.warn(
            f"{transform}: these layers are frozen (weight.requires_grad=False), so their new "
            f"parameters are frozen too and keep their random initial values: "
            f"{', '.join(frozen)}; to train them, call requires_grad_(True) on the new "
            "parameters and add them to an optimizer (opt.add_param_group({'params': ...}))",
            UserWarning,
            stacklevel=3,
        )
    if orphans:
        warnings.warn(
            f"{transform}: no optimizer passed holds these layers, so their new trainable "
            f"parameters joined none and would never be updated: {', '.join(orphans)}; add "
            "them to an optimizer (opt.add_param_group) or pass the optimizer that trains "
            "these layers",
            UserWarning,
            stacklevel=3,
        )
