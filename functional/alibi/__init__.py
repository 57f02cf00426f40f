"""ALiBi: attention with linear biases instead of position embeddings (Press et al. 2022).

Every self-attention head :math:`h = 1..H` adds a fixed, distance-proportional penalty to its
scaled attention scores,

.. math::

    \\mathrm{score}_h(i, j) = \\frac{q_i \\cdot k_j}{\\sqrt{d}} - m_h \\, |i - j|,
    \\qquad m_h = 2^{-8h/H}\\ \\text{for } H \\text{ a power of two,}

and the learned position embeddings are switched off. For other head counts the slopes follow the
paper's rule: with :math:`n` the largest power of two below :math:`H`, the :math:`n` slopes for
:math:`n` heads, then every other slope of :math:`2n` heads (starting with the first) for the
remaining :math:`H - n` heads. Because the bias depends only on distance, a model trained on short
sequences keeps working on longer ones.

Layout of this package, one job per module:

* :mod:`~functional.alibi.ops`: the pure ops (:func:`alibi_slopes`, :func:`alibi_bias`).
* :mod:`~functional.alibi.modules`: :class:`AlibiBias` (the cached bias shared by all layers),
  :class:`DisabledPositionEmbedding` and :class:`AlibiMultiheadAttention`.
* :mod:`~functional.alibi.context`: :class:`AlibiContext`, what a converter works with, and the
  ``AlibiConverter`` type.
* :mod:`~functional.alibi.registry`: the converter registry (:func:`register_alibi`,
  :func:`unregister_alibi`, :func:`alibi_registry`) and its built-in entries.
* :mod:`~functional.alibi.hf_attention`: the HuggingFace transformers attention functions
  (``"alibi_sdpa"``/``"alibi_eager"``), their registration, and attaching the shared bias to an
  attention module; transformers is imported lazily, only for transformers models.
* :mod:`~functional.alibi.huggingface`: the GPT-2, BERT, RoBERTa, XLM-RoBERTa and DistilBERT
  converters, built on the context and those attention functions.
* :mod:`~functional.alibi.torch_layers`: the converters for ``nn.TransformerEncoderLayer`` and
  ``nn.MultiheadAttention``.
* :mod:`~functional.alibi.transform`: :func:`apply_alibi`.

HuggingFace transformers: covered from 5.0 (tested on 5.24), through the extension points
transformers documents (``AttentionInterface``, ``AttentionMaskInterface``, additive 4-D masks);
no private method of any model is patched. Older transformers releases are refused with a
``RuntimeError`` that says so.

Reference: O. Press, N. A. Smith, M. Lewis. *Train Short, Test Long: Attention with Linear
Biases Enables Input Length Extrapolation.* ICLR 2022. https://arxiv.org/abs/2108.12409
"""

from functional.alibi.context import AlibiContext, AlibiConverter
from functional.alibi.modules import AlibiBias, AlibiMultiheadAttention, DisabledPositionEmbedding
from functional.alibi.ops import alibi_bias, alibi_slopes
from functional.alibi.registry import alibi_registry, register_alibi, unregister_alibi
from functional.alibi.transform import apply_alibi

__all__ = [
    "AlibiBias",
    "AlibiContext",
    "AlibiConverter",
    "AlibiMultiheadAttention",
    "DisabledPositionEmbedding",
    "alibi_bias",
    "alibi_registry",
    "alibi_slopes",
    "apply_alibi",
    "register_alibi",
    "unregister_alibi",
]
