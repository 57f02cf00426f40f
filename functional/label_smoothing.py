"""Label smoothing: mix the targets with the uniform distribution (Szegedy et al. 2016).

Paper: `Rethinking the Inception Architecture for Computer Vision
<https://arxiv.org/abs/1512.00567>`_.
"""

from __future__ import annotations

import torch

from functional._checks import check_class_indices, check_ndim, check_probability, check_tensor

__all__ = ["smooth_labels"]


def smooth_labels(logits: torch.Tensor, targets: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""Shrink the targets towards the uniform distribution over the ``C`` classes.

    .. math::
        \tilde y = (1 - \alpha)\, y + \frac{\alpha}{C}

    where :math:`y` is the one-hot encoding of index targets, or the dense targets as given.
    The class dimension is dim 1 of ``logits``, as for :func:`torch.nn.functional.cross_entropy`
    (which accepts the result as probability targets).

    Args:
        logits: model output ``(N, C)`` or ``(N, C, d1, ..., dk)``; gives the shape, dtype and
            device of the result.
        targets: class indices ``(N)`` / ``(N, d1, ..., dk)`` in ``[0, C)``, or dense targets of
            the shape of ``logits``.
        alpha: smoothing strength in ``[0, 1]``; 0 keeps the targets, 1 gives the uniform
            distribution.

    Returns:
        The smoothed targets, shape and dtype of ``logits``.

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
    alpha = check_probability(alpha, "alpha")
    n_classes = logits.shape[1]
    dtype = logits.dtype if logits.is_floating_point() else torch.get_default_dtype()
    index_shape = logits.shape[:1] + logits.shape[2:]
    if targets.shape == logits.shape:
        dense = targets.to(device=logits.device, dtype=dtype)
        return dense.mul(1.0 - alpha).add_(alpha / n_classes)
    if targets.shape != index_shape:
        raise ValueError(
            f"targets must be class indices of shape {tuple(index_shape)} or dense targets of the "
            f"logits' shape {tuple(logits.shape)}, got shape {tuple(targets.shape)}"
        )
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"index targets must be integers, got dtype {targets.dtype}")
    check_class_indices(targets, n_classes, "targets")
    out = torch.full(logits.shape, alpha / n_classes, dtype=dtype, device=logits.device)
    index = targets.to(device=logits.device, dtype=torch.long).unsqueeze(1)
    return out.scatter_(1, index, 1.0 - alpha + alpha / n_classes)
