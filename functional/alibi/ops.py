"""ALiBi's pure ops: the slopes :math:`m_h` and the additive bias :math:`-m_h |i - j|`."""

from __future__ import annotations

import torch

from functional._args import check_int
from functional._numeric import accumulation_dtype

__all__ = ["alibi_bias", "alibi_slopes"]


def _slopes(num_heads: int) -> list[float]:
    closest = 1 << (num_heads.bit_length() - 1)  # largest power of two <= num_heads
    slopes = [2.0 ** (-8.0 * h / closest) for h in range(1, closest + 1)]
    if closest < num_heads:
        doubled = [2.0 ** (-8.0 * h / (2 * closest)) for h in range(1, 2 * closest + 1)]
        slopes += doubled[0::2][: num_heads - closest]
    return slopes


def alibi_slopes(
    num_heads: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The ALiBi slope :math:`m_h` of every head.

    For a power of two :math:`H`, :math:`m_h = 2^{-8h/H}`, :math:`h = 1..H` (a geometric sequence
    starting at and with ratio :math:`2^{-8/H}`). Otherwise, with :math:`n` the largest power of
    two below :math:`H`: the :math:`n` slopes for :math:`n` heads followed by the slopes of
    :math:`2n` heads at odd positions (:math:`2^{-8(2k-1)/2n}`, :math:`k = 1..H-n`), as in the
    paper's reference code.

    Args:
        num_heads: number of attention heads :math:`H`, at least 1.
        device: device of the result.
        dtype: floating dtype of the result.

    Returns:
        A tensor of shape ``(num_heads,)``.

    Shape:
        - output: :math:`(H,)`

    Example:
        >>> alibi_slopes(8).tolist()
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
        >>> alibi_slopes(6).tolist()
        [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]

    Reference: Press et al. 2022, https://arxiv.org/abs/2108.12409
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    _check_floating_dtype(dtype)
    return torch.tensor(_slopes(num_heads), device=device, dtype=dtype)


def alibi_bias(
    num_heads: int,
    query_length: int,
    key_length: int | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The additive ALiBi bias :math:`-m_h |i - j|` for every head, query and key.

    Queries are the last ``query_length`` of the ``key_length`` positions (query ``t`` sits at
    position ``key_length - query_length + t``), which is where they are when decoding with a
    key/value cache; with equal lengths it is the plain :math:`|i - j|` matrix.

    Args:
        num_heads: number of heads :math:`H`.
        query_length: number of queries :math:`L_q`.
        key_length: number of keys :math:`L_k \\ge L_q`; defaults to ``query_length``.
        device: device of the result.
        dtype: floating dtype of the result (computed in float32, or float64 for float64).

    Returns:
        ``bias[h, t, j] = -m_h · |key_length - query_length + t - j|``.

    Shape:
        - output: :math:`(H, L_q, L_k)`

    Example:
        >>> alibi_bias(2, 3)
        tensor([[[-0.0000, -0.0625, -0.1250],
                 [-0.0625, -0.0000, -0.0625],
                 [-0.1250, -0.0625, -0.0000]],
        <BLANKLINE>
                [[-0.0000, -0.0039, -0.0078],
                 [-0.0039, -0.0000, -0.0039],
                 [-0.0078, -0.0039, -0.0000]]])
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    query_length = check_int(query_length, "query_length", minimum=0)
    key_length = query_length if key_length is None else check_int(key_length, "key_length")
    if key_length < query_length:
        raise ValueError(f"key_length must be >= query_length ({query_length}), got {key_length}")
    _check_floating_dtype(dtype)
    work = accumulation_dtype(dtype)
    slopes = alibi_slopes(num_heads, device=device, dtype=work)
    q_pos = torch.arange(key_length - query_length, key_length, device=device, dtype=work)
    k_pos = torch.arange(key_length, device=device, dtype=work)
    distance = (q_pos[:, None] - k_pos[None, :]).abs_()
    return (distance * -slopes[:, None, None]).to(dtype)


def _check_floating_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
