"""Exponential moving average of model weights (Polyak averaging; Izmailov et al. 2018 for SWA).

An EMA copy of the weights, evaluated instead of the trained weights, usually generalises
better; see Tarvainen and Valpola, `Mean teachers are better role models
<https://arxiv.org/abs/1703.01780>`_ (2017) and Kaddour et al., `Stop Wasting My Time!
<https://arxiv.org/abs/2209.14981>`_ (2022).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping

import torch
from torch import nn

from functional._checks import check_in_range, check_probability

try:  # torch.distributed may be missing from some builds
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = None  # type: ignore[assignment,misc]

__all__ = ["compute_ema", "ema_smoothing"]

# Wrappers whose inner module holds the weights under their own names.
_WRAPPER_ATTRIBUTES = (("DistributedDataParallel", "module"), ("OptimizedModule", "_orig_mod"))
_PREFIXES = ("module.", "_orig_mod.")


def ema_smoothing(half_life: float, update_interval: float = 1) -> float:
    r"""The EMA smoothing factor that halves old weights' influence every ``half_life`` steps.

    .. math::
        s = \exp\Bigl(-\ln 2 \cdot \frac{\text{update\_interval}}{\text{half\_life}}\Bigr)

    Args:
        half_life: half-life of the average in steps (batches or epochs), ``>= 0``; 0 means no
            averaging (``s = 0``), ``math.inf`` means no update (``s = 1``).
        update_interval: steps between two EMA updates, ``> 0``, in the units of ``half_life``.

    Returns:
        The smoothing factor in ``[0, 1]`` for :func:`compute_ema`.

    Example:
        >>> import functional as F
        >>> F.ema_smoothing(half_life=10)
        0.9330329915368074
        >>> F.ema_smoothing(half_life=10, update_interval=10)
        0.5
    """
    half_life = check_in_range(half_life, "half_life", 0.0, math.inf)
    update_interval = check_in_range(
        update_interval, "update_interval", 0.0, math.inf, low_inclusive=False
    )
    if math.isinf(update_interval):
        raise ValueError(f"update_interval must be finite, got {update_interval}")
    if half_life == 0.0:
        return 0.0
    return math.exp(-math.log(2.0) * update_interval / half_life)


def _unwrap(module: nn.Module) -> nn.Module:
    """The module inside DistributedDataParallel / torch.compile wrappers."""
    while True:
        for class_name, attribute in _WRAPPER_ATTRIBUTES:
            if type(module).__name__ == class_name and isinstance(
                getattr(module, attribute, None), nn.Module
            ):
                module = getattr(module, attribute)
                break
        else:
            return module


def _named_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer under every name it has (tied weights appear once per name)."""
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _non_persistent(module: nn.Module) -> set[str]:
    names = set()
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for buffer in sub._non_persistent_buffers_set:
            names.add(f"{prefix}.{buffer}" if prefix else buffer)
    return names


def _strip_wrapper_prefixes(state: Mapping[str, object], names: set[str]) -> Mapping[str, object]:
    """Accept a state dict saved from a DDP-wrapped or compiled model (``module.`` keys)."""
    for prefix in _PREFIXES:
        if (
            state
            and all(k.startswith(prefix) for k in state)
            and not any(n.startswith(prefix) for n in names)
        ):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def _is_dtensor(t: torch.Tensor) -> bool:
    return DTensor is not None and isinstance(t, DTensor)


def _local(t: torch.Tensor, name: str, other: torch.Tensor) -> torch.Tensor:
    """The tensor to update in place: a DTensor's local shard (no communication)."""
    if _is_dtensor(t) != _is_dtensor(other):
        raise TypeError(
            f"compute_ema: '{name}' is a DTensor in one of model / ema_model and a plain tensor "
            "in the other; shard both the same way (e.g. fully_shard both models, or use the "
            "sharded ema model's state_dict()), so every rank updates its own shard"
        )
    if not _is_dtensor(t):
        return t
    if t.placements != other.placements:
        raise ValueError(
            f"compute_ema: '{name}' is sharded differently in model and ema_model "
            f"({other.placements} vs {t.placements}); shard both the same way"
        )
    return t.to_local()


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device, t.dtype, t.data_ptr(), tuple(t.shape), t.stride())


