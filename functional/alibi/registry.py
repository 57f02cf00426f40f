"""The ALiBi converter registry: which converter :func:`apply_alibi` calls for which class.

Built-in entries: ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` at import; the
transformers classes (GPT-2, BERT, RoBERTa, XLM-RoBERTa, DistilBERT) once their modeling module
has been imported, so that importing this package never imports transformers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from functional._registry import Registry
from functional.alibi.context import AlibiConverter
from functional.alibi.hf_attention import _check_hf_attention
from functional.alibi.huggingface import (
    _check_gpt2_attention,
    _convert_bert_embeddings,
    _convert_bert_self_attention,
    _convert_distilbert_attention,
    _convert_distilbert_embeddings,
    _convert_gpt2_attention,
    _convert_gpt2_model,
    _convert_roberta_embeddings,
)
from functional.alibi.torch_layers import _convert_encoder_layer, _convert_multihead_attention

__all__ = ["alibi_registry", "register_alibi", "unregister_alibi"]

# The extension point: class -> converter. Built-ins for transformers classes are lazy entries,
# resolved once their modeling module has been imported (this never imports transformers).
_CONVERTERS: Registry[type[nn.Module], AlibiConverter] = Registry("ALiBi converter")
# Checks run on every matched module before any converter changes anything (built-ins only).
_PRECHECKS: Registry[AlibiConverter, Callable[[nn.Module], object]] = Registry("ALiBi precheck")


def register_alibi(
    module_class: type[nn.Module],
    converter: AlibiConverter | None = None,
    *,
    replace: bool = False,
) -> Any:
    """Teach :func:`apply_alibi` a new architecture: call ``converter`` on every ``module_class``.

    :func:`apply_alibi` calls ``converter(module, context)`` for every module of the model whose
    class is ``module_class`` or a subclass of it (the most specific registered class wins), innermost
    modules first. The converter changes the module in place or through ``context`` (see
    :class:`AlibiContext`) and returns whether it changed anything; it must return ``False`` for a
    module it already converted, so the transform stays idempotent. The built-in entries are
    converters like any other (transformers ``GPT2Model``, ``GPT2Attention``,
    ``BertEmbeddings``, ``BertSelfAttention``, the RoBERTa, XLM-RoBERTa and DistilBERT
    embeddings and self-attention; ``nn.TransformerEncoderLayer``, ``nn.MultiheadAttention``) and can be replaced with ``replace=True``.

    Typical converters: a model (or embeddings) class calls
    ``context.disable_position_embedding(module.<table>)``; a transformers attention class that
    dispatches through ``ALL_ATTENTION_FUNCTIONS`` calls
    ``context.bias_attention_interface(module, num_heads)``; a hand-written attention stores
    ``context.bias(num_heads)`` and adds ``self.alibi(L_q, L_k, device=..., dtype=...)`` to its
    scaled scores.

    Args:
        module_class: the class to convert.
        converter: the converter; when omitted, ``register_alibi`` returns a decorator.
        replace: allow replacing an existing registration for ``module_class``.

    Returns:
        ``converter`` (or the decorator).

    Raises:
        TypeError: ``module_class`` is not an ``nn.Module`` subclass or ``converter`` is not callable.
        ValueError: ``module_class`` is already registered and ``replace`` is false.

    Example:
        >>> import torch
        >>> from torch.nn import functional as nnf
        >>> from functional import AlibiBias, apply_alibi
        >>> class MyAttention(nn.Module):
        ...     def __init__(self, dim, heads):
        ...         super().__init__()
        ...         self.heads, self.qkv, self.alibi = heads, nn.Linear(dim, 3 * dim), None
        ...     def forward(self, x):
        ...         b, n, d = x.shape
        ...         q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ...         mask = None if self.alibi is None else self.alibi(n, device=x.device, dtype=x.dtype)
        ...         y = nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ...         return y.transpose(1, 2).reshape(b, n, d)
        >>> @register_alibi(MyAttention)
        ... def _(module, context):
        ...     if isinstance(module.alibi, AlibiBias):
        ...         return False
        ...     module.alibi = context.bias(module.heads)
        ...     return True
        >>> model = apply_alibi(nn.Sequential(MyAttention(8, 2)), max_sequence_length=32)
        >>> model[0].alibi
        AlibiBias(num_heads=2, max_sequence_length=32)
        >>> unregister_alibi(MyAttention)
    """
    if not (isinstance(module_class, type) and issubclass(module_class, nn.Module)):
        raise TypeError(f"module_class must be an nn.Module subclass, got {module_class!r}")

    def add(fn: AlibiConverter) -> AlibiConverter:
        if not callable(fn):
            raise TypeError(
                f"converter must be callable as converter(module, context), got {type(fn).__name__}"
            )
        return _CONVERTERS.register(module_class, fn, replace=replace)

    if converter is None:
        return add
    return add(converter)


def unregister_alibi(module_class: type[nn.Module]) -> None:
    """Remove the ALiBi converter registered for ``module_class`` (built-in ones included).

    Raises:
        KeyError: nothing is registered for ``module_class``.

    Example:
        >>> register_alibi(nn.Identity, lambda module, context: False)
        <function <lambda> at ...>
        >>> unregister_alibi(nn.Identity)
        >>> nn.Identity in alibi_registry()
        False
    """
    _CONVERTERS.unregister(module_class)


def alibi_registry() -> dict[type[nn.Module], AlibiConverter]:
    """A snapshot of the ALiBi registry: class -> converter, in registration order.

    Built-in transformers classes appear once their modeling module has been imported.

    Example:
        >>> nn.TransformerEncoderLayer in alibi_registry()
        True
    """
    return _CONVERTERS.snapshot()


def _lookup(
    converters: Mapping[type[nn.Module], AlibiConverter], cls: type
) -> AlibiConverter | None:
    """The converter of the most specific registered class in ``cls``'s MRO."""
    for klass in cls.__mro__:
        converter = converters.get(klass)
        if converter is not None:
            return converter
    return None


