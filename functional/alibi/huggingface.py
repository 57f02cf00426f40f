"""The ALiBi converters for HuggingFace transformers GPT-2, BERT, RoBERTa, XLM-RoBERTa and
DistilBERT (registered by :mod:`functional.alibi.registry`).

They change a model only through :class:`AlibiContext` (position tables switched off, the shared
bias attached through the attention functions of :mod:`functional.alibi.hf_attention`) and grow
the position buffers the embeddings slice. transformers is never imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from functional.alibi.hf_attention import _check_hf_attention

if TYPE_CHECKING:
    from functional.alibi.context import AlibiContext


def _convert_gpt2_model(model: nn.Module, context: AlibiContext) -> bool:
    return context.disable_position_embedding(model.get_submodule("wpe"))


def _convert_gpt2_attention(attention: nn.Module, context: AlibiContext) -> bool:
    if getattr(attention, "is_cross_attention", False):
        return False  # ALiBi biases self-attention only
    return context.bias_attention_interface(attention, cast(int, attention.num_heads))


def _check_gpt2_attention(attention: nn.Module) -> None:
    if not getattr(attention, "is_cross_attention", False):
        _check_hf_attention(attention)


def _grow_buffer(module: nn.Module, name: str, length: int, arange: bool) -> bool:
    old = getattr(module, name, None)
    if not isinstance(old, torch.Tensor) or old.shape[-1] >= length:
        return False
    if arange:
        new = torch.arange(length, device=old.device, dtype=old.dtype).expand((1, -1))
    else:
        new = old.new_zeros((*old.shape[:-1], length))
        new[..., : old.shape[-1]] = old
    setattr(module, name, new)
    return True


def _convert_bert_embeddings(embeddings: nn.Module, context: AlibiContext) -> bool:
    changed = context.disable_position_embedding(embeddings.get_submodule("position_embeddings"))
    # BertEmbeddings slices these (1, max_position_embeddings) buffers by sequence length.
    changed |= _grow_buffer(embeddings, "position_ids", context.max_sequence_length, True)
    changed |= _grow_buffer(embeddings, "token_type_ids", context.max_sequence_length, False)
    return changed


def _convert_bert_self_attention(attention: nn.Module, context: AlibiContext) -> bool:
    return context.bias_attention_interface(attention, cast(int, attention.num_attention_heads))


def _convert_roberta_embeddings(embeddings: nn.Module, context: AlibiContext) -> bool:
    """RoBERTa and XLM-RoBERTa: positions are numbered from ``padding_idx + 1`` (padding keeps
    ``padding_idx``), and the ``token_type_ids`` buffer is gathered at those positions, so both
    buffers must reach ``max_sequence_length + padding_idx + 1``."""
    changed = context.disable_position_embedding(embeddings.get_submodule("position_embeddings"))
    padding_idx = getattr(embeddings, "padding_idx", None)
    length = context.max_sequence_length + (0 if padding_idx is None else int(padding_idx) + 1)
    changed |= _grow_buffer(embeddings, "position_ids", length, True)
    changed |= _grow_buffer(embeddings, "token_type_ids", length, False)
    return changed


def _convert_distilbert_embeddings(embeddings: nn.Module, context: AlibiContext) -> bool:
    changed = context.disable_position_embedding(embeddings.get_submodule("position_embeddings"))
    # DistilBERT's Embeddings slices its (1, max_position_embeddings) position_ids buffer.
    changed |= _grow_buffer(embeddings, "position_ids", context.max_sequence_length, True)
    return changed


def _convert_distilbert_attention(attention: nn.Module, context: AlibiContext) -> bool:
    return context.bias_attention_interface(attention, cast(int, attention.n_heads))
