"""Sequence length warmup: train language models on short sequences first (Li et al. 2022).

Paper: `The Stability-Efficiency Dilemma: Investigating Sequence Length Warmup for Training GPT
Models <https://arxiv.org/abs/2108.06084>`_.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from functional._args import check_bool, check_in_range, check_int

__all__ = ["apply_seq_length_warmup", "seq_length_warmup_length"]


def seq_length_warmup_length(
    progress: float,
    duration: float = 0.3,
    min_seq_length: int = 8,
    max_seq_length: int = 1024,
    step_size: int = 8,
) -> int:
    r"""The sequence length at a point of training for sequence length warmup.

    Grows linearly from ``min_seq_length`` to ``max_seq_length`` over the first ``duration`` of
    training, rounded down to a multiple of ``step_size`` and clamped to the bounds:

    .. math::
        L(t) = \operatorname{clamp}\Bigl(\Bigl\lfloor \frac{L_\min + (L_\max - L_\min)\,
        \min(1, t / d)}{s} \Bigr\rfloor s,\; L_\min,\; L_\max\Bigr)

    Args:
        progress: fraction of training done, in ``[0, 1]``.
        duration: fraction of training the warmup lasts, in ``[0, 1]`` (0: no warmup).
        min_seq_length: length at the start (``>= 1``).
        max_seq_length: length at the end of the warmup (``>= min_seq_length``).
        step_size: granularity of the length (``>= 1``; a multiple of 8 suits GPUs).

    Returns:
        The sequence length, non-decreasing in ``progress``, in
        ``[min_seq_length, max_seq_length]``.

    Example:
        >>> import functional as F
        >>> [F.seq_length_warmup_length(t) for t in (0.0, 0.1, 0.3, 0.9)]
        [8, 344, 1024, 1024]
    """
    progress = check_in_range(progress, "progress", 0.0, 1.0)
    duration = check_in_range(duration, "duration", 0.0, 1.0)
    min_seq_length = check_int(min_seq_length, "min_seq_length", minimum=1)
    max_seq_length = check_int(max_seq_length, "max_seq_length", minimum=1)
    step_size = check_int(step_size, "step_size", minimum=1)
    if max_seq_length < min_seq_length:
        raise ValueError(
            f"max_seq_length must be >= min_seq_length, got min_seq_length={min_seq_length}, "
            f"max_seq_length={max_seq_length}"
        )
    fraction = 1.0 if duration == 0.0 or progress >= duration else progress / duration
    length = min_seq_length + (max_seq_length - min_seq_length) * fraction
    length = math.floor(length / step_size) * step_size
    return max(min_seq_length, min(max_seq_length, length))


def apply_seq_length_warmup(
    batch: Mapping[str, torch.Tensor], curr_seq_len: int, truncate: bool = True
) -> dict[str, torch.Tensor]:
    r"""Cut every sequence of a batch to ``curr_seq_len`` positions.

    Every tensor of ``batch`` is ``(B, L, ...)`` with the same ``L``. With ``truncate=True`` the
    first ``curr_seq_len`` positions of each row are kept. With ``truncate=False`` no tokens are
    wasted: the first :math:`\lfloor L / c \rfloor\, c` positions of each row are split into
    :math:`\lfloor L / c \rfloor` rows of :math:`c` = ``curr_seq_len`` positions (row ``b``'s
    pieces consecutively), giving a batch of :math:`B \lfloor L / c \rfloor` rows. When
    ``curr_seq_len >= L`` the tensors are returned as they are. Other values pass through.
    A per-step op on the batch, not a model transform despite its ``apply_`` name: it takes
    no ``optimizers=``.

    Per-step friendly: slicing and reshaping only, no value read on the host. ``curr_seq_len``
    sets the output shape, so under ``torch.compile`` a new length recompiles (by design; dynamo
    may then treat it as a dynamic size); the same length with new data does not.

    Args:
        batch: a mapping of names to tensors ``(B, L, ...)``, e.g. ``input_ids``,
            ``attention_mask`` and ``labels`` of a Hugging Face batch.
        curr_seq_len: the sequence length to apply (``>= 1``).
        truncate: truncate (True) or split the rows into shorter ones (False).

    Returns:
        A new dict; the input mapping and its tensors are not modified.

    Shape:
        - each tensor: :math:`(B, L, *)`
        - output, ``truncate=True``: :math:`(B, \min(c, L), *)`;
          ``truncate=False``: :math:`(B \lfloor L/c \rfloor, c, *)` if :math:`c \le L`

    Example:
        >>> import torch, functional as F
        >>> batch = {"input_ids": torch.arange(12).view(2, 6), "attention_mask": torch.ones(2, 6)}
        >>> F.apply_seq_length_warmup(batch, 4)["input_ids"]
        tensor([[0, 1, 2, 3],
                [6, 7, 8, 9]])
        >>> F.apply_seq_length_warmup(batch, 3, truncate=False)["input_ids"]
        tensor([[ 0,  1,  2],
                [ 3,  4,  5],
                [ 6,  7,  8],
                [ 9, 10, 11]])

    Reference: Li et al., *The Stability-Efficiency Dilemma: Investigating Sequence Length
    Warmup for Training GPT Models*, NeurIPS 2022.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"batch must be a mapping of names to tensors (B, L, ...), got {type(batch).__name__}"
        )
    curr_seq_len = check_int(curr_seq_len, "curr_seq_len", minimum=1)
    check_bool(truncate, "truncate")
    lengths = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            if value.ndim < 2:
                raise ValueError(
                    f"batch[{key!r}] must be (B, L, ...), got shape {tuple(value.shape)}"
                )
            lengths[key] = value.shape[1]
    if len(set(lengths.values())) > 1:
        raise ValueError(f"every tensor of batch must have the same length L, got {lengths}")
    out: dict[str, torch.Tensor] = {}
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or curr_seq_len >= value.shape[1]:
            out[key] = value
        elif truncate:
            out[key] = value[:, :curr_seq_len].contiguous()
        else:
            pieces = value.shape[1] // curr_seq_len
            kept = value[:, : pieces * curr_seq_len]
            out[key] = kept.reshape(value.shape[0] * pieces, curr_seq_len, *value.shape[2:])
    return out
