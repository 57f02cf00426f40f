"""What the engine knows about wrapper modules: DDP, FSDP, ``torch.compile``, TorchScript.

The one list of the wrapper types of torch (:data:`_WRAPPERS`), read by
:func:`check_unwrapped` (surgery refuses a wrapped model and says how to apply it to the bare
one) and by :func:`unwrap_model` (code that only reads or updates a model's tensors, such as
``functional.compute_ema``, looks through the wrappers that hold the model as a submodule).
A class counts as a wrapper when it, or a base class, is defined in ``torch`` under one of the
names listed, so subclasses of ``DistributedDataParallel`` count too.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

__all__ = ["WRAPPER_PREFIXES", "check_unwrapped", "unwrap_model"]


class _Wrapper(NamedTuple):
    inner: str | None
    """The attribute holding the wrapped model, for wrappers that hold it as it was."""
    advice: str
    """Completes "model surgery cannot operate on ...": what the wrapper is and what to do."""


_WRAPPERS = {
    "DistributedDataParallel": _Wrapper(
        "module",
        "a DistributedDataParallel-wrapped model; apply the transform to the bare module "
        "(ddp_model.module) before wrapping, then wrap it in DistributedDataParallel again",
    ),
    # FSDP1 manages the parameters of the module it wraps (flattened): no inner model to use.
    "FullyShardedDataParallel": _Wrapper(
        None,
        "a FullyShardedDataParallel-wrapped model; apply the transform to the unwrapped model "
        "first, then wrap it with FSDP",
    ),
    # FSDP2 (fully_shard) shards the module in place: it is the model, not a wrapper of it.
    "FSDPModule": _Wrapper(
        None,
        "a model sharded with fully_shard (FSDP2); apply the transform to the unsharded model "
        "first, then call fully_shard",
    ),
    "OptimizedModule": _Wrapper(
        "_orig_mod",
        "a torch.compile-wrapped model; apply the transform to the original module "
        "(compiled._orig_mod) before calling torch.compile, then compile it again",
    ),
}


WRAPPER_PREFIXES: tuple[str, ...] = tuple(
    f"{w.inner}." for w in _WRAPPERS.values() if w.inner is not None
)
"""The state-dict key prefixes added by the wrappers :func:`unwrap_model` looks through
(``"module."`` for DDP, ``"_orig_mod."`` for ``torch.compile``), in the order of their
table; for reading a checkpoint saved from a wrapped model into the bare one."""


def check_unwrapped(model: nn.Module) -> None:
    """Raise ``TypeError`` when ``model`` (or a submodule) is wrapped by DDP, FSDP or torch.compile."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            "model surgery cannot operate on a TorchScript module (torch.jit.script or "
            "torch.jit.trace); apply the transform to the Python module before scripting"
        )
    for module in model.modules():
        wrapper = _wrapper_kind(type(module))
        if wrapper is not None:
            raise TypeError(f"model surgery cannot operate on {_WRAPPERS[wrapper].advice}")
        if getattr(module, "_compiled_call_impl", None) is not None:
            raise TypeError(
                "model surgery cannot operate on a module compiled in place with "
                "module.compile(); apply the transform before compiling"
            )


def unwrap_model(module: nn.Module) -> nn.Module:
    """The model inside ``DistributedDataParallel`` and ``torch.compile`` wrappers.

    Unwraps repeatedly, so ``torch.compile(DistributedDataParallel(model))`` gives ``model``.
    Any other module is returned as it is, including a module sharded with ``fully_shard``
    (FSDP2 shards in place: that module is the model), a module compiled in place with
    ``module.compile()``, and a ``FullyShardedDataParallel`` (FSDP1) wrapper, which manages the
    parameters of the module it wraps. Use it where code reads or updates a model's tensors by
    their names in the model (the wrappers add ``module.`` / ``_orig_mod.`` to every name);
    model surgery itself refuses wrapped models (:func:`check_unwrapped`).

    Args:
        module: a model, wrapped or not.

    Returns:
        The innermost module that the wrappers hold (``module`` itself when it is no wrapper).

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from surgery import unwrap_model
        >>> model = nn.Linear(2, 2)
        >>> compiled = torch.compile(model)  # an OptimizedModule; nothing compiles until called
        >>> unwrap_model(compiled) is model, unwrap_model(model) is model
        (True, True)
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    while True:
        kind = _wrapper_kind(type(module))
        attribute = None if kind is None else _WRAPPERS[kind].inner
        inner = None if attribute is None else getattr(module, attribute, None)
        if not isinstance(inner, nn.Module):
            return module
        module = inner


def _wrapper_kind(cls: type) -> str | None:
    """The name in :data:`_WRAPPERS` of the torch wrapper ``cls`` is (or derives from), if any.

    Not cached: a walk of a few base classes costs about as much as a cache lookup would. (A
    loop, not ``next(generator, None)``, which dynamo of torch 2.6 cannot trace: ``compute_ema``
    runs this under ``torch.compile``.)
    """
    for base in cls.__mro__:
        if base.__name__ in _WRAPPERS and base.__module__.startswith("torch."):
            return base.__name__
    return None
