"""Stochastic depth on timm's residual blocks, built in when timm is installed.

timm's blocks already pass their residual branch through a ``drop_path`` module (``Identity``,
``None`` or timm's own ``DropPath``, at the rate the model was built with). Their stochastic
forms keep the block's own ``forward`` and put a :class:`BranchDrop` in place of each
``drop_path``: it applies the block's decision (:meth:`StochasticBlock.drop_branch`), so the
drop schedule, the distribution over blocks, the warm-up, the seeding, the evaluation
behaviour, the compiled path and the saved state are those of the torchvision blocks.

timm is optional: nothing here imports it at module level. The stochastic classes are made
when first needed, once per process (:func:`timm_stochastic_blocks`), after ``timm`` has been
imported; :data:`~functional.stochastic_depth.STOCHASTIC_BLOCKS` lists them from then on.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from torch import nn

from functional._deploy import NotScriptable
from functional.stochastic_depth.layers import _SCRIPT_HINT, StochasticBlock

__all__ = ["BranchDrop", "TimmStochasticBlock", "timm_stochastic_blocks"]

# name in STOCHASTIC_BLOCKS -> (timm module, block class, its drop-path attributes)
_TIMM_BLOCKS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("TimmResNetBasicBlock", "resnet", "BasicBlock", ("drop_path",)),
    ("TimmResNetBottleneck", "resnet", "Bottleneck", ("drop_path",)),
    ("TimmConvNeXtBlock", "convnext", "ConvNeXtBlock", ("drop_path",)),
    ("TimmViTBlock", "vision_transformer", "Block", ("drop_path1", "drop_path2")),
    (
        "TimmDepthwiseSeparableConv",
        "_efficientnet_blocks",
        "DepthwiseSeparableConv",
        ("drop_path",),
    ),
    ("TimmInvertedResidual", "_efficientnet_blocks", "InvertedResidual", ("drop_path",)),
    ("TimmEdgeResidual", "_efficientnet_blocks", "EdgeResidual", ("drop_path",)),
    ("TimmRegNetBottleneck", "regnet", "Bottleneck", ("drop_path",)),
)


class BranchDrop(NotScriptable, nn.Module):
    """Stands in for a timm block's ``drop_path``: the branch times the block's drop factor.

    Outside training it returns the branch itself. A branch dropped by an eager ``'block'``
    decision becomes zeros that autograd does not connect to it, so its backward is skipped
    (its parameters get no gradient, as a skipped torchvision branch's); its forward has run,
    since timm computes the branch before calling ``drop_path``.

    Args:
        block: the stochastic block that owns this module (held as a plain reference, not a
            submodule, so that it adds nothing to ``state_dict()``).
    """

    def __init__(self, block: StochasticBlock) -> None:
        super().__init__()
        object.__setattr__(self, "block", block)  # not a child: that would be a cycle

    block: StochasticBlock
    script_hint = _SCRIPT_HINT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block.drop_branch(x)
        return torch.zeros_like(x) if out is None else out


class TimmStochasticBlock(StochasticBlock):
    """Mixin of the stochastic timm blocks: on conversion, a :class:`BranchDrop` replaces each
    of the block's drop-path modules named in ``drop_path_names`` (timm's own ``forward`` is
    kept)."""

    drop_path_names: ClassVar[tuple[str, ...]] = ()

    def _init_stochastic(self, *args: Any, **kwargs: Any) -> None:
        super()._init_stochastic(*args, **kwargs)
        for name in self.drop_path_names:
            setattr(self, name, BranchDrop(self))


@functools.cache
def timm_stochastic_blocks() -> dict[str, tuple[type[nn.Module], type[StochasticBlock]]]:
    """The built-in timm entries of ``STOCHASTIC_BLOCKS``: name -> (timm block, its stochastic
    form). Imports timm; made once per process, so that each class is one object (pickles name
    it ``functional.stochastic_depth.timm_blocks.Stochastic<name>``). A block class that the
    installed timm lacks is left out."""
    from timm.models import _efficientnet_blocks, convnext, regnet, resnet, vision_transformer

    modules = {
        "resnet": resnet,
        "convnext": convnext,
        "vision_transformer": vision_transformer,
        "_efficientnet_blocks": _efficientnet_blocks,
        "regnet": regnet,
    }
    entries: dict[str, tuple[type[nn.Module], type[StochasticBlock]]] = {}
    for name, module, block, attributes in _TIMM_BLOCKS:
        target = getattr(modules[module], block, None)
        if not (isinstance(target, type) and issubclass(target, nn.Module)):
            continue
        qualname = f"Stochastic{name}"
        namespace = {
            "drop_path_names": attributes,
            "__module__": __name__,
            "__qualname__": qualname,
            "__doc__": f"timm's ``{target.__module__}.{block}`` with stochastic depth on its "
            f"residual branch ({', '.join(attributes)}); see :func:`apply_stochastic_depth`.",
        }
        entries[name] = (target, type(qualname, (TimmStochasticBlock, target), namespace))
    return entries


def __getattr__(name: str) -> type[StochasticBlock]:
    """The stochastic timm classes by name, for unpickling (made on first use)."""
    if name.startswith("StochasticTimm"):
        entry = timm_stochastic_blocks().get(name[len("Stochastic") :])
        if entry is not None:
            return entry[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
