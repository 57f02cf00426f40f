"""The ALiBi model transform: :func:`apply_alibi`."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from functional._args import check_int, check_module
from functional._policies import ModelT, NoEffectReport
from functional._transformer_layers import disable_nested_tensor
from functional.alibi.context import AlibiContext, AlibiConverter
from functional.alibi.modules import AlibiBias
from functional.alibi.registry import _CONVERTERS, _PRECHECKS, _lookup, _supported_names
from surgery import (
    NoEffectWarning,
    OptimizerArg,
    as_optimizer_list,
    check_unwrapped,
    replace_modules,
    update_params_in_optimizer,
)

__all__ = ["apply_alibi"]

_REPORT = NoEffectReport(
    "apply_alibi",
    lambda: (
        "module that ALiBi supports (built in: "
        + _supported_names()
        + "); add one with functional.register_alibi(ModuleClass, converter)"
    ),
    skipped="left these modules without ALiBi: {names}. Register a converter for them with "
    "functional.register_alibi(cls, converter)",
    separator="; ",
)


def apply_alibi(
    model: ModelT,
    max_sequence_length: int,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Replace learned position embeddings by ALiBi attention biases, in place.

    Afterwards the model accepts sequences of up to ``max_sequence_length`` tokens (even past its
    old position table), its learned position embeddings no longer contribute nor train, and
    every self-attention head :math:`h` adds :math:`-m_h |i - j|` to its scaled scores
    (:func:`alibi_slopes`); causal models stay causal, padding masks keep working, and
    cross-attention is left alone.

    Built in: HuggingFace transformers GPT-2 (``GPT2Model``, ``GPT2LMHeadModel``, ... ), BERT
    (``BertModel``, ``BertForMaskedLM``, ... ), RoBERTa, XLM-RoBERTa and DistilBERT (every
    head class), transformers >= 5.0, with the ``"sdpa"`` or ``"eager"`` attention
    implementation; ``nn.TransformerEncoderLayer`` (hence
    ``nn.TransformerEncoder``) and ``nn.MultiheadAttention`` used as self-attention (called as
    ``mha(x, x, x)``). Other architectures: :func:`register_alibi`. Models that encode
    positions with rotary embeddings (Llama, Mistral, Qwen2, ...) or relative biases (T5) are
    refused, never given a second position scheme: a ``NoEffectWarning`` says why, or a
    ``ValueError`` if a converter is registered for one of their modules.

    What changes:

    * Position tables become :class:`DisabledPositionEmbedding`: zeros out, the old table kept as
      a buffer under the same state_dict key (checkpoints from before and after load), no longer
      a parameter -- it leaves ``optimizers`` together with its state.
    * transformers attention modules get a shared :class:`AlibiBias` child ``alibi_bias`` and the
      model's config switches to the registered ``"alibi_sdpa"`` / ``"alibi_eager"`` attention
      function (it merges the bias into the model's own mask, then runs sdpa/eager). To switch
      backend later, use ``model.set_attn_implementation("alibi_eager")`` rather than ``"eager"``.
    * Saving: ``save_pretrained`` stores the weights and the plain config, not ALiBi, so
      ``from_pretrained`` silently gives the plain model, which adds the saved (untrained)
      position table again. Call ``apply_alibi(model, max_sequence_length)`` right after
      ``from_pretrained``, as after building the model: the outputs are then those of the saved
      model. ``torch.save(model.state_dict())`` checkpoints load into a transformed model.
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
    own mask in that dtype; the attention runs as the model's ``"sdpa"``/``"eager"`` would (the
    eager softmax in the scores' dtype: no float32 copy of the attention matrix in a bf16 model).

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

    >>> import torch
    >>> import functional as F
    >>> scaling = 0.25
    >>> batch = {"input_ids": torch.arange(64).view(2, 32), "attention_mask": torch.ones(2, 32)}
    >>> short = F.apply_seq_length_warmup(batch, int(32 * scaling), truncate=False)
    >>> short["input_ids"].shape
    torch.Size([8, 8])

    Evaluate on full-length sequences (up to ``max_sequence_length``): ALiBi extrapolates.

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager); ``torch.jit.script`` cannot compile
    its new layers and raises a ``TypeError`` naming ``torch.export``.

    Args:
        model: the model to transform in place (not wrapped in DDP/FSDP/``torch.compile``).
        max_sequence_length: the longest sequence (keys, including any cache) to accept.
        optimizers: optimizers holding the model's parameters, kept consistent.

    Returns:
        ``model``.

    Raises:
        TypeError: a bad argument, or a wrapped model.
        ValueError: a transformers model using an attention implementation other than
            ``"sdpa"``/``"eager"``; a model with rotary or relative positions where a converter
            matched one of its modules.
        RuntimeError: a transformers release older than 5.0.

    Warns:
        NoEffectWarning: nothing in the model is supported (the message lists what is and how to
            register more), the model has rotary or relative positions, the model already uses
            ALiBi, or some modules were left unconverted.

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

    matches = _converters_for(model)  # validates everything before changing anything
    if _refuse_other_position_scheme(model, matches):
        return model
    context = AlibiContext(model, max_sequence_length)
    changed = context._limits_changed
    params_before = list(model.parameters()) if opts else []
    for module, converter in reversed(matches):  # innermost first
        changed |= bool(converter(module, context))
    if context._replacements:
        replace_modules(model, context._replacements, optimizers=opts)
    _drop_removed_parameters(model, params_before, opts)
    disable_nested_tensor(model)

    already = None
    if not changed and any(isinstance(m, AlibiBias) for m in model.modules()):
        already = f"the model already uses ALiBi with max_sequence_length={max_sequence_length}"
    _REPORT.warn(changed=changed, skipped=context._skipped, already=already)
    return model


def _drop_removed_parameters(
    model: nn.Module, params_before: list[nn.Parameter], opts: list[torch.optim.Optimizer]
) -> None:
    """Parameters a converter removed in place (not through ``context.replace_module``, which
    the engine handles) leave the optimizers with their state, as the engine's own do."""
    remaining = {id(p) for p in model.parameters()}
    removed = [p for p in params_before if id(p) not in remaining]
    if removed:
        update_params_in_optimizer(removed, [], opts)


