"""Exponential moving average of model weights (Polyak averaging; Izmailov et al. 2018 for SWA).

An EMA copy of the weights, evaluated instead of the trained weights, usually generalises
better; see Tarvainen and Valpola, `Mean teachers are better role models
<https://arxiv.org/abs/1703.01780>`_ (2017) and Kaddour et al., `Stop Wasting My Time!
<https://arxiv.org/abs/2209.14981>`_ (2022).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, MutableMapping

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


def _named_tensors(module: nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """Every parameter and buffer under every name it has, and the non-persistent buffers' names.

    One walk over the modules (tied weights and shared modules appear once per name).
    """
    tensors: dict[str, torch.Tensor] = {}
    non_persistent: set[str] = set()
    for prefix, sub in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, param in sub._parameters.items():
            if param is not None:
                tensors[dot + name] = param
        for name, buffer in sub._buffers.items():
            if buffer is not None:
                tensors[dot + name] = buffer
                if name in sub._non_persistent_buffers_set:
                    non_persistent.add(dot + name)
    return tensors, non_persistent


def _strip_wrapper_prefixes(state: Mapping[str, object], names: Mapping[str, object]) -> Mapping:
    """Accept a state dict saved from a DDP-wrapped or compiled model (``module.`` keys)."""
    for prefix in _PREFIXES:
        if (
            state
            and all(k.startswith(prefix) for k in state)
            and not any(n.startswith(prefix) for n in names)
        ):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


_PLAIN = (torch.Tensor, nn.Parameter)


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t) not in _PLAIN and DTensor is not None and isinstance(t, DTensor)


class _Updates:
    """The pairs to average, grouped by (device, dtype) of the EMA side, and the pairs to copy."""

    __slots__ = ("converted", "copies", "groups", "seen")

    def __init__(self) -> None:
        self.groups: dict[tuple[torch.device, torch.dtype], tuple[list, list]] = {}
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.seen: set[int] = set()
        self.converted = False  # some model tensors were converted to the EMA's dtype/device

    def add(self, name: str, ema: torch.Tensor, value: torch.Tensor) -> None:
        plain = type(ema) in _PLAIN and type(value) in _PLAIN
        if not plain and not isinstance(ema, torch.Tensor):
            raise TypeError(f"ema_model['{name}'] must be a tensor, got {type(ema).__name__}")
        if ema.shape != value.shape:
            raise ValueError(
                f"compute_ema: '{name}' has shape {tuple(value.shape)} in model but "
                f"{tuple(ema.shape)} in ema_model"
            )
        if not plain:
            ema, value = _local_shards(name, ema, value)
        pointer = ema.data_ptr()
        if pointer == 0 or pointer in self.seen:  # empty, or tied: one tensor, several names
            return
        self.seen.add(pointer)
        if not (value.is_floating_point() or value.is_complex()):
            self.copies.append((ema, value))
            return
        dtype, device = ema.dtype, ema.device
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(
                f"compute_ema: '{name}' is {value.dtype} in model but {dtype} in "
                "ema_model; an average needs a floating ema tensor"
            )
        if value.dtype != dtype or value.device != device:
            value = value.to(device=device, dtype=dtype)
            self.converted = True
        group = self.groups.get((device, dtype))
        if group is None:
            group = self.groups[(device, dtype)] = ([], [])
        group[0].append(ema)
        group[1].append(value)


def _local_shards(
    name: str, ema: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """For DTensors, each rank's local shards, updated in place (no communication)."""
    ema_sharded, model_sharded = _is_dtensor(ema), _is_dtensor(value)
    if not (ema_sharded or model_sharded):  # another tensor subclass: use it as it is
        return ema, value
    if ema_sharded != model_sharded:
        raise TypeError(
            f"compute_ema: '{name}' is a DTensor in one of model / ema_model and a plain tensor "
            "in the other; shard both the same way (e.g. fully_shard both models, or use the "
            "sharded ema model's state_dict()), so every rank updates its own shard"
        )
    if ema.placements != value.placements:
        raise ValueError(
            f"compute_ema: '{name}' is sharded differently in model and ema_model "
            f"({value.placements} vs {ema.placements}); shard both the same way"
        )
    return ema.to_local(), value.to_local()


def _pair_modules(model: nn.Module, ema: nn.Module, updates: _Updates) -> None:
    """Pair the tensors of two modules by name.

    Same-architecture models take a fast walk over both module trees; otherwise every tensor
    is matched by its full name, which raises on a real mismatch.
    """
    if not _pair_same_tree(model, ema, updates):
        updates.__init__()
        _pair_by_name(_named_tensors(model)[0], _named_tensors(ema)[0], set(), updates)


def _pair_same_tree(model: nn.Module, ema: nn.Module, updates: _Updates) -> bool:
    """Pair module by module; False as soon as the two trees differ."""
    ema_modules = dict(ema.named_modules(remove_duplicate=False))
    count = 0
    for prefix, sub in model.named_modules(remove_duplicate=False):
        count += 1
        ema_sub = ema_modules.get(prefix)
        if ema_sub is None:
            return False
        dot = f"{prefix}." if prefix else ""
        for mine, theirs in (
            (sub._parameters, ema_sub._parameters),
            (sub._buffers, ema_sub._buffers),
        ):
            if mine.keys() != theirs.keys():
                return False
            for name, value in mine.items():
                ema_value = theirs[name]
                if value is None or ema_value is None:
                    if value is not ema_value:
                        return False
                    continue
                updates.add(dot + name, ema_value, value)
    return count == len(ema_modules)


