"""The extension point of stochastic depth: :data:`STOCHASTIC_BLOCKS` (which block class becomes
which stochastic class), with the built-in torchvision entries, :func:`register_stochastic_block`
and :func:`unregister_stochastic_block`."""

from __future__ import annotations

from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from functional._registry import Registry
from functional.stochastic_depth.layers import (
    StochasticBasicBlock,
    StochasticBlock,
    StochasticBottleneck,
)
from functional.stochastic_depth.timm_blocks import timm_stochastic_blocks

__all__ = ["STOCHASTIC_BLOCKS", "register_stochastic_block", "unregister_stochastic_block"]


def _check_block_entry(name: str, entry: tuple[type[nn.Module], type[StochasticBlock]]) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    target, stochastic = entry
    if not (isinstance(target, type) and issubclass(target, nn.Module)):
        raise TypeError(f"target must be an nn.Module subclass, got {target!r}")
    if not (
        isinstance(stochastic, type)
        and issubclass(stochastic, StochasticBlock)
        and issubclass(stochastic, target)
    ):
        raise TypeError(
            f"stochastic must subclass both StochasticBlock and {target.__name__}, got {stochastic!r}"
        )


STOCHASTIC_BLOCKS: Registry[str, tuple[type[nn.Module], type[StochasticBlock]]] = Registry(
    "stochastic block", check=_check_block_entry
)
"""``target_layer_name -> (block class, stochastic class)``, read like a dict; extend it with
:func:`register_stochastic_block`, shrink it with :func:`unregister_stochastic_block`. The
torchvision entries are always there; the timm ones (``'TimmResNetBasicBlock'``,
``'TimmViTBlock'``, ...) from the first read after ``timm`` has been imported."""
STOCHASTIC_BLOCKS.register("ResNetBottleneck", (Bottleneck, StochasticBottleneck))
STOCHASTIC_BLOCKS.register("ResNetBasicBlock", (BasicBlock, StochasticBasicBlock))
# timm's blocks ('TimmResNetBasicBlock', 'TimmViTBlock', ...): listed once timm is imported.
STOCHASTIC_BLOCKS.register_lazy_group("timm", timm_stochastic_blocks)


def register_stochastic_block(
    name: str, target: type[nn.Module], stochastic: type[StochasticBlock]
) -> None:
    """Make ``apply_stochastic_depth(model, method, name)`` convert ``target`` blocks.

    ``stochastic`` must subclass both :class:`StochasticBlock` and ``target``; the conversion
    shares the block's submodules, parameters and attributes (no copy, same state_dict keys)
    and sets ``drop_rate``/``stochastic_method``. Its ``forward`` scales the residual branch
    with ``self.drop_branch(branch)`` or adds it with ``self.add_branch(shortcut, branch)``;
    passing the branch as a zero-argument callable lets a dropped block skip computing it.
    Registering a name again replaces its entry; :func:`unregister_stochastic_block` removes it.

    Example:
        >>> import functional as F
        >>> class Residual(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.body = nn.Linear(4, 4)
        ...     def forward(self, x):
        ...         return x + self.body(x)
        >>> class StochasticResidual(StochasticBlock, Residual):
        ...     def forward(self, x):
        ...         return self.add_branch(x, lambda: self.body(x))
        >>> register_stochastic_block("Residual", Residual, StochasticResidual)
        >>> model = F.apply_stochastic_depth(nn.Sequential(Residual(), Residual()), "block", "Residual")
        >>> [round(m.drop_rate, 2) for m in model]
        [0.1, 0.2]
        >>> unregister_stochastic_block("Residual")
    """
    STOCHASTIC_BLOCKS.register(name, (target, stochastic), replace=True)


def unregister_stochastic_block(name: str) -> None:
    """Remove the entry ``name`` of :data:`STOCHASTIC_BLOCKS` (built-in ones included).

    Raises:
        ValueError: nothing is registered under ``name`` (the error is also a ``KeyError``).

    Example:
        >>> unregister_stochastic_block("NoSuchBlock")
        Traceback (most recent call last):
        ...
        functional._registry.NotRegisteredError: no stochastic block is registered for 'NoSuchBlock'
    """
    STOCHASTIC_BLOCKS.unregister(name)
