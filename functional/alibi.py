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

Layout of this module: the pure ops (:func:`alibi_slopes`, :func:`alibi_bias`), the modules
(:class:`AlibiBias`, the cached bias shared by all layers; :class:`DisabledPositionEmbedding`;
:class:`AlibiMultiheadAttention`), the HuggingFace integration, the public registry
(:func:`register_alibi`, :class:`AlibiContext`), the built-in converters and :func:`apply_alibi`.

HuggingFace transformers: covered from 5.0 (tested on 5.24). The integration uses only the
extension points transformers documents: an attention function registered in its
``AttentionInterface`` (``"alibi_sdpa"`` / ``"alibi_eager"``, which wrap the ``"sdpa"`` and
``"eager"`` implementations), the matching entry of ``AttentionMaskInterface``, and additive
4-D masks. No private method of any model is patched, so model code that dispatches attention
through ``ALL_ATTENTION_FUNCTIONS`` works unchanged. Older transformers releases are refused
with a ``RuntimeError`` that says so.

Reference: O. Press, N. A. Smith, M. Lewis. *Train Short, Test Long: Attention with Linear
Biases Enables Input Length Extrapolation.* ICLR 2022. https://arxiv.org/abs/2108.12409
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeAlias

import torch
import torch.nn.functional as F
from torch import nn

from functional._args import check_int, check_module
from functional._numeric import accumulation_dtype
from functional._policies import warn_no_effect
from functional._transformer_layers import (
    ModularTransformerEncoderLayer,
    disable_nested_tensor,
    make_modular,
)
from surgery import NoEffectWarning, replace_module_classes, update_params_in_optimizer
from surgery._types import OptimizerArg, as_optimizer_list
from surgery.replace import check_unwrapped

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

# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------


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