@torch.no_grad()
def compute_ema(
    model: nn.Module,
    ema_model: nn.Module | MutableMapping[str, torch.Tensor],
    smoothing: float = 0.99,
) -> None:
    r"""Move ``ema_model``'s weights towards ``model``'s, in place (exponential moving average).

    For every floating parameter and buffer, matched by name:

    .. math::
        w_\text{ema} \leftarrow s\, w_\text{ema} + (1 - s)\, w_\text{model}

    computed as one fused ``torch._foreach_lerp_`` per (device, dtype) group. Integer buffers
    (e.g. BatchNorm's ``num_batches_tracked``) are copied. The EMA may be kept in another dtype
    or on another device than the model (e.g. float32 EMA of a bfloat16 model).

    ``model`` and ``ema_model`` may be wrapped in ``DistributedDataParallel`` or
    ``torch.compile`` (their inner modules are used) or sharded with FSDP2's ``fully_shard``
    (every rank updates its local shards, no communication). ``ema_model`` may also be a dict
    of tensors such as a ``state_dict()`` of the EMA copy, updated in place; non-persistent
    buffers, which a state dict leaves out, are then skipped.

    Args:
        model: the trained model.
        ema_model: the averaged copy (same architecture), or a name → tensor mapping.
        smoothing: :math:`s` in ``[0, 1]``; see :func:`ema_smoothing`.

    Raises:
        ValueError: if names or shapes do not match.

    Example:
        >>> import copy, torch, functional as F
        >>> model = torch.nn.Linear(3, 1)
        >>> ema = copy.deepcopy(model)
        >>> with torch.no_grad():
        ...     _ = model.weight.add_(1.0)
        >>> F.compute_ema(model, ema, smoothing=0.9)
        >>> torch.allclose(ema.weight, 0.9 * (model.weight - 1) + 0.1 * model.weight)
        True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    smoothing = check_probability(smoothing, "smoothing")
    model = _unwrap(model)
    source = dict(_named_tensors(model))
    optional: set[str] = set()
    if isinstance(ema_model, nn.Module):
        target: Mapping[str, object] = dict(_named_tensors(_unwrap(ema_model)))
    elif isinstance(ema_model, Mapping):
        target = _strip_wrapper_prefixes(ema_model, set(source))
        optional = _non_persistent(model)
    else:
        raise TypeError(
            "ema_model must be an nn.Module or a mapping of names to tensors (e.g. a "
            f"state_dict), got {type(ema_model).__name__}"
        )
    missing = [n for n in source if n not in target and n not in optional]
    extra = [
        n
        for n, v in target.items()
        if n not in source and isinstance(v, torch.Tensor) and not n.endswith("_extra_state")
    ]
    if missing or extra:
        raise ValueError(
            "compute_ema: model and ema_model must have the same parameters and buffers; "
            f"missing from ema_model: {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"not in model: {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )
    groups: dict[tuple[torch.device, torch.dtype], tuple[list, list]] = {}
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []
    seen: set[tuple] = set()
    for name, value in source.items():
        if name not in target:
            continue
        ema_value = target[name]
        if not isinstance(ema_value, torch.Tensor):
            raise TypeError(f"ema_model['{name}'] must be a tensor, got {type(ema_value).__name__}")
        if ema_value.shape != value.shape:
            raise ValueError(
                f"compute_ema: '{name}' has shape {tuple(value.shape)} in model but "
                f"{tuple(ema_value.shape)} in ema_model"
            )
        ema_local = _local(ema_value, name, value)
        model_local = _local(value, name, ema_value)
        key = _storage_key(ema_local)
        if key in seen:  # tied weights: one tensor under several names
            continue
        seen.add(key)
        if not (value.is_floating_point() or value.is_complex()):
            copies.append((ema_local, model_local))
            continue
        if not (ema_local.is_floating_point() or ema_local.is_complex()):
            raise TypeError(
                f"compute_ema: '{name}' is {value.dtype} in model but {ema_local.dtype} in "
                "ema_model; an average needs a floating ema tensor"
            )
        if model_local.dtype != ema_local.dtype or model_local.device != ema_local.device:
            model_local = model_local.to(device=ema_local.device, dtype=ema_local.dtype)
        ema_list, model_list = groups.setdefault((ema_local.device, ema_local.dtype), ([], []))
        ema_list.append(ema_local)
        model_list.append(model_local)
    weight = 1.0 - smoothing
    for ema_list, model_list in groups.values():
        torch._foreach_lerp_(ema_list, model_list, weight)
    for ema_local, model_local in copies:
        ema_local.copy_(model_local)
