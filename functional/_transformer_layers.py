"""Helpers shared by the language-model transforms (ALiBi and gated linear units).

``torch.nn.TransformerEncoderLayer`` has a fused inference fast path
(``torch._transformer_encoder_layer_fwd``) that reads the layer's weights directly and never calls
its submodules, and ``torch.nn.TransformerEncoder`` turns padded batches into nested tensors
before the layers see them. Both would silently skip a replaced attention or feed-forward
submodule in ``eval()`` under ``torch.no_grad()``. :class:`ModularTransformerEncoderLayer` is the
same layer (same parameters, same state_dict keys, same arithmetic) without the fused path, so
that both transforms can change its submodules and have the change take effect everywhere.
"""

from __future__ import annotations

import torch
from torch import nn

from functional._deploy import NotScriptable

__all__ = ["ModularTransformerEncoderLayer", "disable_nested_tensor", "make_modular"]


class ModularTransformerEncoderLayer(NotScriptable, nn.TransformerEncoderLayer):
    """An ``nn.TransformerEncoderLayer`` that always runs its submodules one by one.

    It computes what ``nn.TransformerEncoderLayer`` computes on its module-by-module path (post- or
    pre-norm, dropout, residuals), but never takes the fused inference fast path, which would
    bypass a replaced ``self_attn`` or ``linear1``. Layers are converted in place by
    :func:`make_modular`; nothing about their parameters changes.
    """

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        if src.is_nested:
            raise ValueError(
                f"{type(self).__name__} does not accept nested tensors; pass a padded batch and "
                "src_key_padding_mask instead"
            )
        x = src
        if self.norm_first:
            x = x + self._attention_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._feed_forward_block(self.norm2(x))
        else:
            x = self.norm1(x + self._attention_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._feed_forward_block(x))
        return x

    def _attention_block(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        key_padding_mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        out = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(out)

    def _feed_forward_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def make_modular(layer: nn.TransformerEncoderLayer) -> bool:
    """Turn a stock ``nn.TransformerEncoderLayer`` into a :class:`ModularTransformerEncoderLayer`.

    The conversion changes the instance's class in place: the object, its parameters, buffers,
    hooks and state_dict keys stay exactly as they are (so references held elsewhere and
    optimizers stay valid). Returns whether the layer changed. Subclasses of
    ``nn.TransformerEncoderLayer`` other than the stock class keep their own ``forward`` and are
    refused with ``TypeError``, since their behaviour cannot be assumed.
    """
    if isinstance(layer, ModularTransformerEncoderLayer):
        return False
    if type(layer) is not nn.TransformerEncoderLayer:
        raise TypeError(
            f"{type(layer).__qualname__} subclasses nn.TransformerEncoderLayer with its own "
            "behaviour, which this transform cannot assume; convert its submodules yourself"
        )
    layer.__class__ = ModularTransformerEncoderLayer
    return True


def disable_nested_tensor(model: nn.Module) -> None:
    """Keep every ``nn.TransformerEncoder`` that holds a modular layer from nesting its input.

    ``TransformerEncoder`` converts a padded batch to a nested tensor (in eval mode without grad)
    and drops the padding mask before calling its layers; a modular layer needs the padded batch.
    """
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and any(
            isinstance(layer, ModularTransformerEncoderLayer) for layer in module.layers
        ):
            module.use_nested_tensor = False
