"""LayerNorm and GroupNorm that run in low precision under autocast.

Autocast runs ``layer_norm`` and ``group_norm`` in float32, which makes them memory-bound
float32 passes in the middle of a half-precision model. These layers instead compute in a chosen
low-precision dtype while autocast is enabled on the input's device, the way autocast treats the
ops it runs in low precision, and hand back the input's dtype. Outside autocast they are exactly
``nn.LayerNorm``/``nn.GroupNorm``.

Converted: the exact ``nn.LayerNorm``/``nn.GroupNorm`` types, and the subclasses known to
compute a plain layer (group) norm over their declared shape: timm's ``LayerNorm``,
``GroupNorm`` and ``GroupNorm1``, and the channels-first ``LayerNorm2d`` of timm and
torchvision (ConvNeXt), which becomes :class:`LowPrecisionLayerNorm2d`. These are entries of a
private registry resolved from ``sys.modules``: timm is never imported here.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import torch
from torch import nn
from torch.nn import functional as nnf

from functional._args import check_module
from functional._deploy import NotScriptable
from functional._policies import ModelT, NoEffectReport, clone_module_as, warn_no_effect
from functional._registry import Registry
from surgery import OptimizerArg, replace_modules

__all__ = [
    "LowPrecisionGroupNorm",
    "LowPrecisionLayerNorm",
    "LowPrecisionLayerNorm2d",
    "apply_low_precision_groupnorm",
    "apply_low_precision_layernorm",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_dtype(dtype: object) -> bool:
    """Validate ``dtype``; return whether it is a low-precision one (float16/bfloat16)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"dtype must be a torch.dtype (torch.float16 or torch.bfloat16), got {dtype!r}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype}")
    return dtype in _LOW_PRECISION


# Composer's precision settings (the values of its ``Precision`` enum), as the transforms'
# ``dtype``: the dtype each one computes the norms in, or None where it has nothing to do.
_COMPOSER_PRECISIONS: dict[str, torch.dtype | None] = {
    "amp_bf16": torch.bfloat16,
    "amp_fp16": torch.float16,
    "fp32": None,
    "amp_fp8": None,
}


def _transform_dtype(dtype: object) -> torch.dtype | None:
    """The transforms' ``dtype``: a ``torch.dtype``, or one of Composer's precision names (a
    string, or an enum member whose value is one); None for a full-precision setting."""
    value = dtype.value if isinstance(dtype, enum.Enum) else dtype
    if not isinstance(value, str):
        return dtype  # type: ignore[return-value]  # checked by _check_dtype
    if value not in _COMPOSER_PRECISIONS:
        raise ValueError(
            f"dtype must be a torch.dtype or one of Composer's precisions "
            f"{sorted(_COMPOSER_PRECISIONS)}, got {dtype!r}"
        )
    return _COMPOSER_PRECISIONS[value]


def _autocast_on(x: torch.Tensor) -> bool:
    device_type = x.device.type
    try:
        return torch.is_autocast_enabled(device_type)
    except (RuntimeError, TypeError):  # a device type autocast does not know
        return False


