"""The ALiBi converter registry: which converter :func:`apply_alibi` calls for which class.

Built-in entries: ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` at import; the
transformers classes (GPT-2, BERT) once their modeling module has been imported, so that
importing this package never imports transformers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from torch import nn

from functional.alibi.context import AlibiConverter
from functional.alibi.huggingface import (
    _check_gpt2_attention,
    _check_hf_attention,
    _convert_bert_embeddings,
    _convert_bert_self_attention,
    _convert_gpt2_attention,
    _convert_gpt2_model,
)
from functional.alibi.torch_layers import _convert_encoder_layer, _convert_multihead_attention

__all__ = ["alibi_registry", "register_alibi", "unregister_alibi"]

_REGISTRY: dict[type[nn.Module], AlibiConverter] = {}
# Built-ins for transformers classes, resolved once their modeling module has been imported.
_LAZY_BUILTINS: dict[tuple[str, str], AlibiConverter] = {}
_REMOVED_BUILTINS: set[tuple[str, str]] = set()
_RESOLVED_BUILTINS: set[tuple[str, str]] = set()
_PRECHECKS: dict[AlibiConverter, Callable[[nn.Module], object]] = {}


def _resolve_builtins() -> None:
    for (module_name, class_name), converter in _LAZY_BUILTINS.items():
        key = (module_name, class_name)
        if key in _RESOLVED_BUILTINS or key in _REMOVED_BUILTINS:
            continue
        module = sys.modules.get(module_name)
        if module is None:
            continue
        _RESOLVED_BUILTINS.add(key)
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            _REGISTRY.setdefault(cls, converter)


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
    ``BertEmbeddings``, ``BertSelfAttention``; ``nn.TransformerEncoderLayer``,
    ``nn.MultiheadAttention``) and can be replaced with ``replace=True``.

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
        _resolve_builtins()
        if module_class in _REGISTRY and not replace:
            raise ValueError(
                f"{module_class.__qualname__} already has an ALiBi converter; pass replace=True "
                "to replace it"
            )
        _REGISTRY[module_class] = fn
        return fn

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
    _resolve_builtins()
    if module_class not in _REGISTRY:
        name = getattr(module_class, "__qualname__", repr(module_class))
        raise KeyError(f"no ALiBi converter is registered for {name}")
    converter = _REGISTRY.pop(module_class)
    for key, builtin in _LAZY_BUILTINS.items():
        if builtin is converter and key[1] == module_class.__name__:
            _REMOVED_BUILTINS.add(key)


def alibi_registry() -> dict[type[nn.Module], AlibiConverter]:
    """A snapshot of the ALiBi registry: class -> converter, in registration order.

    Built-in transformers classes appear once their modeling module has been imported.

    Example:
        >>> nn.TransformerEncoderLayer in alibi_registry()
        True
    """
    _resolve_builtins()
    return dict(_REGISTRY)


def _lookup(cls: type) -> AlibiConverter | None:
    for klass in cls.__mro__:
        converter = _REGISTRY.get(klass)
        if converter is not None:
            return converter
    return None


def _supported_names() -> str:
    names = ["transformers GPT-2 (GPT2Model, GPT2Attention)"]
    names.append("transformers BERT (BertEmbeddings, BertSelfAttention)")
    names += ["torch.nn.TransformerEncoderLayer", "torch.nn.MultiheadAttention"]
    builtin_classes = {nn.TransformerEncoderLayer, nn.MultiheadAttention}
    builtin_classes |= {cls for cls in _REGISTRY if cls.__module__.startswith("transformers.")}
    names += [cls.__qualname__ for cls in _REGISTRY if cls not in builtin_classes]
    return ", ".join(names)


_REGISTRY[nn.TransformerEncoderLayer] = _convert_encoder_layer
_REGISTRY[nn.MultiheadAttention] = _convert_multihead_attention
_LAZY_BUILTINS[("transformers.models.gpt2.modeling_gpt2", "GPT2Model")] = _convert_gpt2_model
_LAZY_BUILTINS[("transformers.models.gpt2.modeling_gpt2", "GPT2Attention")] = (
    _convert_gpt2_attention
)
_LAZY_BUILTINS[("transformers.models.bert.modeling_bert", "BertEmbeddings")] = (
    _convert_bert_embeddings
)
_LAZY_BUILTINS[("transformers.models.bert.modeling_bert", "BertSelfAttention")] = (
    _convert_bert_self_attention
)
_PRECHECKS[_convert_gpt2_attention] = _check_gpt2_attention
_PRECHECKS[_convert_bert_self_attention] = _check_hf_attention
