"""The context an ALiBi converter works with, and the converter type."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from torch import nn

from functional._args import check_int
from functional.alibi.hf_attention import _bias_attention_interface
from functional.alibi.modules import AlibiBias, DisabledPositionEmbedding

__all__ = ["AlibiContext", "AlibiConverter"]


class AlibiContext:
    """What an ALiBi converter gets besides the module: the target length and shared tools.

    One context serves one :func:`apply_alibi` call. Its tools keep the model consistent:
    :meth:`bias` hands out one :class:`AlibiBias` per head count for the whole model,
    :meth:`replace_module` and :meth:`disable_position_embedding` go through the surgery engine
    (optimizers, hooks, device and dtype kept consistent), and
    :meth:`bias_attention_interface` enables ALiBi on a transformers attention module.

    Attributes:
        max_sequence_length: the longest sequence the transformed model must accept.
    """

    def __init__(self, model: nn.Module, max_sequence_length: int) -> None:
        self.max_sequence_length = max_sequence_length
        self._model = model
        self._biases: dict[int, AlibiBias] = {}
        self._replacements: dict[nn.Module, nn.Module] = {}  # old -> new (modules hash by identity)
        self._skipped: list[str] = []
        self._limits_changed = False
        for module in model.modules():
            if isinstance(module, AlibiBias):
                self._biases.setdefault(module.num_heads, module)
                if module.max_sequence_length != max_sequence_length:
                    module.max_sequence_length = max_sequence_length
                    self._limits_changed = True

    def bias(self, num_heads: int) -> AlibiBias:
        """The model's shared :class:`AlibiBias` for ``num_heads`` heads (created on first use)."""
        num_heads = check_int(num_heads, "num_heads", minimum=1)
        if num_heads not in self._biases:
            self._biases[num_heads] = AlibiBias(num_heads, self.max_sequence_length)
        return self._biases[num_heads]

    def replace_module(self, old: nn.Module, new: nn.Module) -> None:
        """Install ``new`` wherever ``old`` sits, through the surgery engine, once all converters ran.

        All replacements of one :func:`apply_alibi` call go through one
        :func:`surgery.replace_modules` call: ``old`` is replaced in every parent that holds it,
        parameters of ``old`` that ``new`` does not hold leave the optimizers with their state,
        and new parameters join the param group of ``old``'s. ``old`` must be a submodule of the
        model (``apply_alibi`` raises ``ValueError`` otherwise).
        """
        if not isinstance(old, nn.Module) or not isinstance(new, nn.Module):
            raise TypeError(
                f"replace_module takes two nn.Modules, got {type(old).__name__} and "
                f"{type(new).__name__}"
            )
        if old is self._model:
            raise ValueError(
                f"cannot replace the model itself ({type(old).__name__}); convert it in place"
            )
        self._replacements[old] = new

    def disable_position_embedding(self, embedding: nn.Module) -> bool:
        """Switch off a learned position-embedding table (see :class:`DisabledPositionEmbedding`).

        Returns whether anything changed (``False`` for a table already switched off).
        """
        if isinstance(embedding, DisabledPositionEmbedding) or embedding in self._replacements:
            return False
        if not isinstance(embedding, nn.Embedding):
            raise TypeError(
                f"disable_position_embedding expects an nn.Embedding, got {type(embedding).__name__}"
            )
        self.replace_module(embedding, DisabledPositionEmbedding.from_embedding(embedding))
        return True

    def bias_attention_interface(self, attention: nn.Module, num_heads: int) -> bool:
        """Enable ALiBi on a transformers attention module that dispatches through AttentionInterface.

        Attaches the shared :class:`AlibiBias` as ``attention.alibi_bias`` and switches the
        module's config to ``"alibi_sdpa"`` or ``"alibi_eager"`` (wrapping its current
        ``"sdpa"``/``"eager"`` implementation). Modules of the same model without the bias
        (cross-attention) keep plain attention. Returns whether anything changed.
        """
        return _bias_attention_interface(attention, num_heads, self.bias)


AlibiConverter: TypeAlias = Callable[[nn.Module, AlibiContext], bool]
"""Converts one module for ALiBi, in place or via ``context.replace_module``; returns whether it changed anything."""