def _converters_for(model: nn.Module) -> list[tuple[nn.Module, AlibiConverter]]:
    """Every module of ``model`` with a registered converter, outermost first, prechecked."""
    converters = _CONVERTERS.snapshot()
    matches: list[tuple[nn.Module, AlibiConverter]] = []
    for module in model.modules():
        converter = _lookup(converters, type(module))
        if converter is not None:
            matches.append((module, converter))
    for module, converter in matches:
        precheck = _PRECHECKS.lookup(converter)
        if precheck is not None:
            precheck(module)
    return matches


def _other_position_scheme(model: nn.Module) -> str | None:
    """How ``model`` encodes positions when it is not with a learned absolute table: rotary
    embeddings (transformers' ``*RotaryEmbedding`` modules: Llama, Mistral, Qwen2, ...) or
    relative attention biases (T5's ``relative_attention_bias``); ``None`` otherwise."""
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RotaryEmbedding"):
            return f"rotary position embeddings ({name})"
        if isinstance(getattr(module, "relative_attention_bias", None), nn.Embedding):
            return f"relative position biases ({name}.relative_attention_bias)"
    return None


def _refuse_other_position_scheme(
    model: nn.Module, matches: list[tuple[nn.Module, AlibiConverter]]
) -> bool:
    """Refuse a model that encodes positions with rotary embeddings or relative biases: ALiBi on
    top would give it two position schemes. Warns (and returns ``True``) when nothing in it has
    a converter; raises ``ValueError`` when something has one (a user's registration)."""
    scheme = _other_position_scheme(model)
    if scheme is None:
        return False
    reason = (
        f"{type(model).__name__} encodes positions with {scheme}; ALiBi replaces learned "
        "absolute position tables, and adding it here would give the model two position schemes"
    )
    if matches:
        names = sorted({type(module).__qualname__ for module, _c in matches})
        raise ValueError(
            f"apply_alibi refuses {reason} (converters are registered for {', '.join(names)}); "
            "ALiBi needs a model without rotary or relative positions"
        )
    warnings.warn(f"apply_alibi changed nothing: {reason}", NoEffectWarning, stacklevel=3)
    return True
