"""Gated linear units in transformer feed-forward blocks (Dauphin et al. 2017; Shazeer 2020).

A transformer feed-forward block computes :math:`W_2\\,\\sigma(W_1 x + b_1) + b_2`. The gated variant
multiplies the hidden activation by a second, linear projection of the same input:

.. math::

    \\mathrm{FFN}_{\\mathrm{GLU}}(x) = W_2\\big(\\sigma(W_g x + b_g) \\odot (W_1 x + b_1)\\big) + b_2 ,

where :math:`\\sigma` is the activation (GELU gives GEGLU, SiLU gives SwiGLU, sigmoid the original
GLU). Here the *value* path :math:`W_1 x + b_1` is the block's original first projection -- the
very same parameters, so pretrained weights and optimizer state carry over -- and the *gate*
path :math:`W_g` is new. Dropout, the output projection, the residual connection and the
LayerNorm of the block are untouched.

Reference: N. Shazeer. *GLU Variants Improve Transformer.* 2020. https://arxiv.org/abs/2002.05202;
Y. N. Dauphin et al. *Language Modeling with Gated Convolutional Networks.* ICML 2017.
"""

# Long file: one algorithm kept whole: the layer, its registry of feed-forward blocks and the
# transform that finds, gates and reports them; a module docstring with the maths.

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn
from torch.nn import functional as nnf

from functional._args import check_bool, check_generator, check_module
from functional._composition import refuse_composite
from functional._deploy import NotScriptable
from functional._policies import ModelT, NoEffectReport, settle_new_parameters
from functional._registry import Registry
from functional._transformer_layers import (
    ModularTransformerEncoderLayer,
    disable_nested_tensor,
    make_modular,
)
from surgery import (
    OptimizerArg,
    as_optimizer_list,
    check_unwrapped,
    fill_missing_entries,
    replace_modules,
)

__all__ = [
    "GatedLinear",
    "apply_gated_linear_units",
    "glu_block_registry",
    "register_glu_block",
    "unregister_glu_block",
]

Activation = Callable[[torch.Tensor], torch.Tensor]