def _supported_names() -> str:
    registered = _CONVERTERS.snapshot()
    names = [f"transformers {family} ({', '.join(classes)})" for family, classes in _FAMILIES]
    names += ["torch.nn.TransformerEncoderLayer", "torch.nn.MultiheadAttention"]
    builtin_classes = {nn.TransformerEncoderLayer, nn.MultiheadAttention}
    builtin_classes |= {cls for cls in registered if cls.__module__.startswith("transformers.")}
    names += [cls.__qualname__ for cls in registered if cls not in builtin_classes]
    return ", ".join(names)


_CONVERTERS.register(nn.TransformerEncoderLayer, _convert_encoder_layer)
_CONVERTERS.register(nn.MultiheadAttention, _convert_multihead_attention)
# (family, module of transformers, ((class, converter), ...)): learned absolute position
# tables and attention dispatched through AttentionInterface. Models with rotary or relative
# positions (Llama, Mistral, Qwen2, T5, ...) are refused by apply_alibi.
_HF_BUILTINS: tuple[tuple[str, str, tuple[tuple[str, AlibiConverter], ...]], ...] = (
    (
        "GPT-2",
        "gpt2",
        (("GPT2Model", _convert_gpt2_model), ("GPT2Attention", _convert_gpt2_attention)),
    ),
    (
        "BERT",
        "bert",
        (
            ("BertEmbeddings", _convert_bert_embeddings),
            ("BertSelfAttention", _convert_bert_self_attention),
        ),
    ),
    (
        "RoBERTa",
        "roberta",
        (
            ("RobertaEmbeddings", _convert_roberta_embeddings),
            ("RobertaSelfAttention", _convert_bert_self_attention),
        ),
    ),
    (
        "XLM-RoBERTa",
        "xlm_roberta",
        (
            ("XLMRobertaEmbeddings", _convert_roberta_embeddings),
            ("XLMRobertaSelfAttention", _convert_bert_self_attention),
        ),
    ),
    (
        "DistilBERT",
        "distilbert",
        (
            ("Embeddings", _convert_distilbert_embeddings),
            ("DistilBertSelfAttention", _convert_distilbert_attention),
        ),
    ),
)
_FAMILIES = tuple((family, [name for name, _c in entries]) for family, _m, entries in _HF_BUILTINS)
for _family, _name, _entries in _HF_BUILTINS:
    for _class_name, _converter in _entries:
        _CONVERTERS.register_lazy(
            f"transformers.models.{_name}.modeling_{_name}", _class_name, _converter
        )
_PRECHECKS.register(_convert_gpt2_attention, _check_gpt2_attention)
_PRECHECKS.register(_convert_bert_self_attention, _check_hf_attention)
_PRECHECKS.register(_convert_distilbert_attention, _check_hf_attention)
