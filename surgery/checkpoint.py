"""Load checkpoints saved before surgery into the model after it.

Most replacements keep the state_dict keys of the weights they preserve, so an old checkpoint
loads as it is. Where a replacement must store its weights differently (a factorized layer, a
gated feed-forward block), it implements::

    def surgery_remap_state_dict(self, state_dict: dict[str, Tensor], prefix: str) -> None:
        '''Rewrite, in place, the pre-surgery entries under ``prefix`` into this module's layout.'''

and :func:`remap_state_dict` calls it for every such module of the model. The hook must leave a
state_dict that already has the new layout unchanged, so remapping is idempotent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

import torch
from torch import nn

__all__ = ["fill_missing_entries", "remap_state_dict"]

HOOK_NAME = "surgery_remap_state_dict"


def remap_state_dict(
    state_dict: Mapping[str, torch.Tensor], model: nn.Module
) -> dict[str, torch.Tensor]:
    """Translate a checkpoint saved before surgery into the layout of the transformed ``model``.

    Returns a new ordered dict (the input is not modified) ready for ``model.load_state_dict``.
    Entries whose keys did not change are passed through; replacements that store their weights
    under new keys translate them through their ``surgery_remap_state_dict`` hook, and tensors that
    surgery added (which the old checkpoint cannot have) are filled from the model's current
    values. A checkpoint that already has the new layout comes back unchanged.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> checkpoint = model.state_dict()
        >>> sorted(remap_state_dict(checkpoint, model))
        ['0.bias', '0.weight']
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping of str -> Tensor, got {type(state_dict).__name__}"
        )
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    remapped: OrderedDict[str, torch.Tensor] = OrderedDict(state_dict)
    metadata = getattr(state_dict, "_metadata", None)
    for name, module in model.named_modules():
        hook = getattr(module, HOOK_NAME, None)
        if callable(hook):
            hook(remapped, name + "." if name else "")
    if metadata is not None:
        remapped._metadata = metadata  # type: ignore[attr-defined]
    return remapped


def fill_missing_entries(
    state_dict: dict[str, torch.Tensor], module: nn.Module, prefix: str, names: Iterable[str]
) -> None:
    """Copy ``module``'s current value of each local key in ``names`` that ``state_dict`` lacks.

    A helper for ``surgery_remap_state_dict`` hooks of replacements that add tensors.
    """
    current = None
    for local in names:
        key = prefix + local
        if key not in state_dict:
            if current is None:
                current = module.state_dict()
            state_dict[key] = current[local]