def _cast(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


_Norm = TypeVar("_Norm", bound="_LowPrecisionNorm")


class _LowPrecisionNorm(NotScriptable, nn.Module):
    """What the two layers share; mixed in before the norm class (``nn.LayerNorm``, ...).

    A subclass names its plain norm class in ``_plain`` and its functional op in
    ``_normalize(input, weight, bias)``.
    """

    low_precision_dtype: torch.dtype
    _plain: type[nn.Module]
    # Registered by the norm class mixed in after this one, which mypy sees as Parameters (they
    # are None without affine parameters; _cast passes None through).
    weight: nn.Parameter
    bias: nn.Parameter

    def __init__(self, *args, low_precision_dtype: torch.dtype = torch.bfloat16, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _check_dtype(low_precision_dtype)
        self.low_precision_dtype = low_precision_dtype

    @classmethod
    def _share(
        cls: type[_Norm], norm: nn.Module, name: str, low_precision_dtype: torch.dtype
    ) -> _Norm:
        """A ``cls`` sharing ``norm``'s Parameters (no copy); ``name`` is the argument's."""
        if not isinstance(norm, cls._plain):
            raise TypeError(
                f"{name} must be an nn.{cls._plain.__name__}, got {type(norm).__name__}"
            )
        _check_dtype(low_precision_dtype)
        new = clone_module_as(norm, cls)
        new.low_precision_dtype = low_precision_dtype
        return new

    def _normalize(
        self, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not _autocast_on(input):
            return super().forward(input)
        dtype = self.low_precision_dtype
        with torch.autocast(device_type=input.device.type, enabled=False):
            out = self._normalize(
                input.to(dtype), _cast(self.weight, dtype), _cast(self.bias, dtype)
            )
        return out.to(input.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", low_precision_dtype={self.low_precision_dtype}"


class LowPrecisionLayerNorm(_LowPrecisionNorm, nn.LayerNorm):
    """``nn.LayerNorm`` computed in ``low_precision_dtype`` while autocast is enabled.

    Under autocast on the input's device, the input, weight and bias are cast to
    ``low_precision_dtype``, the normalization runs there (autocast disabled) and the result is
    cast back to the input's dtype; otherwise this is ``nn.LayerNorm``. Same parameters and
    state_dict keys as ``nn.LayerNorm``.

    Shape:
        - Input: (*, *normalized_shape)
        - Output: same shape, the input's dtype

    Example:
        >>> ln = LowPrecisionLayerNorm(8, low_precision_dtype=torch.bfloat16)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     y = ln(torch.randn(2, 8))
        >>> y.dtype
        torch.float32
    """

    _plain = nn.LayerNorm

    @classmethod
    def from_layernorm(
        cls, ln: nn.LayerNorm, low_precision_dtype: torch.dtype
    ) -> LowPrecisionLayerNorm:
        """A ``LowPrecisionLayerNorm`` sharing ``ln``'s Parameters (no copy)."""
        return cls._share(ln, "ln", low_precision_dtype)

    def _normalize(
        self, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        return nnf.layer_norm(input, self.normalized_shape, weight, bias, self.eps)


class LowPrecisionGroupNorm(_LowPrecisionNorm, nn.GroupNorm):
    """``nn.GroupNorm`` computed in ``low_precision_dtype`` while autocast is enabled.

    See :class:`LowPrecisionLayerNorm`.

    Shape:
        - Input: (B, C, *)
        - Output: same shape, the input's dtype

    Example:
        >>> gn = LowPrecisionGroupNorm(2, 8, low_precision_dtype=torch.bfloat16)
        >>> gn(torch.randn(2, 8, 3)).dtype
        torch.float32
    """

    _plain = nn.GroupNorm

    @classmethod
    def from_groupnorm(
        cls, gn: nn.GroupNorm, low_precision_dtype: torch.dtype
    ) -> LowPrecisionGroupNorm:
        """A ``LowPrecisionGroupNorm`` sharing ``gn``'s Parameters (no copy)."""
        return cls._share(gn, "gn", low_precision_dtype)

    def _normalize(
        self, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        return nnf.group_norm(input, self.num_groups, weight, bias, self.eps)


class LowPrecisionLayerNorm2d(LowPrecisionLayerNorm):
    """A channels-first layer norm (over ``C`` of a ``(B, C, H, W)`` input) computed in
    ``low_precision_dtype`` while autocast is enabled.

    What the ``LayerNorm2d`` of timm and torchvision (ConvNeXt) compute -- permute to channels
    last, ``layer_norm`` over ``normalized_shape == (C,)``, permute back -- with the dtype rule
    of :class:`LowPrecisionLayerNorm`; outside autocast exactly that computation. Same
    parameters and state_dict keys as the layer it replaces.

    Shape:
        - Input: (B, C, H, W)
        - Output: same shape, the input's dtype

    Example:
        >>> ln = LowPrecisionLayerNorm2d(8, low_precision_dtype=torch.bfloat16)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     y = ln(torch.randn(2, 8, 3, 3))
        >>> y.shape, y.dtype
        (torch.Size([2, 8, 3, 3]), torch.float32)
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


# Exact class -> the low-precision class replacing it, for the layers whose forward is known to
# be a plain layer (group) norm over their declared shape. The timm and torchvision entries are
# lazy: they resolve once their module has been imported (this never imports them).
_LAYER_NORMS: Registry[type[nn.Module], type[LowPrecisionLayerNorm]] = Registry(
    "low-precision layer norm"
)
_LAYER_NORMS.register(nn.LayerNorm, LowPrecisionLayerNorm)
_LAYER_NORMS.register_lazy("timm.layers.norm", "LayerNorm", LowPrecisionLayerNorm)
_LAYER_NORMS.register_lazy("timm.layers.norm", "LayerNorm2d", LowPrecisionLayerNorm2d)
_LAYER_NORMS.register_lazy("torchvision.models.convnext", "LayerNorm2d", LowPrecisionLayerNorm2d)
_GROUP_NORMS: Registry[type[nn.Module], type[LowPrecisionGroupNorm]] = Registry(
    "low-precision group norm"
)
_GROUP_NORMS.register(nn.GroupNorm, LowPrecisionGroupNorm)
_GROUP_NORMS.register_lazy("timm.layers.norm", "GroupNorm", LowPrecisionGroupNorm)
_GROUP_NORMS.register_lazy("timm.layers.norm", "GroupNorm1", LowPrecisionGroupNorm)


def _refusal(module: nn.Module, known: Registry) -> str | None:
    """Why ``module`` (an instance of the plain norm class) is left alone, or ``None``."""
    cls = type(module)
    if cls not in known:
        return f"{cls.__name__} (a subclass whose forward is not known to be a plain norm)"
    if getattr(module, "_fast_norm", False):
        return f"{cls.__name__} (timm fast norm: it already follows autocast's dtype)"
    return None


def _apply(
    model: ModelT,
    precision: torch.dtype | str,
    optimizers: OptimizerArg,
    plain: type[nn.Module],
    known: Registry,
    report: NoEffectReport,
) -> ModelT:
    check_module(model)
    dtype = _transform_dtype(precision)
    if dtype is None or not _check_dtype(dtype):
        warn_no_effect(
            report.transform,
            f"layers to run in {precision}: only torch.float16 and torch.bfloat16 (Composer's "
            "'amp_fp16' and 'amp_bf16') are low precision",
        )
        return model
    replacements: dict[nn.Module, nn.Module] = {}
    skipped: list[str] = []
    already = False
    for module in model.modules():
        if not isinstance(module, plain) or module in replacements:
            continue
        if isinstance(module, _LowPrecisionNorm):
            already = True
        else:
            reason = _refusal(module, known)
            if reason is not None:
                skipped.append(reason)
                continue
            replacements[module] = known[type(module)]._share(module, "norm", dtype)
    if replacements:
        replace_modules(model, replacements, optimizers=optimizers)
    report.warn(
        changed=bool(replacements),
        skipped=skipped,
        already=f"its nn.{plain.__name__} layers already run in low precision" if already else None,
        stacklevel=4,
    )
    return model


_LAYER_NORM_REPORT = NoEffectReport(
    "apply_low_precision_layernorm",
    "nn.LayerNorm layers (exact type), nor timm LayerNorm / LayerNorm2d or torchvision LayerNorm2d",
    skipped="left these layers unchanged: {names}",
    separator="; ",
)
_GROUP_NORM_REPORT = NoEffectReport(
    "apply_low_precision_groupnorm",
    "nn.GroupNorm layers (exact type), nor timm GroupNorm / GroupNorm1",
    skipped="left these layers unchanged: {names}",
    separator="; ",
)


def apply_low_precision_layernorm(
    model: ModelT, dtype: torch.dtype | str, optimizers: OptimizerArg = None
) -> ModelT:
    """Make the ``nn.LayerNorm`` layers of ``model`` run in ``dtype`` under autocast, in place.

    Each exact ``nn.LayerNorm``, and timm's ``LayerNorm`` (ViT, DeiT, ConvNeXt blocks), becomes
    a :class:`LowPrecisionLayerNorm` sharing its Parameters (weights, optimizer state and
    state_dict keys kept); the channels-first ``LayerNorm2d`` of timm and torchvision (ConvNeXt
    stems and downsampling) becomes a :class:`LowPrecisionLayerNorm2d`. Other subclasses, whose
    ``forward`` is not known to be a plain layer norm over ``normalized_shape`` (timm's
    ``LayerNormFp32``, ``LayerNormExp2d``, a user's), are refused: left as they are, named in a
    ``NoEffectWarning``; so are timm layers with its fast-norm switch on, which already
    follow autocast's dtype. Outside autocast the model
    computes exactly what it did; under autocast each converted layer computes in ``dtype``
    and returns its input's dtype. A full-precision ``dtype`` (float32/float64) has nothing to
    do and only warns.

    Dtype rule under autocast (on the input's device): input, weight and bias are cast to
    ``dtype``, the normalization runs there with autocast off, and the result is cast back to
    the input's dtype (a float32 input gives float32, a bf16 activation bf16); gradients reach
    the float32 parameters in float32. Use bf16 on CPU; fp16 is meant for CUDA with a
    ``GradScaler``. The check of the autocast state is a Python-level query, so the layers
    compile to one graph with no break (a graph built under autocast is reused under it).

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager); ``torch.jit.script`` cannot compile
    its new layers and raises a ``TypeError`` naming ``torch.export``.

    Args:
        model: the model to change in place.
        dtype: ``torch.float16`` or ``torch.bfloat16``; or Composer's precision setting in
            its place (``'amp_fp16'``, ``'amp_bf16'``, or its ``Precision`` enum), so that a
            ported ``apply_low_precision_layernorm(model, state.precision, optimizers)``
            works; ``'fp32'`` and ``'amp_fp8'`` only warn, as in Composer.
        optimizers: optimizers holding ``model``'s parameters (kept consistent).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no layer norm it converts, or ``dtype`` is
            not a low-precision dtype; naming the layer norm subclasses it left alone.

    Raises:
        TypeError: ``dtype`` is neither a ``torch.dtype`` nor a precision name.
        ValueError: ``dtype`` is not a floating dtype, or an unknown precision name.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
        >>> model = apply_low_precision_layernorm(model, torch.bfloat16)
        >>> type(model[1]).__name__
        'LowPrecisionLayerNorm'
    """
    return _apply(model, dtype, optimizers, nn.LayerNorm, _LAYER_NORMS, _LAYER_NORM_REPORT)


def apply_low_precision_groupnorm(
    model: ModelT, dtype: torch.dtype | str, optimizers: OptimizerArg = None
) -> ModelT:
    """Make the ``nn.GroupNorm`` layers of ``model`` run in ``dtype`` under autocast, in place.

    See :func:`apply_low_precision_layernorm`; exact ``nn.GroupNorm`` instances, and timm's
    ``GroupNorm`` and ``GroupNorm1``, become :class:`LowPrecisionGroupNorm`; other subclasses
    are refused (left as they are, named in a ``NoEffectWarning``).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(2, 8))
        >>> model = apply_low_precision_groupnorm(model, torch.float16)
        >>> model[1].low_precision_dtype
        torch.float16
    """
    return _apply(model, dtype, optimizers, nn.GroupNorm, _GROUP_NORMS, _GROUP_NORM_REPORT)
