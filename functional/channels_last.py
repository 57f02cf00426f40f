"""Channels-last memory format for convolutional models."""

from __future__ import annotations

import torch

from functional._args import check_module
from functional._policies import ModelT, warn_no_effect

__all__ = ["apply_channels_last"]


def apply_channels_last(model: ModelT) -> ModelT:
    """Store the 4-D parameters and buffers of ``model`` in ``torch.channels_last`` format, in place.

    Convolutions then run on NHWC data, which cuDNN (tensor cores) and oneDNN usually process
    faster; feed the model channels-last inputs (``x.to(memory_format=torch.channels_last)``)
    for the full effect. Values, dtypes, devices and the ``Parameter`` objects themselves are
    unchanged (only the strides change), so optimizers and checkpoints keep working as they are.
    Autocast and ``torch.compile`` see the same layers as before: the dtype rules are autocast's
    own, and a compiled model keeps one graph as long as the inputs keep their memory format
    (a change of input strides is a new graph).

    Args:
        model: the model to change in place.

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no 4-D parameter or buffer that is not
            already channels-last.

    Example:
        >>> conv = apply_channels_last(torch.nn.Conv2d(3, 8, 3))
        >>> conv.weight.is_contiguous(memory_format=torch.channels_last)
        True

    Reference:
        PyTorch tutorial, "Channels Last Memory Format in PyTorch".
    """
    check_module(model)
    to_convert = any(
        t.ndim == 4 and not t.is_contiguous(memory_format=torch.channels_last)
        for t in (*model.parameters(), *model.buffers())
    )
    if not to_convert:
        warn_no_effect(
            "apply_channels_last", "4-D parameters or buffers outside channels-last format"
        )
        return model
    model.to(memory_format=torch.channels_last)
    return model