_ACTIVATIONS: dict[str, Activation] = {
    "gelu": nnf.gelu,
    "relu": nnf.relu,
    "silu": nnf.silu,
    "swish": nnf.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


class GatedLinear(NotScriptable, nn.Linear):
    """A linear layer whose output is gated: :math:`\\sigma(x W_g^T + b_g) \\odot (x W^T + b)`.

    ``weight`` and ``bias`` are the value path (an ``nn.Linear``'s own, so a converted layer
    keeps its state_dict keys); ``gate`` is an ``nn.Linear`` of the same shape and ``activation``
    is applied to the gate only. See :func:`apply_gated_linear_units`.

    Args:
        in_features: input features.
        out_features: output features (of both paths).
        bias: whether the value path has a bias.
        gate_bias: whether the gate path has a bias.
        activation: the gate's activation :math:`\\sigma`.

    Shape:
        - input: :math:`(*, H_{in})`
        - output: :math:`(*, H_{out})`

    Autocast:
        Both projections follow autocast's rule for ``linear`` (the autocast dtype); the
        activation and the product keep that dtype, so the output is in the autocast dtype, as
        an ``nn.Linear``'s would be. Outside autocast everything runs in the weights' dtype.

    Example:
        >>> layer = GatedLinear.from_linear(nn.Linear(4, 8), nn.functional.gelu)
        >>> layer(torch.randn(2, 4)).shape
        torch.Size([2, 8])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        gate_bias: bool = False,
        activation: Activation = nnf.gelu,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.gate = nn.Linear(in_features, out_features, bias=gate_bias, device=device, dtype=dtype)
        self.activation = activation

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        activation: Activation,
        *,
        gate_bias: bool = False,
        value_bias: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> GatedLinear:
        """Gate an existing ``nn.Linear``: its parameters become the value path (shared, not copied).

        The new gate weights are drawn from :math:`\\mathcal{N}(0, s^2)`, :math:`s` the standard
        deviation of ``linear.weight`` (``1/sqrt(in_features)`` if that is zero or undefined), so
        the gate's pre-activations have the value path's scale; the gate bias starts at zero.
        ``value_bias`` ``None`` keeps the layer's bias as it is, ``False`` drops it, ``True`` adds a
        zero bias where there was none.
        """
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        bias = linear.bias if value_bias is None or value_bias else None
        if value_bias and bias is None:
            bias = nn.Parameter(linear.weight.new_zeros(linear.out_features))
        new.register_parameter("bias", bias)
        weight = linear.weight
        gate = nn.Linear(
            linear.in_features,
            linear.out_features,
            bias=gate_bias,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            if weight.is_meta:  # shape-only model building: no values to draw or read
                std = math.nan
            elif weight.numel() > 1:  # once, at conversion (not per step)
                std = float(weight.detach().float().std())
            else:
                std = math.nan
            if not math.isfinite(std) or std == 0.0:
                std = 1.0 / math.sqrt(max(linear.in_features, 1))
            if not weight.is_meta:
                device = generator.device if generator is not None else weight.device
                sample = torch.empty(gate.weight.shape, dtype=torch.float32, device=device)
                sample.normal_(0.0, std, generator=generator)
                gate.weight.copy_(sample)
                if gate.bias is not None:
                    gate.bias.zero_()
        new.gate = gate
        new.activation = activation
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.activation(self.gate(input)) * nnf.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        name = getattr(self.activation, "__name__", type(self.activation).__name__)
        return f"{super().extra_repr()}, activation={name}"

    def surgery_remap_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
        """Adapt a pre-surgery checkpoint of the ``nn.Linear`` this layer replaced (in place)."""
        if self.bias is None:
            state_dict.pop(prefix + "bias", None)
        fill_missing_entries(state_dict, self, prefix, self.state_dict().keys())


def _check_block_entry(block_class: type[nn.Module], attributes: tuple[str, str]) -> None:
    if not (isinstance(block_class, type) and issubclass(block_class, nn.Module)):
        raise TypeError(f"block_class must be an nn.Module subclass, got {block_class!r}")
    for name, value in zip(("linear", "activation"), attributes, strict=True):
        if not (isinstance(value, str) and value.isidentifier()):
            raise TypeError(f"{name} must be an attribute name (a str), got {value!r}")


# The feed-forward blocks gated besides nn.TransformerEncoderLayer: block class -> (attribute of
# its first projection, attribute of its activation). The transformers entries are lazy: they
# resolve once their modeling module has been imported (this never imports transformers).
_FEED_FORWARD_BLOCKS: Registry[type[nn.Module], tuple[str, str]] = Registry(
    "gated-linear-unit block", check=_check_block_entry
)
for _module, _class, _linear, _activation in (
    ("bert", "BertIntermediate", "dense", "intermediate_act_fn"),
    ("roberta", "RobertaIntermediate", "dense", "intermediate_act_fn"),
    ("xlm_roberta", "XLMRobertaIntermediate", "dense", "intermediate_act_fn"),
    ("distilbert", "FFN", "lin1", "activation"),
):
    _FEED_FORWARD_BLOCKS.register_lazy(
        f"transformers.models.{_module}.modeling_{_module}", _class, (_linear, _activation)
    )


def register_glu_block(
    block_class: type[nn.Module], linear: str, activation: str, *, replace: bool = False
) -> None:
    """Teach :func:`apply_gated_linear_units` a feed-forward block: gate ``block.<linear>``.

    Every module of the model whose class is ``block_class`` or a subclass of it (the most
    specific registered class wins) has its first projection ``getattr(block, linear)`` (an
    ``nn.Linear``) replaced by a :class:`GatedLinear`, and its activation
    ``getattr(block, activation)`` moved onto the gate (the block's attribute becomes
    ``nn.Identity``). The block's ``forward`` must compute ``activation(linear(x))`` and pass it
    on. The built-in entries (transformers ``BertIntermediate``, ``RobertaIntermediate``,
    ``XLMRobertaIntermediate``, DistilBERT's ``FFN``) are entries like any other: see them with
    :func:`glu_block_registry`, remove them with :func:`unregister_glu_block`.

    Raises:
        TypeError: ``block_class`` is not an ``nn.Module`` subclass, or an attribute name is
            not a str.
        ValueError: ``block_class`` is registered already and ``replace`` is false.

    Example:
        >>> class MLP(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.up, self.act, self.down = nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)
        ...     def forward(self, x):
        ...         return self.down(self.act(self.up(x)))
        >>> register_glu_block(MLP, linear="up", activation="act")
        >>> model = apply_gated_linear_units(nn.Sequential(MLP()))
        >>> type(model[0].up).__name__, type(model[0].act).__name__
        ('GatedLinear', 'Identity')
        >>> unregister_glu_block(MLP)
    """
    _FEED_FORWARD_BLOCKS.register(block_class, (linear, activation), replace=replace)


def unregister_glu_block(block_class: type[nn.Module]) -> None:
    """Remove the entry of ``block_class`` (built-ins included); ``KeyError`` if there is none."""
    _FEED_FORWARD_BLOCKS.unregister(block_class)


def glu_block_registry() -> dict[type[nn.Module], tuple[str, str]]:
    """A snapshot of the GLU registry: block class -> (projection attribute, activation
    attribute), in registration order. Built-in transformers classes appear once their
    modeling module has been imported.

    Example:
        >>> from transformers.models.bert import modeling_bert
        >>> glu_block_registry()[modeling_bert.BertIntermediate]
        ('dense', 'intermediate_act_fn')
    """
    return _FEED_FORWARD_BLOCKS.snapshot()


def _resolve_activation(act_fn: object) -> Activation | None:
    if act_fn is None:
        return None
    if isinstance(act_fn, str):
        if act_fn not in _ACTIVATIONS:
            choices = ", ".join(repr(k) for k in _ACTIVATIONS)
            raise ValueError(f"act_fn must be a callable or one of {choices}; got {act_fn!r}")
        return _ACTIVATIONS[act_fn]
    if not callable(act_fn):
        raise TypeError(f"act_fn must be a callable, a name or None, got {type(act_fn).__name__}")
    return cast(Activation, act_fn)


def apply_gated_linear_units(
    model: ModelT,
    optimizers: OptimizerArg = None,
    act_fn: Activation | str | None = None,
    gated_layer_bias: bool = False,
    non_gated_layer_bias: bool | None = None,
    *,
    generator: torch.Generator | None = None,
) -> ModelT:
    """Turn the feed-forward blocks of transformer layers into gated linear units, in place.

    .. math::

        W_2\\,\\sigma(W_1 x + b_1) \\;\\longrightarrow\\;
        W_2\\big(\\sigma(W_g x + b_g) \\odot (W_1 x + b_1)\\big)

    Supported blocks: HuggingFace BERT's ``BertIntermediate``, RoBERTa's
    ``RobertaIntermediate``, XLM-RoBERTa's ``XLMRobertaIntermediate`` (``dense`` becomes a
    :class:`GatedLinear`, its activation moves onto the gate), DistilBERT's ``FFN`` (``lin1``,
    likewise), any block given to :func:`register_glu_block`, and ``nn.TransformerEncoderLayer``
    (``linear1`` becomes a :class:`GatedLinear`; the layer no longer takes torch's fused fast
    path, which would bypass the gate). The value path keeps the original parameter objects, so
    their values, optimizer state and state_dict keys survive; ``BertOutput`` / ``linear2``,
    dropout, residual and LayerNorm are untouched. The gate is new (``gate.weight`` under the
    projection's key, e.g. ``...intermediate.dense.gate.weight``; see
    :meth:`GatedLinear.from_linear` for its initialisation): the block computes a different
    function from the first step, so apply it before training -- or expect the feed-forward
    blocks to re-adapt when fine-tuning -- and load pre-surgery checkpoints through
    :func:`surgery.remap_state_dict`. The hidden width is kept, so each block gains
    ``d_model × d_ff`` gate weights. New parameters join the optimizer param group of the
    projection they gate.

    Frozen and partly optimized models: the gate (and a new value bias) takes the frozen state
    of the projection's ``weight``. A frozen projection gets a frozen gate that joins no
    optimizer, and as the gate starts random a ``UserWarning`` names those layers and says how
    to train their gates instead; when ``optimizers`` are passed and none of them holds a
    trainable projection, its gate could join no param group and a ``UserWarning`` names it.
    On the ``meta`` device (shape-only model building) the gate is created without drawing
    values; initialise after ``to_empty``. Deploy: ``torch.export``; ``torch.jit.script`` refuses.

    Args:
        model: the model to transform in place (not wrapped in DDP/FSDP/``torch.compile``).
        optimizers: optimizers holding the model's parameters, kept consistent.
        act_fn: the gate activation: a callable, one of ``'gelu'``, ``'relu'``, ``'silu'``
            (``'swish'``), ``'sigmoid'``, ``'tanh'``, or ``None`` for each block's own activation.
        gated_layer_bias: give the gate projection a bias (default ``False``, as Shazeer 2020).
        non_gated_layer_bias: ``None`` keeps the value projection's bias as it is; ``False``
            removes it, ``True`` ensures one (zero-initialised if new).
        generator: random generator for the gate initialisation.

    Returns:
        ``model``.

    Raises:
        TypeError: a bad argument, or a wrapped model.
        ValueError: an unknown activation name.

    Warns:
        NoEffectWarning: no supported feed-forward block was found, all of them are already
            gated, or some were left unconverted.

    Example:
        >>> layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
        >>> encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        >>> opt = torch.optim.AdamW(encoder.parameters())
        >>> _ = apply_gated_linear_units(encoder, opt, act_fn="silu")
        >>> type(encoder.layers[0].linear1).__name__
        'GatedLinear'
        >>> sum(len(g["params"]) for g in opt.param_groups) == len(list(encoder.parameters()))
        True
    """
    check_module(model)
    check_unwrapped(model)
    opts = as_optimizer_list(optimizers)
    activation = _resolve_activation(act_fn)
    check_bool(gated_layer_bias, "gated_layer_bias")
    check_bool(non_gated_layer_bias, "non_gated_layer_bias", allow_none=True)
    check_generator(generator)

    found = _find_blocks(model)
    if found.blocks:
        names = {id(m): name for name, m in model.named_modules()}
        gates: dict[nn.Module, nn.Module] = {
            linear: GatedLinear.from_linear(
                linear,
                activation if activation is not None else blocks[0].activation(),
                gate_bias=gated_layer_bias,
                value_bias=non_gated_layer_bias,
                generator=generator,
            )
            for linear, blocks in found.blocks.items()
        }
        replaced = replace_modules(model, gates, optimizers=opts)
        settle_new_parameters(names, replaced, opts, "apply_gated_linear_units", new_function=True)
        _move_activations_to_gates(model, found)
    _REPORT.warn(
        changed=bool(found.blocks),
        skipped=found.skipped,
        already="every feed-forward block it supports is already gated" if found.already else None,
    )
    return model


_REPORT = NoEffectReport(
    "apply_gated_linear_units",
    looked_for="feed-forward block it supports (transformers BertIntermediate, "
    "RobertaIntermediate, XLMRobertaIntermediate and DistilBERT's FFN, as in BertModel, "
    "RobertaModel, XLMRobertaModel, DistilBertModel and their heads; "
    "torch.nn.TransformerEncoderLayer); add one with functional.register_glu_block",
    skipped="left these layers unchanged: {names}",
    separator="; ",
)


@dataclass(frozen=True)
class _Block:
    """A feed-forward block to gate: ``linear`` is its first projection and ``attribute`` names
    its activation (which moves onto the gate)."""

    module: nn.Module
    linear: nn.Linear
    attribute: str

    def activation(self) -> Activation:
        return cast(Activation, getattr(self.module, self.attribute))


@dataclass
class _Found:
    """What :func:`_find_blocks` found: the projections to gate, each with the blocks that use
    it (a projection shared by several blocks is gated once); the blocks already gated; the
    layers left alone."""

    blocks: dict[nn.Linear, list[_Block]] = field(default_factory=dict)
    already: bool = False
    skipped: list[str] = field(default_factory=list)


_FACTORIZED = "apply apply_gated_linear_units first, then apply_factorization (which skips gates)"


def _find_blocks(model: nn.Module) -> _Found:
    registered = _FEED_FORWARD_BLOCKS.snapshot()
    found = _Found()
    for module in model.modules():
        matches = [registered[c] for c in type(module).__mro__ if c in registered]
        attributes = matches[0] if matches else None
        if attributes is not None:
            linear = getattr(module, attributes[0], None)
            where = f"{type(module).__qualname__}.{attributes[0]}"
            refuse_composite(linear, where, "apply_gated_linear_units", _FACTORIZED)
            if not isinstance(linear, nn.Linear) or not callable(
                getattr(module, attributes[1], None)
            ):
                found.skipped.append(
                    f"{type(module).__qualname__} (no nn.Linear `{attributes[0]}` or no "
                    f"callable `{attributes[1]}`)"
                )
                continue
            block = _Block(module, linear, attributes[1])
        elif not isinstance(module, nn.TransformerEncoderLayer):
            continue
        elif type(module) in (nn.TransformerEncoderLayer, ModularTransformerEncoderLayer):
            block = _Block(module, module.linear1, "activation")
        else:
            found.skipped.append(
                f"{type(module).__qualname__} (a subclass of nn.TransformerEncoderLayer with its "
                "own behaviour)"
            )
            continue
        if isinstance(block.linear, GatedLinear):
            found.already = True
        else:
            found.blocks.setdefault(block.linear, []).append(block)
    return found


def _move_activations_to_gates(model: nn.Module, found: _Found) -> None:
    """After the projections were gated: the blocks' own activations become identities, and the
    encoder layers leave torch's fused fast path (which would bypass the gate)."""
    for blocks in found.blocks.values():
        for block in blocks:
            setattr(block.module, block.attribute, nn.Identity())
            if isinstance(block.module, nn.TransformerEncoderLayer):
                make_modular(block.module)
    disable_nested_tensor(model)
