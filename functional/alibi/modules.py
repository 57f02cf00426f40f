"""ALiBi's modules: the shared bias cache, the switched-off position table and the attention."""

from __future__ import annotations

import torch
from torch import nn

from functional._args import check_int
from functional._deploy import NotScriptable
from functional.alibi.ops import alibi_bias, alibi_slopes

__all__ = ["AlibiBias", "AlibiMultiheadAttention", "DisabledPositionEmbedding"]


def _same_device(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and (
        device.index is None or tensor.device.index == device.index
    )


class AlibiBias(NotScriptable, nn.Module):
    """The ALiBi bias of one model, built once per length and shared by all its attention layers.

    Calling it returns the :math:`(H, L_q, L_k)` bias (see :func:`alibi_bias`) as a view of a
    cached tensor on the requested device and dtype. The cache is a non-persistent buffer (it moves
    with ``model.to(...)`` and never enters a checkpoint); it is rebuilt only when a longer
    sequence than any seen so far arrives (growing geometrically, capped at
    ``max_sequence_length``) or when the device or dtype changes, never per forward pass.

    ``causal=True`` returns the same bias with the strictly upper triangle (keys after the query)
    set to the dtype's lowest value, aligned top-left (query ``t`` may see keys ``0..t``), the way
    ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` aligns its mask. Use it
    when the caller has no mask of its own to add.

    Args:
        num_heads: number of attention heads :math:`H`.
        max_sequence_length: longest key sequence accepted; longer ones raise ``ValueError``.

    Example:
        >>> bias = AlibiBias(num_heads=4, max_sequence_length=16)
        >>> bias(3, 5, dtype=torch.float64).shape
        torch.Size([4, 3, 5])
        >>> torch.equal(bias(5, 5), alibi_bias(4, 5))
        True
    """

    bias: torch.Tensor | None
    causal_bias: torch.Tensor | None

    def __init__(self, num_heads: int, max_sequence_length: int) -> None:
        super().__init__()
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.max_sequence_length = check_int(max_sequence_length, "max_sequence_length", minimum=1)
        self.register_buffer("bias", None, persistent=False)
        self.register_buffer("causal_bias", None, persistent=False)

    @property
    def slopes(self) -> torch.Tensor:
        """The slopes :math:`m_h` (float32, CPU); see :func:`alibi_slopes`."""
        return alibi_slopes(self.num_heads)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_sequence_length={self.max_sequence_length}"

    def forward(
        self,
        query_length: int,
        key_length: int | None = None,
        *,
        causal: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        key_length = query_length if key_length is None else key_length
        self._check_lengths(query_length, key_length)
        name = "causal_bias" if causal else "bias"
        cached = getattr(self, name)
        device, dtype = _placement(cached, device, dtype)
        if torch.compiler.is_compiling():
            # Filling the cache inside a compiled graph would be a module mutation that dynamo
            # guards on (the buffer goes from None to a tensor), so the second step would
            # recompile. Traced, the bias is a few fused elementwise ops on iota: build it in
            # the graph from the sizes, and leave the eager cache alone.
            table = _bias_table(self.num_heads, key_length, causal, device, dtype)
            return table[:, key_length - query_length :] if not causal else table[:, :query_length]
        if cached is None or _outgrown(cached, key_length, device, dtype):
            cached = self._build(self._cache_size(cached, key_length), causal, device, dtype)
            setattr(self, name, cached)
        if causal:
            return cached[:, :query_length, :key_length]
        return cached[:, key_length - query_length : key_length, :key_length]

    def _check_lengths(self, query_length: int, key_length: int) -> None:
        if key_length > self.max_sequence_length:
            raise ValueError(
                f"sequence length {key_length} exceeds the max_sequence_length="
                f"{self.max_sequence_length} this model was given by apply_alibi; call "
                "apply_alibi(model, max_sequence_length=...) again with a larger value"
            )
        if query_length > key_length:
            raise ValueError(f"query_length ({query_length}) must be <= key_length ({key_length})")

    def _cache_size(self, cached: torch.Tensor | None, key_length: int) -> int:
        """Grow geometrically (capped at ``max_sequence_length``) so long inputs rebuild rarely."""
        if cached is None:
            return key_length
        grow = 2 * cached.shape[-1] if cached.shape[-1] < key_length else cached.shape[-1]
        return min(self.max_sequence_length, max(key_length, grow))

    def _build(
        self, size: int, causal: bool, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        # A cache built under inference_mode must stay usable for training afterwards.
        with torch.inference_mode(False), torch.no_grad():
            return _bias_table(self.num_heads, size, causal, device, dtype)


def _placement(
    cached: torch.Tensor | None, device: torch.device | str | None, dtype: torch.dtype | None
) -> tuple[torch.device, torch.dtype]:
    """The requested device and dtype; by default the cache's, else CPU float32."""
    if device is None:
        device = cached.device if cached is not None else torch.device("cpu")
    if dtype is None:
        dtype = cached.dtype if cached is not None else torch.float32
    return torch.device(device), dtype


def _outgrown(
    cached: torch.Tensor, key_length: int, device: torch.device, dtype: torch.dtype
) -> bool:
    """Whether the cache is too short or on another device or dtype than requested."""
    return (
        cached.shape[-1] < key_length or cached.dtype != dtype or not _same_device(cached, device)
    )


def _bias_table(
    num_heads: int, size: int, causal: bool, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """The (H, size, size) bias; with ``causal``, keys after the query at the dtype's lowest."""
    bias = alibi_bias(num_heads, size, device=device, dtype=dtype)
    if causal:
        future = torch.ones(size, size, dtype=torch.bool, device=device).triu_(1)
        bias = bias.masked_fill(future, torch.finfo(dtype).min)
    return bias


class DisabledPositionEmbedding(NotScriptable, nn.Module):
    """Stands in for a learned position-embedding table that ALiBi has switched off.

    It returns zeros of the embedding's shape for any position (so positions past the old table
    are accepted), keeps the old table as the persistent buffer ``weight`` -- the same
    state_dict key as before, so checkpoints saved before or after :func:`apply_alibi` load into
    the transformed model -- and has no parameters, so nothing is trained and the optimizers no
    longer hold the table.

    Example:
        >>> emb = DisabledPositionEmbedding.from_embedding(nn.Embedding(8, 4))
        >>> emb(torch.tensor([[0, 1, 50]])).abs().sum().item(), list(emb.state_dict())
        (0.0, ['weight'])
    """

    weight: torch.Tensor

    def __init__(self, weight: torch.Tensor, padding_idx: int | None = None) -> None:
        super().__init__()
        if weight.ndim != 2:
            raise ValueError(
                f"weight must be a 2-D embedding table, got shape {tuple(weight.shape)}"
            )
        self.num_embeddings, self.embedding_dim = weight.shape
        self.padding_idx = padding_idx
        self.register_buffer("weight", weight.detach())

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> DisabledPositionEmbedding:
        """Wrap ``embedding``'s table (shared, not copied)."""
        return cls(embedding.weight, padding_idx=embedding.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.weight.new_zeros((*input.shape, self.embedding_dim))


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True = not allowed) as 0/-inf, or a float mask in ``dtype``."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
            mask, float("-inf")
        )
    return mask.to(dtype)


class AlibiMultiheadAttention(NotScriptable, nn.MultiheadAttention):
    """``nn.MultiheadAttention`` that adds the ALiBi bias when used as self-attention.

    Calls with ``query is key`` (``mha(x, x, x)``, as ``nn.TransformerEncoderLayer`` and
    ``nn.TransformerDecoderLayer`` make for their self-attention) get the bias
    :math:`-m_h|i-j|` added to ``attn_mask``; other calls (cross-attention) run unchanged. Masks
    keep their meaning: boolean ``True`` = not allowed, float = additive; ``key_padding_mask``
    is merged into the same additive mask. ``is_causal=True`` applies a causal mask even when
    ``attn_mask`` is ``None``. Parameters and state_dict keys are those of the converted
    ``nn.MultiheadAttention``; :func:`apply_alibi` converts instances in place.
    """

    alibi_bias: AlibiBias

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        bias_module = self._modules.get("alibi_bias")
        if query is not key or not isinstance(bias_module, AlibiBias):
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                need_weights=need_weights,
                attn_mask=attn_mask,
                average_attn_weights=average_attn_weights,
                is_causal=is_causal,
            )
        batched = query.dim() == 3
        length = query.shape[1 if batched and self.batch_first else 0]
        heads = self.num_heads
        mask = bias_module(length, causal=is_causal, device=query.device, dtype=query.dtype)
        if attn_mask is not None:
            extra = _additive(attn_mask, query.dtype)
            if extra.dim() == 3 and batched:
                extra = extra.view(-1, heads, *extra.shape[-2:])
            mask = mask + extra
        if key_padding_mask is not None:
            padding = _additive(key_padding_mask, query.dtype)
            mask = mask + (padding[:, None, None, :] if batched else padding)
        if batched:
            batch = query.shape[0 if self.batch_first else 1]
            mask = mask.expand(batch, heads, length, length).reshape(batch * heads, length, length)
        return super().forward(
            query,
            key,
            value,
            key_padding_mask=None,
            need_weights=need_weights,
            attn_mask=mask,
            average_attn_weights=average_attn_weights,
            is_causal=False,
        )