def _pair_by_name(
    source: Mapping[str, torch.Tensor],
    target: Mapping[str, object],
    optional: set[str],
    updates: _Updates,
) -> None:
    """Pair ``source[name]`` with ``target[name]``; names in ``optional`` may be missing."""
    if len(target) != len(source) or any(n not in target for n in source):
        _raise_mismatch(source, target, optional)
    for name, value in source.items():
        ema_value = target.get(name)
        if ema_value is not None:
            updates.add(name, ema_value, value)


def _raise_mismatch(
    source: Mapping[str, object], target: Mapping[str, object], optional: set[str]
) -> None:
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
    if isinstance(ema_model, nn.Module):
        ema_model = _unwrap(ema_model)
    elif not isinstance(ema_model, Mapping):
        raise TypeError(
            "ema_model must be an nn.Module or a mapping of names to tensors (e.g. a "
            f"state_dict), got {type(ema_model).__name__}"
        )
    signature = _signature(model, ema_model)
    plans = _PLANS.setdefault(model, {}) if signature is not None else {}
    cached = plans.get(id(ema_model))
    plan = cached.resolve(ema_model, signature) if cached is not None else None
    if plan is None:
        updates = _Updates()
        if isinstance(ema_model, nn.Module):
            _pair_modules(model, ema_model, updates)
        else:
            source, non_persistent = _named_tensors(model)
            target = _strip_wrapper_prefixes(ema_model, source)
            _pair_by_name(source, target, non_persistent, updates)  # a state dict omits them
        plan = (list(updates.groups.values()), updates.copies)
        if signature is not None and not updates.converted:
            if len(plans) >= _MAX_PLANS:
                plans.clear()
            plans[id(ema_model)] = _CachedPlan(ema_model, signature, plan)
    groups, copies = plan
    weight = 1.0 - smoothing
    for ema_list, model_list in groups:
        torch._foreach_lerp_(ema_list, model_list, weight)
    if copies:
        ema_ints, model_ints = zip(*copies, strict=True)
        torch._foreach_copy_(list(ema_ints), list(model_ints))


# The pairing of a model with its EMA is checked once and reused while neither changes: the
# per-tensor checks cost about as much as the update itself on small models.
# Plans per model, keyed by the id of the EMA side (a few: e.g. a module and its state dict).
_PLANS: weakref.WeakKeyDictionary[nn.Module, dict[int, _CachedPlan]] = weakref.WeakKeyDictionary()
_MAX_PLANS = 4


def _signature(model: nn.Module, ema_model: nn.Module | Mapping) -> tuple | None:
    """The storage of every tensor of both sides, in order; None for tensor subclasses.

    Equal signatures mean the same memory is paired the same way: a replaced tensor, a
    ``.data`` swap (``model.to(...)``), a new or removed tensor all change it.
    """
    head: tuple = ()
    if isinstance(ema_model, nn.Module):
        values = _state_values(model) + _state_values(ema_model)
    else:
        head = tuple(ema_model)
        values = [*ema_model.values(), *_state_values(model)]
    if not set(map(type, values)) <= _SIGNED:
        return None
    return (head, *[None if value is None else value.data_ptr() for value in values])


def _state_values(root: nn.Module) -> list:
    """The parameters and buffers (or None) of every module, in a fixed order; a tight walk."""
    values: list = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        values += module._parameters.values()
        values += module._buffers.values()
        stack += [child for child in reversed(module._modules.values()) if child is not None]
    return values


_SIGNED = {torch.Tensor, nn.Parameter, type(None)}


class _CachedPlan:
    """A checked pairing, holding its tensors by weak reference (it keeps nothing alive)."""

    __slots__ = ("copies", "ema", "groups", "signature")

    def __init__(self, ema_model: object, signature: tuple, plan: tuple) -> None:
        groups, copies = plan
        self.ema = id(ema_model)
        self.signature = signature
        self.groups = [
            ([weakref.ref(t) for t in e], [weakref.ref(t) for t in m]) for e, m in groups
        ]
        self.copies = [(weakref.ref(e), weakref.ref(m)) for e, m in copies]

    def resolve(self, ema_model: object, signature: tuple) -> tuple | None:
        """The plan's tensors, or None if it no longer applies."""
        if id(ema_model) != self.ema or signature != self.signature:
            return None
        groups = []
        for ema_refs, model_refs in self.groups:
            ema_list = [r() for r in ema_refs]
            model_list = [r() for r in model_refs]
            # `is None`, not `in`: a membership test would compare tensors elementwise.
            if any(t is None for t in ema_list) or any(t is None for t in model_list):
                return None
            groups.append((ema_list, model_list))
        copies = [(e(), m()) for e, m in self.copies]
        if any(e is None or m is None for e, m in copies):
            return None
        return groups, copies
