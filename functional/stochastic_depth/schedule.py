"""Changing stochastic depth's drop rate during training: the warm-up schedule
:func:`stochastic_depth_drop_rate` (the seed's ``drop_warmup``) and
:func:`set_stochastic_depth_drop_rate`, which sets a converted model's rate without recompiling."""

from __future__ import annotations

from torch import nn

from functional._args import check_module, check_probability
from functional.stochastic_depth.layers import StochasticBlock

__all__ = ["set_stochastic_depth_drop_rate", "stochastic_depth_drop_rate"]


def stochastic_depth_drop_rate(
    progress: float, drop_rate: float = 0.2, drop_warmup: float = 0.0
) -> float:
    r"""The base drop rate of stochastic depth at a point of training (the seed's ``drop_warmup``).

    Rises linearly from 0 to ``drop_rate`` over the first ``drop_warmup`` fraction of
    training, then stays at ``drop_rate``:

    .. math::
        p(t) = p \cdot \min\!\Bigl(1, \frac{t}{w}\Bigr) \quad (w > 0), \qquad
        p(t) = p \quad (w = 0)

    Pass the result to :func:`set_stochastic_depth_drop_rate` from the training loop; the
    per-block distribution chosen in :func:`apply_stochastic_depth` is kept.

    Args:
        progress: fraction of training done, in ``[0, 1]``.
        drop_rate: the base drop rate after warm-up, in ``[0, 1]``.
        drop_warmup: fraction of training over which the rate warms up, in ``[0, 1]``
            (0: no warm-up).

    Returns:
        The base drop rate, in ``[0, drop_rate]``, non-decreasing in ``progress``.

    Example:
        >>> import functional as F
        >>> [F.stochastic_depth_drop_rate(t, 0.2, drop_warmup=0.5) for t in (0.0, 0.25, 0.5, 1.0)]
        [0.0, 0.1, 0.2, 0.2]
    """
    progress = check_probability(progress, "progress")
    drop_rate = check_probability(drop_rate, "drop_rate")
    drop_warmup = check_probability(drop_warmup, "drop_warmup")
    if drop_warmup == 0 or progress >= drop_warmup:
        return drop_rate
    return drop_rate * progress / drop_warmup


def set_stochastic_depth_drop_rate(model: nn.Module, drop_rate: float) -> int:
    """Set the base drop rate of a model converted by :func:`apply_stochastic_depth`, in place.

    Each stochastic block gets ``min(drop_rate · share, 1)``, where ``share`` is its place in
    the distribution chosen at conversion (``l / L`` for ``'linear'``, 1 for ``'uniform'``; 1
    for a block built directly). Meant to be called every step (for instance with
    :func:`stochastic_depth_drop_rate`): an unchanged rate costs a comparison per block, a new
    one a ``fill_`` of each block's 0-d buffer ``drop_rate_units``. A compiled model reads the
    rate from those buffers, so it does not recompile when the rate changes. The rate set is
    part of ``model.state_dict()``: loading a checkpoint restores it.

    Args:
        model: a model (or a single block) converted by :func:`apply_stochastic_depth`.
        drop_rate: the new base drop rate, in ``[0, 1]``.

    Returns:
        The number of blocks updated.

    Raises:
        ValueError: when ``model`` has no stochastic block (a loop calling this on an
            unconverted model would silently train without stochastic depth).

    Example:
        >>> import functional as F
        >>> from torchvision.models import resnet50
        >>> model = F.apply_stochastic_depth(resnet50(), "block", "ResNetBottleneck", drop_rate=0.2)
        >>> F.set_stochastic_depth_drop_rate(model, 0.1)
        16
        >>> round(model.layer4[-1].drop_rate, 3), round(model.layer1[0].drop_rate, 5)
        (0.1, 0.00625)
    """
    check_module(model)
    drop_rate = check_probability(drop_rate, "drop_rate")
    count = 0
    for block in model.modules():
        if isinstance(block, StochasticBlock):
            block._set_drop_rate(min(drop_rate * block._drop_rate_share, 1.0))
            count += 1
    if count == 0:
        raise ValueError(
            "model must contain stochastic blocks (convert it with apply_stochastic_depth "
            f"first), got a {type(model).__name__} without any"
        )
    return count
