"""Built-in ALiBi converters for torch's ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from functional._transformer_layers import ModularTransformerEncoderLayer, make_modular
from functional.alibi.modules import AlibiBias, AlibiMultiheadAttention

if TYPE_CHECKING:
    from functional.alibi.context import AlibiContext


def _convert_multihead_attention(attention: nn.Module, context: AlibiContext) -> bool:
    if isinstance(attention, AlibiMultiheadAttention):
        if isinstance(attention._modules.get("alibi_bias"), AlibiBias):
            return False
    elif type(attention) is nn.MultiheadAttention:
        attention.__class__ = AlibiMultiheadAttention
    else:
        context._skipped.append(
            f"{type(attention).__qualname__} (a subclass of nn.MultiheadAttention with its own "
            "behaviour)"
        )
        return False
    attention.alibi_bias = context.bias(attention.num_heads)
    return True


def _convert_encoder_layer(layer: nn.Module, context: AlibiContext) -> bool:
    if not isinstance(layer, nn.TransformerEncoderLayer):  # pragma: no cover - registry guarantees
        return False
    if type(layer) is not nn.TransformerEncoderLayer and not isinstance(
        layer, ModularTransformerEncoderLayer
    ):
        context._skipped.append(
            f"{type(layer).__qualname__} (a subclass of nn.TransformerEncoderLayer with its own "
            "behaviour)"
        )
        return False
    changed = _convert_multihead_attention(layer.self_attn, context)
    changed |= make_modular(layer)
    return changed
