"""ALiBi attention for HuggingFace transformers: the attention functions and their registration.

Covered from transformers 5.0 (tested on 5.24). The integration uses only the extension points
transformers documents: an attention function registered in its ``AttentionInterface``
(``"alibi_sdpa"`` / ``"alibi_eager"``, which wrap the ``"sdpa"`` and ``"eager"``
implementations), the matching entry of ``AttentionMaskInterface``, and additive 4-D masks. No
private method of any model is patched, so model code that dispatches attention through
``ALL_ATTENTION_FUNCTIONS`` works unchanged. Older transformers releases are refused with a
``RuntimeError`` that says so. transformers is imported only when a transformers model is
converted or run (this module imports nothing of it at import time). The per-model converters
that use these are in :mod:`functional.alibi.huggingface`; :class:`AlibiContext` calls
:func:`_bias_attention_interface`, so this module knows nothing of the context.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as nnf

from functional.alibi.modules import AlibiBias

_BIAS_ATTR = "alibi_bias"
_HF_NAMES = {"sdpa": "alibi_sdpa", "eager": "alibi_eager"}
_HF_BASES = {name: base for base, name in _HF_NAMES.items()}
_MIN_TRANSFORMERS = (5, 0)
_hf_registered = False


def _transformers_version() -> tuple[int, int]:
    import transformers

    parts = transformers.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return 0, 0


def _check_transformers() -> None:
    import transformers

    if _transformers_version() < _MIN_TRANSFORMERS:
        raise RuntimeError(
            f"apply_alibi supports HuggingFace transformers >= "
            f"{'.'.join(map(str, _MIN_TRANSFORMERS))} (it relies on AttentionInterface and "
            f"AttentionMaskInterface); transformers {transformers.__version__} is installed. "
            "Upgrade transformers (pip install -U transformers)."
        )
    try:
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
        from transformers.modeling_utils import AttentionInterface  # noqa: F401
    except ImportError as error:  # pragma: no cover - guarded by the version check
        raise RuntimeError(
            "apply_alibi needs transformers.modeling_utils.AttentionInterface and "
            f"transformers.masking_utils.AttentionMaskInterface, which this installation lacks: {error}"
        ) from None


def _register_hf_attention() -> None:
    """Register ``alibi_sdpa`` / ``alibi_eager`` with transformers (once per process)."""
    global _hf_registered
    if _hf_registered:
        return
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(_HF_NAMES["sdpa"], _alibi_sdpa_attention)
    AttentionInterface.register(_HF_NAMES["eager"], _alibi_eager_attention)
    AttentionMaskInterface.register(_HF_NAMES["sdpa"], ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    AttentionMaskInterface.register(_HF_NAMES["eager"], ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    _hf_registered = True


def _dispatches_through_interface(cls: type) -> bool:
    """Whether the class's ``forward`` comes from a module that uses ``ALL_ATTENTION_FUNCTIONS``."""
    for klass in cls.__mro__:
        if "forward" in vars(klass):
            module = sys.modules.get(klass.__module__)
            return module is not None and hasattr(module, "ALL_ATTENTION_FUNCTIONS")
    return False


def _check_hf_attention(attention: nn.Module) -> str:
    """Validate an attention module for the HF integration; return its base implementation."""
    _check_transformers()
    cls = type(attention)
    if not _dispatches_through_interface(cls):
        raise TypeError(
            f"{cls.__qualname__} does not dispatch attention through transformers' "
            "AttentionInterface (ALL_ATTENTION_FUNCTIONS), so apply_alibi cannot add the bias "
            "to it; register a converter for it with register_alibi"
        )
    config = getattr(attention, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise TypeError(
            f"{cls.__qualname__} has no transformers `config` to select the attention "
            "implementation with"
        )
    current = config._attn_implementation
    if current is None:
        return "eager"
    if current in _HF_BASES:
        return _HF_BASES[current]
    if current in _HF_NAMES:
        return current
    raise ValueError(
        f"apply_alibi supports the 'sdpa' and 'eager' attention implementations, but "
        f"{cls.__qualname__} uses {current!r}; call model.set_attn_implementation('sdpa') "
        "before apply_alibi"
    )


def _hf_mask(
    module: nn.Module,
    bias_module: AlibiBias,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    implicit_causal: bool,
) -> torch.Tensor:
    """Merge the ALiBi bias into transformers' attention mask (``None``, boolean or additive)."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    if query.shape[1] != bias_module.num_heads:
        raise ValueError(
            f"{type(module).__qualname__} computes {query.shape[1]} heads but its ALiBi bias "
            f"has {bias_module.num_heads}"
        )
    dtype = query.dtype
    bias = bias_module(q_len, k_len, causal=implicit_causal, device=query.device, dtype=dtype)
    if attention_mask is None:
        return bias.unsqueeze(0)
    lowest = torch.finfo(dtype).min
    if attention_mask.dtype == torch.bool:  # True = attend
        return torch.where(attention_mask, bias, lowest)
    return (attention_mask.to(dtype) + bias).clamp_min(lowest)


def _alibi_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    bias_module = module._modules.get(_BIAS_ATTR)
    if not isinstance(bias_module, AlibiBias):  # e.g. cross-attention: no ALiBi
        return sdpa(module, query, key, value, attention_mask, **kwargs)
    implicit_causal = False
    if attention_mask is None:  # sdpa's convention: no mask means "use is_causal"
        is_causal = kwargs.get("is_causal")
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        implicit_causal = bool(is_causal) and query.shape[-2] > 1
    mask = _hf_mask(module, bias_module, query, key, attention_mask, implicit_causal)
    kwargs.pop("is_causal", None)
    return sdpa(module, query, key, value, mask, **kwargs)


def _alibi_eager_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    bias_module = module._modules.get(_BIAS_ATTR)
    if isinstance(bias_module, AlibiBias):
        # transformers' eager masks are always materialised: no mask means no masking.
        attention_mask = _hf_mask(module, bias_module, query, key, attention_mask, False)
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    # As transformers' own eager attention: softmax in the scores' dtype (the model's, or the
    # one autocast picks for softmax), then the value's dtype (GPT-2's downcast; a no-op else).
    # No float32 copy of the (B, H, L_q, L_k) matrix in a bf16/fp16 model.
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    weights = nnf.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def _bias_attention_interface(
    attention: nn.Module, num_heads: int, bias: Callable[[int], AlibiBias]
) -> bool:
    """The body of :meth:`AlibiContext.bias_attention_interface` (``bias`` hands out the shared bias)."""
    base = _check_hf_attention(attention)
    _register_hf_attention()
    changed = False
    existing = attention._modules.get(_BIAS_ATTR)
    if isinstance(existing, AlibiBias):
        if existing.num_heads != num_heads:
            raise ValueError(
                f"{type(attention).__qualname__} already has an ALiBi bias for "
                f"{existing.num_heads} heads, not {num_heads}"
            )
    else:
        setattr(attention, _BIAS_ATTR, bias(num_heads))
        changed = True
    target = _HF_NAMES[base]
    config: Any = attention.config  # a transformers PretrainedConfig (checked above)
    if config._attn_implementation != target:
        config._attn_implementation = target
        changed = True
    return changed
