"""Channels-last memory format for convolutional models."""

from __future__ import annotations

import torch

from functional._args import check_module
from functional._policies import ModelT, warn_no_effect
from surgery import OptimizerArg, as_optimizer_list

__all__ = ["apply_channels_last"]


def _convert_optimizer_state(
    model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]
) -> int:
    """Give every optimizer state tensor shaped like a 4-D parameter that parameter's strides.

    Fused optimizer kernels (``SGD``/``Adam``/``AdamW`` with ``fused=True``) walk a parameter,
    its gradient and its state as flat memory: a momentum buffer left in NCHW while the weight
    is NHWC would pair the wrong elements. The values are kept; only the strides change.
    Returns how many state tensors changed layout.
    """
    four_d = {id(p): p for p in model.parameters() if p.ndim == 4}
    changed = 0
    for opt in optimizers:
        for param, state in opt.state.items():
            if id(param) not in four_d or not isinstance(state, dict):
                continue
            for key, value in state.items():
                if (
                    isinstance(value, torch.Tensor)
                    and value.shape == param.shape
                    and not value.is_contiguous(memory_format=torch.channels_last)
                ):
                    state[key] = value.contiguous(memory_format=torch.channels_last)
                    changed += 1
    return changed


def apply_channels_last(model: ModelT, optimizers: OptimizerArg = None) -> ModelT:
    """Store the 4-D parameters and buffers of ``model`` in ``torch.channels_last`` format, in place.

    Convolutions then run on NHWC data, which cuDNN (tensor cores) and oneDNN usually process
    faster; feed the model channels-last inputs (``x.to(memory_format=torch.channels_last)``)
    for the full effect. Values, dtypes, devices and the ``Parameter`` objects themselves are
    unchanged (only the strides change), and so are existing gradients. Autocast and
    ``torch.compile`` see the same layers as before: the dtype rules are autocast's own, and a
    compiled model keeps one graph as long as the inputs keep their memory format (a change of
    input strides is a new graph).

    Mid-training, pass the optimizers: every state tensor shaped like a converted parameter
    (momentum buffers, Adam's moments, ...) is converted too, keeping its values. Fused
    optimizers (``fused=True``) need this: their kernels pair a parameter with its state
    element by element in memory, so a state left in the old layout would update the wrong
    weights. foreach and single-tensor optimizers, and :class:`SAMOptimizer` (whose state is
    its base optimizer's), are converted the same way. An optimizer created after this call
    needs nothing.

    Args:
        model: the model to change in place.
        optimizers: optimizers holding ``model``'s parameters, whose state is converted too
            (the parameters themselves stay the same objects).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no 4-D parameter or buffer that is not
            already channels-last, and the optimizers no state tensor to convert.

    Example:
        >>> conv = torch.nn.Conv2d(3, 8, 3)
        >>> opt = torch.optim.SGD(conv.parameters(), lr=0.1, momentum=0.9)
        >>> conv(torch.randn(1, 3, 5, 5)).sum().backward(); opt.step()
        >>> conv = apply_channels_last(conv, optimizers=opt)
        >>> buffer = opt.state[conv.weight]["momentum_buffer"]
        >>> buffer.is_contiguous(memory_format=torch.channels_last)
        True

    Reference:
        PyTorch tutorial, "Channels Last Memory Format in PyTorch".
    """
    check_module(model)
    opts = as_optimizer_list(optimizers)
    to_convert = any(
        t.ndim == 4 and not t.is_contiguous(memory_format=torch.channels_last)
        for t in (*model.parameters(), *model.buffers())
    )
    state_changed = _convert_optimizer_state(model, opts) if opts else 0
    if not to_convert and not state_changed:
        warn_no_effect(
            "apply_channels_last", "4-D parameters or buffers outside channels-last format"
        )
        return model
    model.to(memory_format=torch.channels_last)
    return model
