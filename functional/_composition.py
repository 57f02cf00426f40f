"""How the model transforms see through the layers other transforms made, so they compose in
any order (STYLE.md, "Surgery policies").

A policy asks what a layer *is*, not which exact class it has:

- :func:`layer_kind` -- the plain layer a module is (``nn.Conv2d`` for a blurred, squeeze-excited
  or weight-standardized convolution, or any mix of these), or ``None`` for a subclass with a
  forward of its own that no transform of this library made (timm's ``Conv2dSame``, ...), which
  the transforms leave alone and name in their warnings.
- *Decorations* are the replacement classes that keep a layer's computation and add to it
  (:class:`BlurConv2d` blurs around the convolution, :class:`SqueezeExciteConv2d` gates its
  output). Each declares ``_decorates`` (the plain class), ``_decoration_rank`` (its place: a
  higher rank wraps a lower one) and ``_decoration_side`` (``"input"``: it belongs to the factor
  that holds the kernel and the stride; ``"output"``: to the factor that produces the output),
  and implements ``_carry_onto(source, conv)`` (put the decoration of ``source``, with its
  state, on another convolution). :func:`decorate` adds one to a module that may already carry
  others, in their canonical order, whichever order the transforms ran in: blurpool then
  squeeze-excite and squeeze-excite then blurpool build the same layer. Weight
  standardization's parametrization (``torch.nn.utils.parametrize``) is carried over.
- *Composites* are layers a transform split in two (:class:`FactorizedConv2d`: a kernel factor
  then a 1x1 factor); they declare ``_see_through = (first, last)``, the attribute names of
  their two parts, and :func:`composite_parts` returns them. A transform that acts on a whole
  layer's output (squeeze-excite) acts on the composite's last part, never on a part alone.
"""

from __future__ import annotations

from typing import Any, TypeVar

from torch import nn
from torch.nn.utils import parametrize

from functional._policies import clone_module_as

__all__ = [
    "carry_decorations",
    "composite_parts",
    "decorate",
    "decorations",
    "inside_composites",
    "layer_kind",
    "refuse_composite",
    "refuse_parametrized",
    "with_last_part",
]

_ModuleT = TypeVar("_ModuleT", bound=nn.Module)


def _unparametrized_class(module: nn.Module) -> type[nn.Module]:
    """The class ``module`` had before ``torch.nn.utils.parametrize`` gave it its own subclass."""
    cls = type(module)
    if parametrize.is_parametrized(module):
        return cls.__bases__[0]
    return cls


def decorations(module: nn.Module) -> tuple[type[nn.Module], ...]:
    """The decoration classes ``module`` carries, outermost first (empty for a plain layer)."""
    cls = _unparametrized_class(module)
    combined = cls.__dict__.get("_decorations")
    if combined is not None:
        return tuple(combined)
    return (cls,) if "_decorates" in cls.__dict__ else ()


def layer_kind(module: nn.Module, plain: type[nn.Module]) -> bool:
    """Whether ``module`` is a ``plain`` layer (exact type), or one the transforms made from one:
    decorated, combined or weight-standardized. A subclass with its own forward is not."""
    cls = _unparametrized_class(module)
    return cls is plain or cls.__dict__.get("_decorates") is plain


def decorate(module: nn.Module, cls: type[_ModuleT]) -> _ModuleT:
    """A clone of ``module`` (sharing its parameters, buffers and submodules) of the class that
    adds decoration ``cls`` to those it already carries, in canonical order; its
    parametrizations (weight standardization) stay. The caller sets ``cls``'s own state."""
    parts: set[type[nn.Module]] = {*decorations(module), cls}
    ordered = tuple(
        sorted(parts, key=lambda c: c.__dict__.get("_decoration_rank", 0), reverse=True)
    )
    target = ordered[0] if len(ordered) == 1 else _combined_class(ordered)
    clone: Any = clone_module_as(module, target)
    if parametrize.is_parametrized(module):
        # torch gives each parametrized module a class of its own holding a property per
        # parametrized tensor; rebuild it on the new class, as register_parametrization does.
        parametrize._inject_new_class(clone)
        for name in clone.parametrizations:
            parametrize._inject_property(clone, name)
    return clone


def _combined_class(parts: tuple[type[nn.Module], ...]) -> type[nn.Module]:
    """A class carrying several decorations, ``parts`` outermost first (a new class per layer,
    as ``torch.nn.utils.parametrize`` makes; pickled through :func:`_new_combined`)."""
    plain = parts[0].__dict__["_decorates"]
    name = "".join(p.__name__.removesuffix(plain.__name__) for p in parts) + plain.__name__
    namespace = {
        "_decorates": plain,
        "_decorations": parts,
        "__module__": __name__,
        "__qualname__": name,
        "__reduce_ex__": _reduce_combined,
    }
    return type(name, parts, namespace)


def _new_combined(parts: tuple[type[nn.Module], ...]) -> nn.Module:
    cls = _combined_class(parts)
    return cls.__new__(cls)


def _reduce_combined(self: nn.Module, protocol: int) -> tuple[Any, ...]:
    return (_new_combined, (decorations(self),), self.__getstate__())


def carry_decorations(
    source: nn.Module, first: _ModuleT, last: _ModuleT
) -> tuple[_ModuleT, _ModuleT]:
    """Put the decorations of ``source`` (with their state) on the two parts that replace it:
    the input-side ones (blur) on ``first``, the output-side ones (squeeze-excite) on ``last``."""
    for cls in reversed(decorations(source)):  # innermost first
        decoration: Any = cls
        if decoration._decoration_side == "input":
            first = decoration._carry_onto(source, first)
        else:
            last = decoration._carry_onto(source, last)
    return first, last


def refuse_parametrized(module: nn.Module, name: str, transform: str, reason: str) -> None:
    """Raise ``ValueError`` for a layer whose weight is parametrized (weight standardization),
    which ``transform`` cannot convert without losing it; ``reason`` says why and which order
    works."""
    if not parametrize.is_parametrized(module):
        return
    lists: Any = getattr(module, "parametrizations")  # noqa: B009 (a Tensor to mypy)
    found = ", ".join(type(p).__name__ for t in lists.values() for p in t)
    raise ValueError(
        f"{transform} cannot convert {name or type(module).__name__}: its weight is parametrized "
        f"({found}, as apply_weight_standardization does) and {reason}"
    )


def refuse_composite(layer: object, where: str, transform: str, reason: str) -> None:
    """Raise ``ValueError`` for a layer another transform split in two (a factorized linear
    layer), which ``transform`` cannot convert; ``reason`` says which order works."""
    if isinstance(layer, nn.Module) and composite_parts(layer) is not None:
        raise ValueError(
            f"{transform} cannot convert {where}: it is a {type(layer).__name__}, split in two "
            f"by apply_factorization; {reason}"
        )


def composite_parts(module: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The first and last parts of a layer a transform split in two, else ``None``."""
    names = getattr(type(module), "_see_through", None)
    if names is None:
        return None
    first, last = names
    return getattr(module, first), getattr(module, last)


def with_last_part(module: _ModuleT, last: nn.Module) -> _ModuleT:
    """A clone of composite ``module`` (sharing everything) whose last part is ``last``."""
    clone = clone_module_as(module, type(module))
    setattr(clone, type(module)._see_through[1], last)  # type: ignore[attr-defined]
    return clone


def inside_composites(model: nn.Module) -> set[int]:
    """``id()`` of every module inside a composite layer of ``model`` (its parts)."""
    found: set[int] = set()
    for module in model.modules():
        if composite_parts(module) is not None:
            found.update(id(m) for m in module.modules() if m is not module)
    return found
