"""``apply_factorization``: which layers of a model to factorize, and the surgery that does it.

A layer is left dense, with a :class:`surgery.NoEffectWarning` naming it, where a factorized
layer would silently change the model: its weight is tied to another module's (GPT-2's
``lm_head`` shares the token embedding's matrix; a factorized copy would untie them), or its
parent's ``forward`` reads the layer's ``.weight`` itself (T5's feed-forward block reads
``wo.weight.dtype``; a factorized layer has no ``weight``).
"""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass, field

from torch import nn

from functional._args import check_bool, check_int, check_module
from functional._composition import carry_decorations, layer_kind, refuse_parametrized
from functional._policies import ModelT, latent_size, replace_chosen, settle_new_parameters
from functional.factorization.layers import FactorizedConv2d, FactorizedLinear, _Factorized
from functional.factorization.solve import max_rank_with_speedup
from surgery import NoEffectWarning, OptimizerArg, as_optimizer_list

__all__ = ["apply_factorization"]


def _tied_weights(model: nn.Module) -> dict[int, list[str]]:
    """``id(module)`` of every module whose ``weight`` another module also holds, to the names
    of those other holders."""
    holders: dict[int, list[tuple[int, str]]] = {}
    for name, module in model.named_modules():
        for param in module._parameters.values():
            if param is not None:
                holders.setdefault(id(param), []).append((id(module), name))
    tied: dict[int, list[str]] = {}
    for owners in holders.values():
        for module_id, _ in owners:
            others = [n or "<model>" for i, n in owners if i != module_id]
            if others:
                tied.setdefault(module_id, []).extend(others)
    return tied


def _weight_readers(model: nn.Module) -> dict[int, str]:
    """``id(child)`` of every child whose parent's ``forward`` reads ``self.<child>.weight``,
    to that parent's class name (the source is read once per class; none found, none read)."""
    sources: dict[type, str] = {}
    readers: dict[int, str] = {}
    for parent in model.modules():
        cls = type(parent)
        if cls not in sources:
            try:
                sources[cls] = inspect.getsource(cls.forward)
            except (OSError, TypeError):
                sources[cls] = ""
        for child_name, child in parent.named_children():
            pattern = rf"self\.{re.escape(child_name)}\.weight\b"
            if isinstance(child, (nn.Linear, nn.Conv2d)) and re.search(pattern, sources[cls]):
                readers[id(child)] = f"{cls.__name__}.forward"
    return readers


# Why a standardized (parametrized) weight is refused, and the order that works.
_WS_ORDER = (
    "the factors of a standardized weight would train unstandardized; apply "
    "apply_factorization first, then apply_weight_standardization (which standardizes each "
    "factor)"
)

_UNSHARED = ", with a weight neither tied to another module nor read by its parent's forward"


@dataclass
class _SharedWeights:
    """The layers a factorization would break (tied weights, weights the parent reads), and
    those of them the transform left dense in this run."""

    tied: dict[int, list[str]]
    readers: dict[int, str]
    skipped: list[int] = field(default_factory=list)

    def concerns(self, module_id: int) -> bool:
        return module_id in self.tied or module_id in self.readers

    def leave_dense(self, layer: nn.Module) -> bool:
        """Whether ``layer`` must stay dense (then remembered for :meth:`warn`)."""
        if self.concerns(id(layer)):
            self.skipped.append(id(layer))
            return True
        return False

    def warn(self, names: dict[int, str]) -> None:
        """One :class:`surgery.NoEffectWarning` naming each layer left dense, and why."""
        if not self.skipped:
            return
        lines = []
        for module_id in self.skipped:
            if module_id in self.tied:
                why = f"weight tied to {', '.join(sorted(set(self.tied[module_id])))}"
            else:
                why = f"{self.readers[module_id]} reads its .weight"
            lines.append(f"{names.get(module_id, '?')} ({why})")
        warnings.warn(
            "apply_factorization left these layers dense, since a factorized layer (which has "
            "no single weight) would silently change the model: " + "; ".join(lines),
            NoEffectWarning,
            stacklevel=3,
        )


