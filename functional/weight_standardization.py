"""Weight standardization (Qiao et al. 2019) through ``torch.nn.utils.parametrize``."""

from __future__ import annotations

import warnings

import torch
import torch.fx
from torch import nn
from torch.nn.utils import parametrize

from functional._args import check_int, check_module
from functional._deploy import NotScriptable
from functional._numeric import accumulation_dtype
from functional._policies import ModelT, warn_no_effect
from surgery import OptimizerArg, as_optimizer_list

__all__ = ["WeightStandardizer", "apply_weight_standardization"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


class WeightStandardizer(NotScriptable, nn.Module):
    """Parametrization that standardizes a convolution weight per output channel.

    .. math::
        \\hat W_{o} = \\frac{W_{o} - \\operatorname{mean}(W_{o})}{\\sqrt{\\operatorname{var}(W_{o}) + \\epsilon}}

    with the mean and biased variance over each output channel's ``C_in/groups × k...``
    weights, computed in float32 or better and returned in the weight's dtype.

    Registered by :func:`apply_weight_standardization`; the raw weight lives at
    ``parametrizations.weight.original`` (the same ``Parameter`` object as before). A
    checkpoint holding the plain ``weight`` key loads directly (a load hook renames it) or through
    :func:`surgery.remap_state_dict`.

    Args:
        eps: added to the variance.

    Shape:
        - Input: (C_out, C_in/groups, *kernel)
        - Output: same shape

    Example:
        >>> w = WeightStandardizer()(torch.randn(4, 3, 3, 3) * 5 + 2)
        >>> torch.allclose(w.mean(dim=(1, 2, 3)), torch.zeros(4), atol=1e-5)
        True
    """

    def __init__(self, eps: float = 1e-10) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(1, weight.ndim))
        work = weight.to(accumulation_dtype(weight.dtype))
        var, mean = torch.var_mean(work, dim=dims, keepdim=True, correction=0)
        return ((work - mean) * torch.rsqrt(var + self.eps)).to(weight.dtype)

    def surgery_remap_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
        """Move an unparametrized ``<conv>.weight`` entry to ``<conv>.parametrizations.weight.original``."""
        _rename_plain_weight(state_dict, prefix)


def _owner_prefix(prefix: str) -> tuple[str, str] | None:
    """Split ``<conv.>parametrizations.<name>.<i>.`` into (``<conv.>``, ``<name>``)."""
    parts = prefix[:-1].split(".") if prefix.endswith(".") else prefix.split(".")
    if len(parts) < 3 or parts[-3] != "parametrizations":
        return None
    owner = ".".join(parts[:-3])
    return (owner + "." if owner else ""), parts[-2]


def _rename_plain_weight(state_dict: dict[str, torch.Tensor], prefix: str) -> None:
    split = _owner_prefix(prefix)
    if split is None:
        return
    owner, name = split
    plain = owner + name
    stored = f"{owner}parametrizations.{name}.original"
    if plain in state_dict and stored not in state_dict:
        state_dict[stored] = state_dict.pop(plain)


def _load_plain_weight_hook(module, state_dict, prefix, *args, **kwargs) -> None:
    """Load-state-dict pre-hook on a standardized conv: accept the pre-surgery ``weight`` key."""
    plain = prefix + "weight"
    stored = prefix + "parametrizations.weight.original"
    if plain in state_dict and stored not in state_dict:
        state_dict[stored] = state_dict.pop(plain)


def _is_standardized(conv: nn.Module) -> bool:
    if not parametrize.is_parametrized(conv, "weight"):
        return False
    return any(isinstance(p, WeightStandardizer) for p in conv.parametrizations["weight"])  # type: ignore[index]


class _ConvLeafTracer(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, _CONVS) or super().is_leaf_module(m, module_qualified_name)