def _same_device(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and (
        device.index is None or tensor.device.index == device.index
    )


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------


class AlibiBias(nn.Module):
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
        if key_length > self.max_sequence_length:
            raise ValueError(
                f"sequence length {key_length} exceeds the max_sequence_length="
                f"{self.max_sequence_length} this model was given by apply_alibi; call "
                "apply_alibi(model, max_sequence_length=...) again with a larger value"
            )
        if query_length > key_length:
            raise ValueError(f"query_length ({query_length}) must be <= key_length ({key_length})")
        name = "causal_bias" if causal else "bias"
        cached = getattr(self, name)
        if torch.compiler.is_compiling():
            # Filling the cache inside a compiled graph would be a module mutation that dynamo
            # guards on (the buffer goes from None to a tensor), so the second step would
            # recompile. Traced, the bias is a few fused elementwise ops on iota: build it in
            # the graph from the sizes, and leave the eager cache alone.
            if device is None:
                device = cached.device if cached is not None else torch.device("cpu")
            if dtype is None:
                dtype = cached.dtype if cached is not None else torch.float32
            table = _bias_table(self.num_heads, key_length, causal, torch.device(device), dtype)
            return table[:, key_length - query_length :] if not causal else table[:, :query_length]
        if device is None:
            device = cached.device if cached is not None else torch.device("cpu")
        device = torch.device(device)
        if dtype is None:
            dtype = cached.dtype if cached is not None else torch.float32
        if (
            cached is None
            or cached.shape[-1] < key_length
            or cached.dtype != dtype
            or not _same_device(cached, device)
        ):
            size = key_length
            if cached is not None:
                grow = 2 * cached.shape[-1] if cached.shape[-1] < key_length else cached.shape[-1]
                size = min(self.max_sequence_length, max(key_length, grow))
            cached = self._build(size, causal, device, dtype)
            setattr(self, name, cached)
        if causal:
            return cached[:, :query_length, :key_length]
        return cached[:, key_length - query_length : key_length, :key_length]

    def _build(
        self, size: int, causal: bool, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        # A cache built under inference_mode must stay usable for training afterwards.
        with torch.inference_mode(False), torch.no_grad():
            return _bias_table(self.num_heads, size, causal, device, dtype)


def _bias_table(
    num_heads: int, size: int, causal: bool, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """The (H, size, size) bias; with ``causal``, keys after the query at the dtype's lowest."""
    bias = alibi_bias(num_heads, size, device=device, dtype=dtype)
    if causal:
        future = torch.ones(size, size, dtype=torch.bool, device=device).triu_(1)
        bias = bias.masked_fill(future, torch.finfo(dtype).min)
    return bias


class DisabledPositionEmbedding(nn.Module):
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


class AlibiMultiheadAttention(nn.MultiheadAttention):
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

    def forward(  # type: ignore[override]
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


# ---------------------------------------------------------------------------------------------
# HuggingFace transformers integration (AttentionInterface + AttentionMaskInterface)
# ---------------------------------------------------------------------------------------------

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
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


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
        self._replacements: dict[int, nn.Module] = {}
        self._originals: list[nn.Module] = []
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

        Parameters of ``old`` that ``new`` does not hold leave the optimizers with their state;
        new parameters join the param group of ``old``'s.
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
        if id(old) not in self._replacements:
            self._originals.append(old)  # keeps id(old) valid until the engine runs
        self._replacements[id(old)] = new

    def disable_position_embedding(self, embedding: nn.Module) -> bool:
        """Switch off a learned position-embedding table (see :class:`DisabledPositionEmbedding`).

        Returns whether anything changed (``False`` for a table already switched off).
        """
        if isinstance(embedding, DisabledPositionEmbedding) or id(embedding) in self._replacements:
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
            setattr(attention, _BIAS_ATTR, self.bias(num_heads))
            changed = True
        target = _HF_NAMES[base]
        config = attention.config
        if config._attn_implementation != target:
            config._attn_implementation = target
            changed = True
        return changed


AlibiConverter: TypeAlias = Callable[[nn.Module, AlibiContext], bool]
"""Converts one module for ALiBi, in place or via ``context.replace_module``; returns whether it changed anything."""

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
        >>> class MyAttention(nn.Module):
        ...     def __init__(self, dim, heads):
        ...         super().__init__()
        ...         self.heads, self.qkv, self.alibi = heads, nn.Linear(dim, 3 * dim), None
        ...     def forward(self, x):
        ...         b, n, d = x.shape
        ...         q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ...         mask = None if self.alibi is None else self.alibi(n, device=x.device, dtype=x.dtype)
        ...         y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
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


# ---------------------------------------------------------------------------------------------
# Built-in converters
# ---------------------------------------------------------------------------------------------


def _convert_gpt2_model(model: nn.Module, context: AlibiContext) -> bool:
    return context.disable_position_embedding(model.wpe)


def _convert_gpt2_attention(attention: nn.Module, context: AlibiContext) -> bool:
    if getattr(attention, "is_cross_attention", False):
        return False  # ALiBi biases self-attention only
    return context.bias_attention_interface(attention, attention.num_heads)


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
    changed = context.disable_position_embedding(embeddings.position_embeddings)
    # BertEmbeddings slices these (1, max_position_embeddings) buffers by sequence length.
    changed |= _grow_buffer(embeddings, "position_ids", context.max_sequence_length, True)
    changed |= _grow_buffer(embeddings, "token_type_ids", context.max_sequence_length, False)
    return changed


def _convert_bert_self_attention(attention: nn.Module, context: AlibiContext) -> bool:
    return context.bias_attention_interface(attention, attention.num_attention_heads)


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


# ---------------------------------------------------------------------------------------------
# Transform
# ---------------------------------------------------------------------------------------------


def apply_alibi(
    model: nn.Module,
    max_sequence_length: int,
    optimizers: OptimizerArg = None,
) -> nn.Module:
    """Replace learned position embeddings by ALiBi attention biases, in place.

    Afterwards the model accepts sequences of up to ``max_sequence_length`` tokens (even past its
    old position table), its learned position embeddings no longer contribute nor train, and
    every self-attention head :math:`h` adds :math:`-m_h |i - j|` to its scaled scores
    (:func:`alibi_slopes`); causal models stay causal, padding masks keep working, and
    cross-attention is left alone.

    Built in: HuggingFace transformers GPT-2 (``GPT2Model``, ``GPT2LMHeadModel``, ... ) and BERT
    (``BertModel``, ``BertForMaskedLM``, ... ), transformers >= 5.0, with the ``"sdpa"`` or
    ``"eager"`` attention implementation; ``nn.TransformerEncoderLayer`` (hence
    ``nn.TransformerEncoder``) and ``nn.MultiheadAttention`` used as self-attention (called as
    ``mha(x, x, x)``). Other architectures: :func:`register_alibi`.

    What changes:

    * Position tables become :class:`DisabledPositionEmbedding`: zeros out, the old table kept as
      a buffer under the same state_dict key (checkpoints from before and after load), no longer
      a parameter -- it leaves ``optimizers`` together with its state.
    * transformers attention modules get a shared :class:`AlibiBias` child ``alibi_bias`` and the
      model's config switches to the registered ``"alibi_sdpa"`` / ``"alibi_eager"`` attention
      function (it merges the bias into the model's own mask, then runs sdpa/eager). This setting
      is not saved by ``save_pretrained``: re-apply ALiBi after loading. To switch backend later,
      use ``model.set_attn_implementation("alibi_eager")`` rather than ``"eager"``.
    * ``nn.MultiheadAttention`` becomes :class:`AlibiMultiheadAttention` and
      ``nn.TransformerEncoderLayer`` a layer without the fused fast path (same object, same
      parameters); ``nn.TransformerEncoder`` stops converting inputs to nested tensors.
    * BERT's ``position_ids``/``token_type_ids`` buffers grow to ``max_sequence_length``.

    The bias is built on the model's device and dtype once per length and shared by all layers.
    The transform is idempotent; calling it again with another ``max_sequence_length`` only
    changes the limit. Longer inputs raise ``ValueError`` from the attention layers (for BERT,
    transformers' embeddings reject them first, with a shape error). With a key/value cache, the
    queries are taken to be the last positions of the cache, which is exact for transformers'
    ``DynamicCache``; with a ``StaticCache`` the bias is off by a per-row constant that the
    softmax removes, which costs precision in half precision with long caches. GPT-2's ``reorder_and_upcast_attn`` option does not apply to
    the ALiBi attention functions.

    Under ``torch.compile`` the bias is computed inside the graph from the sequence lengths
    (a few elementwise ops that the compiler fuses into the mask) instead of being read from the
    eager cache, so a compiled training step builds one graph and does not recompile; a new
    sequence length is a new shape (one more graph, or a dynamic-shape one). Under autocast the
    bias is built in the dtype of the queries (the autocast dtype) and merged into the model's
    own mask in that dtype; the attention runs as the model's ``"sdpa"``/``"eager"`` would.

    Porting from Composer's ``apply_alibi`` (the seed's parameters):

    * ``heads_per_layer``: inferred from each attention module (its ``num_heads`` or config);
      layers with different head counts each get their own slopes.
    * ``max_sequence_length``: the same argument, the same meaning.
    * ``position_embedding_attribute``: found by the converter of the model class
      (``transformer.wpe`` for GPT-2, ``embeddings.position_embeddings`` for BERT); for other
      models call ``context.disable_position_embedding(table)`` in a converter given to
      :func:`register_alibi`.
    * ``attention_module`` and ``attr_to_replace``: the registry key -- :func:`register_alibi`
      maps an attention class to a converter; no method is patched by name.
    * ``alibi_attention``: built in, transformers' ``AttentionInterface`` functions
      ``"alibi_sdpa"``/``"alibi_eager"`` (above); in a custom converter,
      ``context.bias(num_heads)`` gives the shared :class:`AlibiBias` to add to the scores.
    * ``mask_replacement_function``: not needed -- the bias is merged into the model's own mask,
      and position-id buffers grow to ``max_sequence_length``.
    * ``train_sequence_length_scaling``: a data-side recipe, not a model change (below).

    The seed's ``train_sequence_length_scaling`` (train on sequences ``scaling`` times as long,
    reshaping a ``(batch, L)`` batch to ``(batch / scaling, L * scaling)`` so no token is lost)
    is :func:`apply_seq_length_warmup` with ``truncate=False``, applied to every training batch:

    >>> import functional as F
    >>> scaling = 0.25
    >>> batch = {"input_ids": torch.arange(64).view(2, 32), "attention_mask": torch.ones(2, 32)}
    >>> short = F.apply_seq_length_warmup(batch, int(32 * scaling), truncate=False)
    >>> short["input_ids"].shape
    torch.Size([8, 8])

    Evaluate on full-length sequences (up to ``max_sequence_length``): ALiBi extrapolates.

    Args:
        model: the model to transform in place (not wrapped in DDP/FSDP/``torch.compile``).
        max_sequence_length: the longest sequence (keys, including any cache) to accept.
        optimizers: optimizers holding the model's parameters, kept consistent.

    Returns:
        ``model``.

    Raises:
        TypeError: a bad argument, or a wrapped model.
        ValueError: a transformers model using an attention implementation other than
            ``"sdpa"``/``"eager"``.
        RuntimeError: a transformers release older than 5.0.

    Warns:
        NoEffectWarning: nothing in the model is supported (the message lists what is and how to
            register more), the model already uses ALiBi, or some modules were left unconverted.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> config = GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2)
        >>> model = apply_alibi(GPT2LMHeadModel(config), max_sequence_length=128)
        >>> model(torch.randint(0, 50, (1, 100))).logits.shape
        torch.Size([1, 100, 50])

    Reference: Press et al. 2022, https://arxiv.org/abs/2108.12409
    """
    check_module(model)
    check_unwrapped(model)
    max_sequence_length = check_int(max_sequence_length, "max_sequence_length", minimum=1)
    opts = as_optimizer_list(optimizers)
    _resolve_builtins()

    matches: list[tuple[nn.Module, AlibiConverter]] = []
    for module in model.modules():
        converter = _lookup(type(module))
        if converter is not None:
            matches.append((module, converter))
    for module, converter in matches:  # validate everything before changing anything
        precheck = _PRECHECKS.get(converter)
        if precheck is not None:
            precheck(module)

    context = AlibiContext(model, max_sequence_length)
    params_before = list(model.parameters())
    changed = context._limits_changed
    for module, converter in reversed(matches):  # innermost first
        changed |= bool(converter(module, context))
    if context._replacements:
        targets = context._replacements
        replace_module_classes(
            model, {nn.Module: lambda module, _index: targets.get(id(module))}, optimizers=opts
        )
    remaining = {id(p) for p in model.parameters()}
    removed = [p for p in params_before if id(p) not in remaining]
    if removed and opts:
        update_params_in_optimizer(removed, [], opts)
    disable_nested_tensor(model)

    if context._skipped:
        warnings.warn(
            "apply_alibi left these modules without ALiBi: "
            + "; ".join(sorted(set(context._skipped)))
            + ". Register a converter for them with functional.register_alibi(cls, converter)",
            NoEffectWarning,
            stacklevel=2,
        )
    if not changed:
        if any(isinstance(m, AlibiBias) for m in model.modules()):
            warnings.warn(
                "apply_alibi changed nothing: the model already uses ALiBi with "
                f"max_sequence_length={max_sequence_length}",
                NoEffectWarning,
                stacklevel=2,
            )
        elif not context._skipped:
            warn_no_effect(
                "apply_alibi",
                "module that ALiBi supports (built in: "
                + _supported_names()
                + "); add one with functional.register_alibi(ModuleClass, converter)",
            )
    return model