class _Chooser:
    """Which layers ``apply_factorization`` replaces, and by what (the policies' choosers)."""

    def __init__(
        self,
        model: nn.Module,
        names: dict[int, str],
        shared: _SharedWeights,
        convs: tuple[int, float],
        linears: tuple[int, float],
    ) -> None:
        self.names, self.shared = names, shared
        self.min_channels, self.latent_channels = convs
        self.min_features, self.latent_features = linears
        self.skipped: list[
            str
        ] = []  # subclasses with a forward of their own: not ours to factorize
        # The factors of an earlier factorization are plain layers: never factorize them again.
        self.factors = {
            id(m) for f in model.modules() if isinstance(f, _Factorized) for m in f.modules()
        }

    def _unlike(self, layer: nn.Module, kind: type[nn.Module]) -> bool:
        """Already a factor, or not what ``kind`` is (then named in the warning)."""
        if id(layer) in self.factors:
            return True
        if not layer_kind(layer, kind):
            self.skipped.append(f"{self.names[id(layer)]} ({type(layer).__name__})")
            return True
        return False

    def conv(self, conv: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(conv, nn.Conv2d)
        if self._unlike(conv, nn.Conv2d) or conv.groups != 1:
            return None
        if min(conv.in_channels, conv.out_channels) < self.min_channels:
            return None
        fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        width = min(conv.in_channels, conv.out_channels)
        rank = latent_size(self.latent_channels, "latent_channels", width)
        if rank > max_rank_with_speedup(fan_in, conv.out_channels) or self.shared.leave_dense(conv):
            return None
        refuse_parametrized(conv, self.names[id(conv)], "apply_factorization", _WS_ORDER)
        new = FactorizedConv2d.from_conv2d(conv, latent_channels=rank)
        new.module0, new.module1 = carry_decorations(conv, new.module0, new.module1)
        return new

    def linear(self, linear: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(linear, nn.Linear)
        if self._unlike(linear, nn.Linear):
            return None
        width = min(linear.in_features, linear.out_features)
        if width < self.min_features:
            return None
        rank = latent_size(self.latent_features, "latent_features", width)
        if rank > max_rank_with_speedup(linear.in_features, linear.out_features):
            return None
        if self.shared.leave_dense(linear):
            return None
        refuse_parametrized(linear, self.names[id(linear)], "apply_factorization", _WS_ORDER)
        return FactorizedLinear.from_linear(linear, latent_features=rank)


def apply_factorization(
    model: ModelT,
    factorize_convs: bool = True,
    factorize_linears: bool = True,
    min_channels: int = 512,
    latent_channels: float = 0.25,
    min_features: int = 512,
    latent_features: float = 0.25,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Replace wide convolutions and linear layers of ``model`` by low-rank factorizations, in place.

    An exact ``nn.Conv2d`` (``groups == 1``) with ``min(in_channels, out_channels) >=
    min_channels`` becomes a :class:`FactorizedConv2d`, an exact ``nn.Linear`` with
    ``min(in_features, out_features) >= min_features`` a :class:`FactorizedLinear`, whenever the
    rank ``r`` lowers the number of multiply-adds (:math:`r(f_{in} + f_{out}) < f_{in} f_{out}`
    with :math:`f_{in} = C_{in}k_hk_w`). The factors come from the truncated SVD of the original
    weight: the new layer is the closest rank-``r`` layer to the original in Frobenius norm.
    Each replacement reports ``rank`` and ``approximation_error`` (relative Frobenius error of
    the weight). The bias ``Parameter`` is reused; the factors are new parameters and take the
    place of the dense weight in its optimizer param group.

    Frozen layers stay frozen: the factors inherit the dense weight's ``requires_grad``, and the
    factors of a frozen weight join no optimizer, even one that holds the layer's trainable bias.
    On the ``meta`` device (shape-only model building) the layers are replaced with meta factors
    and no decomposition runs (``approximation_error`` is NaN).

    Autocast: the factor layers are plain ``nn.Conv2d``/``nn.Linear`` and follow autocast's
    rules for them (the autocast dtype); the latent activation between them is in that dtype
    too, so the output dtype is the one the dense layer would give.

    The state_dict keys change (``weight`` becomes ``module0.weight``/``module1.weight``,
    ``bias`` becomes ``module1.bias``): load a checkpoint of the dense model with
    ``model.load_state_dict(surgery.remap_state_dict(checkpoint, model))``, which factorizes it
    the same way; ``dense_state_dict()`` on a factorized layer gives the dense layout back.

    Args:
        model: the model to change in place.
        factorize_convs: factorize convolutions.
        factorize_linears: factorize linear layers.
        min_channels: minimum ``min(in_channels, out_channels)`` of a factorized convolution.
        latent_channels: rank of a factorized convolution: an int, or a fraction in (0, 1) of
            ``min(in_channels, out_channels)``.
        min_features: minimum ``min(in_features, out_features)`` of a factorized linear layer.
        latent_features: rank of a factorized linear layer: an int, or a fraction in (0, 1) of
            ``min(in_features, out_features)``.
        optimizers: optimizers holding ``model``'s parameters (kept consistent).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no layer qualifies.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
        >>> model = apply_factorization(model, latent_features=64)
        >>> model[0].rank, type(model[2]).__name__
        (64, 'Linear')

    Reference:
        Composer's Factorize method card; Eckart and Young, "The approximation of one matrix by
        another of lower rank", Psychometrika 1936.
    """
    check_module(model)
    check_bool(factorize_convs, "factorize_convs")
    check_bool(factorize_linears, "factorize_linears")
    min_channels = check_int(min_channels, "min_channels", minimum=1)
    min_features = check_int(min_features, "min_features", minimum=1)
    latent_size(latent_channels, "latent_channels", 1)  # validates the values
    latent_size(latent_features, "latent_features", 1)

    opts = as_optimizer_list(optimizers)
    names = {id(m): name for name, m in model.named_modules()}
    shared = _SharedWeights(_tied_weights(model), _weight_readers(model))
    chooser = _Chooser(
        model, names, shared, (min_channels, latent_channels), (min_features, latent_features)
    )
    convert_conv, convert_linear, skipped = chooser.conv, chooser.linear, chooser.skipped
    replaced = replace_chosen(
        model,
        "apply_factorization",
        [
            (
                factorize_convs,
                nn.Conv2d,
                convert_conv,
                f"nn.Conv2d (groups=1) with min(in_channels, out_channels) >= {min_channels}",
            ),
            (
                factorize_linears,
                nn.Linear,
                convert_linear,
                f"nn.Linear with min(in_features, out_features) >= {min_features}",
            ),
        ],
        opts,
        qualifier=" whose factorization at the requested rank saves multiply-adds"
        + (_UNSHARED if any(shared.concerns(i) for i in names) else ""),
        none_chosen="layer to factorize (factorize_convs and factorize_linears are both False)",
        skipped=skipped,
    )
    shared.warn(names)
    settle_new_parameters(names, replaced, opts, "apply_factorization", new_function=False)
    return model