def _convs_in_call_order(model: nn.Module) -> tuple[list[nn.Module], bool]:
    """The model's convolutions in the order ``forward`` first calls them (via torch.fx), and
    whether that order could be traced; registration order otherwise."""
    registered: list[nn.Module] = [m for m in model.modules() if isinstance(m, _CONVS)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = _ConvLeafTracer().trace(model)
    except Exception:
        return registered, False
    ordered: dict[int, nn.Module] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            module = model.get_submodule(node.target)
            if isinstance(module, _CONVS):
                ordered.setdefault(id(module), module)
    seen = set(ordered)
    # Convolutions the traced forward never calls keep their registration place at the end.
    ordered.update((id(m), m) for m in registered if id(m) not in seen)
    return list(ordered.values()), True


def apply_weight_standardization(
    model: ModelT, n_last_layers_ignore: int = 0, optimizers: OptimizerArg = None
) -> ModelT:
    """Standardize the weights of the convolutions of ``model``, in place.

    Every ``nn.Conv1d/2d/3d`` (including subclasses) gets a :class:`WeightStandardizer`
    parametrization, except the last ``n_last_layers_ignore`` convolutions in the order the
    forward pass calls them (found with ``torch.fx``; when the model cannot be traced, the
    registration order is used and a ``UserWarning`` says so). The raw weight stays the same
    ``Parameter`` object, so optimizers need no change; its state_dict key becomes
    ``<conv>.parametrizations.weight.original``, and checkpoints with the plain ``<conv>.weight``
    key still load (with ``load_state_dict`` directly, or through
    :func:`surgery.remap_state_dict`). Already standardized convolutions are left alone
    (idempotent). Apply this after transforms that replace convolutions.

    Saving: a standardized model cannot be pickled whole -- ``torch.save(model)``,
    ``pickle.dumps(model)`` and sending the module to another process raise ``RuntimeError``
    ("Serialization of parametrized modules is only supported through state_dict()"), a limit of
    ``torch.nn.utils.parametrize``. Save ``model.state_dict()`` instead, and to load, build the
    model, apply this transform, then ``load_state_dict`` (a state_dict of the plain model loads
    too). ``copy.deepcopy(model)`` works. To export plain weights, remove the parametrizations
    with ``parametrize.remove_parametrizations(conv, "weight", leave_parametrized=True)``.

    Autocast: the standardization runs in float32 (float64 for float64 weights) and returns the
    weight's dtype; the convolution then casts it to the autocast dtype as usual, so the layer's
    output dtype is the one the plain convolution gives.

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager); ``torch.jit.script`` cannot compile
    its new layers and raises a ``TypeError`` naming ``torch.export``.

    Args:
        model: the model to change in place.
        n_last_layers_ignore: number of final convolutions to leave unstandardized.
        optimizers: optimizers holding ``model``'s parameters, accepted as by every model
            transform; nothing in them changes, since the raw weights stay the same
            ``Parameter`` objects.

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no convolution was standardized.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3))
        >>> model = apply_weight_standardization(model, n_last_layers_ignore=1)
        >>> [torch.nn.utils.parametrize.is_parametrized(m) for m in model]
        [True, False]

    Reference:
        Qiao, Wang, Liu, Shen and Yuille, "Micro-Batch Training with Batch-Channel
        Normalization and Weight Standardization", arXiv:1903.10520.
    """
    check_module(model)
    n_last_layers_ignore = check_int(n_last_layers_ignore, "n_last_layers_ignore", minimum=0)
    as_optimizer_list(optimizers)  # checked; the Parameters stay, so nothing else to do
    if n_last_layers_ignore:
        convs, traced = _convs_in_call_order(model)
        if not traced:
            warnings.warn(
                "apply_weight_standardization could not trace the model with torch.fx; the last "
                f"{n_last_layers_ignore} convolution(s) are taken in registration order",
                UserWarning,
                stacklevel=2,
            )
        convs = convs[: max(len(convs) - n_last_layers_ignore, 0)]
    else:
        convs = [m for m in model.modules() if isinstance(m, _CONVS)]
    changed = 0
    for conv in convs:
        if _is_standardized(conv) or isinstance(
            getattr(conv, "weight", None), nn.parameter.UninitializedParameter
        ):
            continue
        parametrize.register_parametrization(conv, "weight", WeightStandardizer())
        conv.register_load_state_dict_pre_hook(_load_plain_weight_hook)
        changed += 1
    if not changed:
        warn_no_effect(
            "apply_weight_standardization",
            f"nn.Conv1d/2d/3d left to standardize (n_last_layers_ignore={n_last_layers_ignore})",
        )
    return model
