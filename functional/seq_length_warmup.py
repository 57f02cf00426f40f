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


def _last_real_positions(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Per row, the index of the last position whose ``attention_mask`` is non-zero (-1 for a
    row with none): with right padding, ``mask.sum(1) - 1`` as Composer computes it; with left
    padding, still the last token. A tensor on the mask's device; nothing is read on the host."""
    mask = batch.get("attention_mask")
    if not isinstance(mask, torch.Tensor):
        raise ValueError(
            "preserve_end_of_sequence=True needs batch['attention_mask'] (B, L) to find the "
            "last real token of each row; the batch has "
            + ("no such key" if mask is None else f"a {type(mask).__name__} there")
        )
    if mask.ndim != 2:
        raise ValueError(f"batch['attention_mask'] must be (B, L), got shape {tuple(mask.shape)}")
    sizes = {k: v.shape[0] for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            "preserve_end_of_sequence=True needs every tensor of batch to have the batch size "
            f"B of attention_mask, got {sizes}"
        )
    positions = torch.arange(mask.shape[1], device=mask.device)
    return torch.where(mask != 0, positions, -1).amax(dim=1)


def _truncate_keeping_end(value: torch.Tensor, last: torch.Tensor, length: int) -> torch.Tensor:
    """Deterministic core: the first ``length`` positions of each row, with the token at
    ``last`` (per row) written at ``min(last, length - 1)``; rows with ``last = -1`` are only
    truncated. Gathers and a select: no host read, no data-dependent shape."""
    rows = torch.arange(value.shape[0], device=value.device)
    last = last.to(value.device, non_blocking=True)
    source = value[rows, last.clamp(min=0)]
    target = last.clamp(min=0, max=length - 1)
    out = value[:, :length].clone()
    current = out[rows, target]
    keep = (last >= 0).view(-1, *([1] * (source.ndim - 1)))
    out[rows, target] = torch.where(keep, source, current)
    return out


def apply_seq_length_warmup(
    batch: Mapping[str, torch.Tensor],
    curr_seq_len: int,
    truncate: bool = True,
    *,
    preserve_end_of_sequence: bool = False,
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

    ``preserve_end_of_sequence=True`` (with ``truncate=True``, Composer's option) keeps the
    last real token of every row: the last position where ``batch['attention_mask']`` is
    non-zero (``mask.sum(1) - 1`` for right padding, as Composer computes it) is copied, in
    every tensor of the batch, to ``min(that position, curr_seq_len - 1)``, so a truncated row
    still ends with its end-of-sequence token and a short row is unchanged. A row whose mask
    is all zero is only truncated.

    Per-step friendly: slicing and reshaping only, no value read on the host. ``curr_seq_len``
    sets the output shape, so under ``torch.compile`` a new length recompiles (by design; dynamo
    may then treat it as a dynamic size); the same length with new data does not.

    Args:
        batch: a mapping of names to tensors ``(B, L, ...)``, e.g. ``input_ids``,
            ``attention_mask`` and ``labels`` of a Hugging Face batch.
        curr_seq_len: the sequence length to apply (``>= 1``).
        truncate: truncate (True) or split the rows into shorter ones (False).
        preserve_end_of_sequence: when truncating, keep each row's last real token (EOS) as
            its last kept one; needs ``batch['attention_mask']`` ``(B, L)``. ``ValueError``
            with ``truncate=False`` (nothing is cut off there; Composer ignores it).

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
        >>> batch["attention_mask"] = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
        >>> F.apply_seq_length_warmup(batch, 4, preserve_end_of_sequence=True)["input_ids"]
        tensor([[0, 1, 2, 5],
                [6, 7, 8, 9]])

    Reference: Li et al., *The Stability-Efficiency Dilemma: Investigating Sequence Length
    Warmup for Training GPT Models*, NeurIPS 2022.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"batch must be a mapping of names to tensors (B, L, ...), got {type(batch).__name__}"
        )
    curr_seq_len = check_int(curr_seq_len, "curr_seq_len", minimum=1)
    check_bool(truncate, "truncate")
    check_bool(preserve_end_of_sequence, "preserve_end_of_sequence")
    if preserve_end_of_sequence and not truncate:
        raise ValueError(
            "preserve_end_of_sequence=True applies to truncate=True only (splitting rows with "
            "truncate=False cuts no sequence end off); pass one or the other"
        )
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
    last = _last_real_positions(batch) if preserve_end_of_sequence else None
    return {key: _cut(value, curr_seq_len, truncate, last) for key, value in batch.items()}


def _cut(
    value: torch.Tensor, length: int, truncate: bool, last: torch.Tensor | None
) -> torch.Tensor:
    """One value of the batch at ``length`` positions: truncated (keeping each row's last real
    token when ``last`` is given) or split into rows; non-tensors and short tensors as they are."""
    if not isinstance(value, torch.Tensor) or length >= value.shape[1]:
        return value
    if last is not None:
        return _truncate_keeping_end(value, last, length)
    if truncate:
        return value[:, :length].contiguous()
    pieces = value.shape[1] // length
    kept = value[:, : pieces * length]
    # contiguous: when length does not divide L the reshape is a strided view, which a model's
    # own .view(-1) (HF's loss on labels) refuses
    return kept.reshape(value.shape[0] * pieces, length, *value.shape[2:]).contiguous()
