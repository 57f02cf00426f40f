"""Label smoothing: mix the targets with the uniform distribution (Szegedy et al. 2016).

Paper: `Rethinking the Inception Architecture for Computer Vision
<https://arxiv.org/abs/1512.00567>`_.
"""

from __future__ import annotations

import torch

from functional._args import check_ndim, check_probability, check_tensor
from functional._batch import memory_format_of
from functional._numeric import scalar_tensor
from functional._values import check_class_indices, check_values

__all__ = ["smooth_labels"]


def _check_alpha(alpha: object) -> float | torch.Tensor:
    if not isinstance(alpha, torch.Tensor):
        return check_probability(alpha, "alpha")
    if alpha.ndim != 0 or not alpha.is_floating_point():
        raise TypeError(
            f"alpha must be a float or a 0-d floating tensor, got a tensor of shape "
            f"{tuple(alpha.shape)}, dtype {alpha.dtype}"
        )
    check_values((alpha >= 0) & (alpha <= 1), "alpha must be in [0, 1]", lambda: str(float(alpha)))
    return alpha


def smooth_labels(
    logits: torch.Tensor, targets: torch.Tensor, alpha: float | torch.Tensor = 0.1
) -> torch.Tensor:
    r"""Shrink the targets towards the uniform distribution over the ``C`` classes.

    .. math::
        \tilde y = (1 - \alpha)\, y + \frac{\alpha}{C}

    where :math:`y` is the one-hot encoding of index targets, or the dense targets as given.
    The class dimension is dim 1 of ``logits``, as for :func:`torch.nn.functional.cross_entropy`
    (which accepts the result as probability targets).

    Per-step friendly: no value is read on the host (the range check of index targets runs
    eagerly on CPU tensors, as a device assert on accelerators, skipped under compile), and
    under ``torch.compile(fullgraph=True)`` a new ``alpha`` (a Python float or a 0-d tensor)
    does not recompile; only the shapes and dtypes are part of the graph.

    Args:
        logits: model output ``(N, C)`` or ``(N, C, d1, ..., dk)``; gives the shape, dtype and
            device of the result.
        targets: class indices ``(N)`` / ``(N, d1, ..., dk)`` in ``[0, C)``, or dense targets of
            the shape of ``logits``.
        alpha: smoothing strength in ``[0, 1]`` (a float or a 0-d tensor); 0 keeps the
            targets, 1 gives the uniform distribution. Default 0.1, Composer's.

    Returns:
        The smoothed targets, shape, dtype, device and memory format of ``logits``.

    Shape:
        - logits: :math:`(N, C, *)`
        - targets: :math:`(N, *)` (indices) or :math:`(N, C, *)` (dense)
        - output: :math:`(N, C, *)`

    Example:
        >>> import torch, functional as F
        >>> F.smooth_labels(torch.zeros(2, 4), torch.tensor([0, 3]), alpha=0.2)
        tensor([[0.8500, 0.0500, 0.0500, 0.0500],
                [0.0500, 0.0500, 0.0500, 0.8500]])

    Reference: Szegedy et al., *Rethinking the Inception Architecture for Computer Vision*,
    CVPR 2016.
    """
    check_tensor(logits, "logits")
    check_tensor(targets, "targets")
    check_ndim(logits, "logits", tuple(range(2, 12)), "(N, C, ...)")
    alpha = _check_alpha(alpha)
    n_classes = logits.shape[1]
    if n_classes == 0:
        raise ValueError(
            f"logits must have at least one class along dim 1, got shape {tuple(logits.shape)}"
        )
    dtype = logits.dtype if logits.is_floating_point() else torch.get_default_dtype()
    index_shape = logits.shape[:1] + logits.shape[2:]
    if isinstance(alpha, torch.Tensor) or torch.compiler.is_compiling():
        # 0-d tensors, even for a Python float: a graph input under compile, not a constant
        alpha = scalar_tensor(alpha, dtype=dtype, device=logits.device)
    # (eagerly a Python float stays one: scalar kernels, half the time of 0-d tensor ones)
    low = alpha / n_classes
    if targets.shape == logits.shape:
        dense = targets.to(device=logits.device, dtype=dtype, non_blocking=True)
        smoothed = (dense * (1 - alpha)).add_(low)
        return smoothed.contiguous(memory_format=memory_format_of(logits))  # logits' format
    if targets.shape != index_shape:
        raise ValueError(
            f"targets must be class indices of shape {tuple(index_shape)} or dense targets of the "
            f"logits' shape {tuple(logits.shape)}, got shape {tuple(targets.shape)}"
        )
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"index targets must be integers, got dtype {targets.dtype}")
    check_class_indices(targets, n_classes, "targets")
    index = targets.to(device=logits.device, dtype=torch.long, non_blocking=True).unsqueeze(1)
    out = torch.empty_like(logits, dtype=dtype, memory_format=memory_format_of(logits))
    high = 1 - alpha + low
    if isinstance(low, torch.Tensor) and isinstance(high, torch.Tensor):  # alpha a 0-d tensor
        out.copy_(low.expand(out.shape))
        return out.scatter_(1, index, high.expand(index.shape))
    return out.fill_(low).scatter_(1, index, high)
