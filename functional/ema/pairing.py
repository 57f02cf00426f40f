"""Exponential moving average of model weights (Polyak averaging; Izmailov et al. 2018 for SWA).

An EMA copy of the weights, evaluated instead of the trained weights, usually generalises
better; see Tarvainen and Valpola, `Mean teachers are better role models
<https://arxiv.org/abs/1703.01780>`_ (2017) and Kaddour et al., `Stop Wasting My Time!
<https://arxiv.org/abs/2209.14981>`_ (2022).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, MutableMapping
from operator import attrgetter
from typing import TypeGuard

import torch
from torch import nn

from functional._args import check_bool, check_in_range, check_probability
from functional._values import check_step_scalar
from surgery import unwrap_model

try:  # torch.distributed may be missing from some builds
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = None  # type: ignore[assignment,misc]
try:
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # pragma: no cover
    FSDPModule = None  # type: ignore[assignment,misc]

__all__ = ["compute_ema", "ema_smoothing", "swap_ema_weights", "use_ema_weights"]

# State-dict key prefixes added by the wrappers that surgery.unwrap_model looks through.
_PREFIXES = ("module.", "_orig_mod.")

# A time string of the EMA seed: an integer number of batches or epochs ('50ba', '1ep').
_TIME_STRING = re.compile(r"([0-9]+)(ba|ep)")


def _parse_time(value: str, name: str) -> tuple[int, str]:
    match = _TIME_STRING.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"{name} must be a number or a time string of an integer and a unit, 'ba' (batches) "
            f"or 'ep' (epochs), such as '50ba' or '1ep'; got {value!r}"
        )
    return int(match.group(1)), match.group(2)


def ema_smoothing(half_life: float | str, update_interval: float | str = 1) -> float:
    r"""The EMA smoothing factor that halves old weights' influence every ``half_life`` steps.

    .. math::
        s = \exp\Bigl(-\ln 2 \cdot \frac{\text{update\_interval}}{\text{half\_life}}\Bigr)

    Both arguments are numbers in the same unit (batches or epochs), or, as in the EMA seed
    (Composer's ``EMA(half_life='50ba', update_interval='1ba')``), time strings: an integer
    followed by ``'ba'`` (batches) or ``'ep'`` (epochs). The units of the two strings must
    match; a number given as ``update_interval`` next to a time-string ``half_life`` is in
    ``half_life``'s unit (the default 1 means one update per batch for ``'50ba'``, per epoch
    for ``'2ep'``). Call :func:`compute_ema` every ``update_interval`` batches (or epochs) with
    the result.

    Args:
        half_life: half-life of the average, ``>= 0``: a number of steps, or a time string
            (``'50ba'``, ``'1ep'``; integer values). 0 means no averaging (``s = 0``),
            ``math.inf`` means no update (``s = 1``).
        update_interval: steps between two EMA updates, ``> 0`` and finite, in the units of
            ``half_life``; or a time string in the same unit as a time-string ``half_life``.

    Returns:
        The smoothing factor in ``[0, 1]`` for :func:`compute_ema`.

    Raises:
        ValueError: for a negative or NaN value, a malformed time string (a unit other than
            ``'ba'``/``'ep'``, a non-integer value such as ``'1.5ba'``), units that differ, or a
            time-string ``update_interval`` with a numeric ``half_life``.

    Example:
        >>> import functional as F
        >>> F.ema_smoothing(half_life=10)
        0.9330329915368074
        >>> F.ema_smoothing(half_life=10, update_interval=10)
        0.5
        >>> F.ema_smoothing("50ba", "25ba") == F.ema_smoothing(50, 25)
        True
    """
    unit = None
    if isinstance(half_life, str):
        half_life, unit = _parse_time(half_life, "half_life")
    if isinstance(update_interval, str):
        interval, interval_unit = _parse_time(update_interval, "update_interval")
        if unit is None:
            raise ValueError(
                f"update_interval is a time string ({update_interval!r}) but half_life is a "
                f"number ({half_life!r}); give both as time strings in one unit, or both as numbers"
            )
        if interval_unit != unit:
            raise ValueError(
                f"update_interval and half_life must be in the same unit, got "
                f"update_interval={update_interval!r} and half_life in {unit!r}"
            )
        update_interval = interval
    half_life = check_in_range(half_life, "half_life", 0.0, math.inf)
    update_interval = check_in_range(
        update_interval, "update_interval", 0.0, math.inf, low_inclusive=False
    )
    if math.isinf(update_interval):
        raise ValueError(f"update_interval must be finite, got {update_interval}")
    if half_life == 0.0:
        return 0.0
    return math.exp(-math.log(2.0) * update_interval / half_life)


_PLAIN = (torch.Tensor, nn.Parameter)
_PLAIN_KINDS = {torch.Tensor, nn.Parameter}


def _is_dtensor(t: torch.Tensor) -> TypeGuard[DTensor]:
    return type(t) not in _PLAIN and DTensor is not None and isinstance(t, DTensor)


class _Pairs:
    """The (ema, model) tensor pairs of one call, derived afresh on every call (no cache).

    ``groups`` maps the (device, dtype) of the EMA side to three lists: the EMA tensors, the
    model tensors converted to that device and dtype, and the model tensors as they are (the
    targets of ``train_with_ema_weights``). ``copies`` holds the integer pairs. A tensor seen
    under several names (tied weights) is paired once.
    """

    __slots__ = ("by_storage", "caller", "copies", "groups", "seen")

    def __init__(self, caller: str, *, by_storage: bool) -> None:
        self.caller = caller
        self.groups: dict[tuple[torch.device, torch.dtype], tuple[list, list, list]] = {}
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.seen: set[int] = set()
        # Entries of a state dict are distinct tensor objects even for tied weights: recognise
        # those by their memory. Module tensors are recognised by identity (compile-friendly).
        self.by_storage = by_storage

    def add_all_plain(self, ema_all: list, model_all: list) -> bool:
        """Pair whole lists at once if every pair is plain, same shape, dtype and device.

        Checks run over the whole lists (C-level ``map``), so the cost per tensor stays a few
        list operations; False (nothing added) when any pair needs :meth:`add`.
        """
        kinds = set(map(type, ema_all))
        kinds.update(map(type, model_all))
        if type(None) in kinds:  # parameters registered as None (a conv's absent bias)
            kinds.discard(type(None))
            if any((e is None) != (m is None) for e, m in zip(ema_all, model_all, strict=True)):
                return False
            ema_all = [e for e in ema_all if e is not None]
            model_all = [m for m in model_all if m is not None]
        if not kinds <= _PLAIN_KINDS or self.groups or self.copies:
            return False
        get_dtype, get_device = attrgetter("dtype"), attrgetter("device")
        dtypes = list(map(get_dtype, model_all))
        devices = list(map(get_device, model_all))
        if (
            list(map(attrgetter("shape"), ema_all)) != list(map(attrgetter("shape"), model_all))
            or list(map(get_dtype, ema_all)) != dtypes
            or list(map(get_device, ema_all)) != devices
            or len(set(map(id, ema_all))) != len(ema_all)  # tied weights: the careful path
        ):
            return False
        keys = list(zip(devices, dtypes, strict=True))
        for key in dict.fromkeys(keys):  # a few keys, in order of appearance
            ema_list = [e for e, k in zip(ema_all, keys, strict=True) if k == key]
            model_list = [m for m, k in zip(model_all, keys, strict=True) if k == key]
            if key[1].is_floating_point or key[1].is_complex:
                self.groups[key] = (ema_list, model_list, model_list)
            else:
                self.copies += zip(ema_list, model_list, strict=True)
        return True

    def add(self, prefix: str, name: str, ema: object, value: torch.Tensor) -> None:
        if not isinstance(ema, torch.Tensor):
            raise TypeError(
                f"ema_model['{prefix}{name}'] must be a tensor, got {type(ema).__name__}"
            )
        if ema.shape != value.shape:
            raise ValueError(
                f"{self.caller}: '{prefix}{name}' has shape {tuple(value.shape)} in model but "
                f"{tuple(ema.shape)} in ema_model"
            )
        if not (type(ema) in _PLAIN and type(value) in _PLAIN):
            ema, value = _local_shards(self.caller, prefix + name, ema, value)
        if ema.numel() == 0:
            return
        key = ema.data_ptr() if self.by_storage else id(ema)
        if key in self.seen:  # tied: one tensor, several names
            return
        self.seen.add(key)
        if not (value.is_floating_point() or value.is_complex()):
            self.copies.append((ema, value))
            return
        dtype, device = ema.dtype, ema.device
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(
                f"{self.caller}: '{prefix}{name}' is {value.dtype} in model but {dtype} in "
                "ema_model; an average needs a floating ema tensor"
            )
        group = self.groups.get((device, dtype))
        if group is None:
            group = self.groups[(device, dtype)] = ([], [], [])
        group[0].append(ema)
        group[1].append(
            value if value.dtype == dtype and value.device == device else value.to(device, dtype)
        )
        group[2].append(value)


def _local_shards(
    caller: str, name: str, ema: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """For DTensors, each rank's local shards, updated in place (no communication)."""
    if not (_is_dtensor(ema) or _is_dtensor(value)):  # another tensor subclass: as it is
        return ema, value
    if not (_is_dtensor(ema) and _is_dtensor(value)):
        raise TypeError(
            f"{caller}: '{name}' is a DTensor in one of model / ema_model and a plain tensor "
            "in the other; shard both the same way (e.g. fully_shard both models, or use the "
            "sharded ema model's state_dict()), so every rank updates its own shard"
        )
    if ema.placements != value.placements:
        raise ValueError(
            f"{caller}: '{name}' is sharded differently in model and ema_model "
            f"({value.placements} vs {ema.placements}); shard both the same way"
        )
    return ema.to_local(), value.to_local()


def _pair_modules(model: nn.Module, ema: nn.Module, pairs: _Pairs) -> bool:
    """Pair the tensors of two module trees; False as soon as the trees differ.

    The usual case (the EMA is a copy of the model: same tree, same dtypes, plain tensors)
    takes the quick path: one walk that only collects the tensors, then checks over whole
    lists. Anything else takes the careful path, tensor by tensor with names for the errors.
    """
    if not torch.compiler.is_compiling():
        collected = _collect_same_tree(model, ema)
        if collected is not None and pairs.add_all_plain(*collected):
            return True
    return _pair_same_tree(model, ema, pairs)


def _collect_same_tree(
    model: nn.Module, ema: nn.Module
) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
    """Every (ema, model) tensor of two module trees with the same names in the same order."""
    ema_all: list = []
    model_all: list = []
    stack: list[tuple[nn.Module | None, nn.Module | None]] = [(model, ema)]
    while stack:
        mine, theirs = stack.pop()
        if mine is None or theirs is None:  # a child registered as None: the careful path
            return None
        for own, other in (
            (mine._parameters, theirs._parameters),
            (mine._buffers, theirs._buffers),
        ):
            if own and list(own) != list(other):
                return None
            model_all += own.values()
            ema_all += other.values()
        children, ema_children = mine._modules, theirs._modules
        if list(children) != list(ema_children):
            return None
        stack += zip(children.values(), ema_children.values(), strict=True)
    return ema_all, model_all


def _pair_same_tree(model: nn.Module, ema: nn.Module, pairs: _Pairs) -> bool:
    """The careful walk: tensor by tensor, with names; False as soon as the trees differ."""
    stack = [("", model, ema)]
    while stack:
        prefix, mine, theirs = stack.pop()
        if not (
            _pair_slots(prefix, mine._parameters, theirs._parameters, pairs)
            and _pair_slots(prefix, mine._buffers, theirs._buffers, pairs)
        ):
            return False
        children = _paired_children(prefix, mine._modules, theirs._modules)
        if children is None:
            return False
        stack += children
    return True


def _pair_slots(
    prefix: str,
    own: Mapping[str, torch.Tensor | None],
    other: Mapping[str, torch.Tensor | None],
    pairs: _Pairs,
) -> bool:
    """Add one module's parameters (or buffers) to ``pairs``; False if the two differ in names
    or in which of them are None."""
    if own.keys() != other.keys():
        return False
    for name, value in own.items():
        ema_value = other[name]
        if value is None or ema_value is None:
            if value is not ema_value:
                return False
            continue
        pairs.add(prefix, name, ema_value, value)
    return True


def _paired_children(
    prefix: str,
    children: Mapping[str, nn.Module | None],
    ema_children: Mapping[str, nn.Module | None],
) -> list[tuple[str, nn.Module, nn.Module]] | None:
    """The (prefix, model child, ema child) triples to walk next; None if the children differ."""
    if children.keys() != ema_children.keys():
        return None
    paired = []
    for name, child in children.items():
        ema_child = ema_children[name]
        if child is None or ema_child is None:
            if child is not ema_child:
                return None
            continue
        paired.append((f"{prefix}{name}.", child, ema_child))
    return paired


def _named_tensors(module: nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """Every parameter and buffer under every name it has, and the non-persistent buffers' names."""
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


def _pair_by_name(
    source: Mapping[str, torch.Tensor],
    target: Mapping[str, object],
    optional: set[str],
    pairs: _Pairs,
) -> None:
    """Pair ``source[name]`` with ``target[name]``; names in ``optional`` may be missing."""
    if len(target) != len(source) or any(n not in target for n in source):
        _raise_mismatch(pairs.caller, source, target, optional)
    for name, value in source.items():
        ema_value = target.get(name)
        if ema_value is not None:
            pairs.add("", name, ema_value, value)


def _raise_mismatch(
    caller: str, source: Mapping[str, object], target: Mapping[str, object], optional: set[str]
) -> None:
    missing = [n for n in source if n not in target and n not in optional]
    extra = [
        n
        for n, v in target.items()
        if n not in source and isinstance(v, torch.Tensor) and not n.endswith("_extra_state")
    ]
    if missing or extra:
        raise ValueError(
            f"{caller}: model and ema_model must have the same parameters and buffers; "
            f"missing from ema_model: {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"not in model: {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )


def _pairs(
    model: nn.Module, ema_model: nn.Module | Mapping[str, torch.Tensor], caller: str
) -> _Pairs:
    """Check the arguments and pair every tensor of ``model`` with its EMA counterpart."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    model = unwrap_model(model)
    if isinstance(ema_model, nn.Module):
        ema_model = unwrap_model(ema_model)
        pairs = _Pairs(caller, by_storage=False)
        if not _pair_modules(model, ema_model, pairs):
            pairs = _Pairs(caller, by_storage=False)
            _pair_by_name(_named_tensors(model)[0], _named_tensors(ema_model)[0], set(), pairs)
        return pairs
    if not isinstance(ema_model, Mapping):
        raise TypeError(
            "ema_model must be an nn.Module or a mapping of names to tensors (e.g. a "
            f"state_dict), got {type(ema_model).__name__}"
        )
    pairs = _Pairs(caller, by_storage=True)
    source, non_persistent = _named_tensors(model)
    target = _strip_wrapper_prefixes(ema_model, source)
    _pair_by_name(source, target, non_persistent, pairs)  # a state dict omits them
    return pairs


def _check_smoothing(smoothing: object) -> float | torch.Tensor:
    """A Python number or a 0-d floating tensor in [0, 1] (see ``check_step_scalar``)."""
    return check_step_scalar(
        smoothing, "smoothing", "in [0, 1]", lambda t: (t >= 0) & (t <= 1), check_probability
    )


@torch.no_grad()
def compute_ema(
    model: nn.Module,
    ema_model: nn.Module | MutableMapping[str, torch.Tensor],
    smoothing: float | torch.Tensor = 0.99,
    *,
    train_with_ema_weights: bool = False,
) -> None:
    r"""Move ``ema_model``'s weights towards ``model``'s, in place (exponential moving average).

    For every floating parameter and buffer, matched by name:

    .. math::
        w_\text{ema} \leftarrow s\, w_\text{ema} + (1 - s)\, w_\text{model}

    computed as one fused ``torch._foreach_lerp_`` per (device, dtype) group. Integer buffers
    (e.g. BatchNorm's ``num_batches_tracked``) are copied. The EMA may be kept in another dtype
    or on another device than the model (e.g. float32 EMA of a bfloat16 model).

    The pairing of the two sides is derived on every call from the modules as they are (a
    walk over both module trees, no cache and no hidden state), so a replaced tensor, a
    ``.data`` edit or a model moved with ``.to()`` is always seen; the walk costs a few
    microseconds per module, small next to the update itself.

    ``model`` and ``ema_model`` may be wrapped in ``DistributedDataParallel`` or
    ``torch.compile`` (their inner modules are used) or sharded with FSDP2's ``fully_shard``
    (every rank updates its local shards, no communication). ``ema_model`` may also be a dict
    of tensors, updated in place; non-persistent buffers, which a state dict leaves out, are
    then skipped. This is the light form of the EMA seed's ``ShadowModel`` (a copy that tracks
    the parameters and buffers of a source model): no second module, only its tensors::

        ema_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        F.compute_ema(model, ema_state, smoothing)          # every step
        model.load_state_dict(ema_state)                    # or F.use_ema_weights(model, ema_state)

    Under ``torch.compile(fullgraph=True)`` it traces without a graph break and a
    ``smoothing`` that changes between calls does not recompile from step to step (a 0-d
    tensor never recompiles; a Python float once, dynamo's automatic-dynamic step); it
    reads no tensor value on the host (a tensor ``smoothing`` is range-checked on the CPU
    eagerly, by a device-side assert on accelerators; under compile neither form is
    range-checked).

    Args:
        model: the trained model.
        ema_model: the averaged copy (same architecture), or a name → tensor mapping.
        smoothing: :math:`s` in ``[0, 1]``, a number or a 0-d tensor; see
            :func:`ema_smoothing`. (The EMA seed states the open interval (0, 1); the end
            points are allowed here: 0 copies the model, 1 leaves the EMA unchanged.)
        train_with_ema_weights: the EMA seed's option: after the update, copy the EMA's
            weights back into ``model``, so that training continues from the averaged
            weights (optimizer state is left as it is).

    Raises:
        ValueError: if names or shapes do not match, or ``smoothing`` is out of range.

    Example:
        >>> import copy, torch, functional as F
        >>> model = torch.nn.Linear(3, 1)
        >>> ema = copy.deepcopy(model)
        >>> with torch.no_grad():
        ...     _ = model.weight.add_(1.0)
        >>> F.compute_ema(model, ema, smoothing=0.9)
        >>> torch.allclose(ema.weight, 0.9 * (model.weight - 1) + 0.1 * model.weight)
        True
        >>> state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        >>> F.compute_ema(model, state, smoothing=0.5)   # a state dict as the EMA
    """
    smoothing = _check_smoothing(smoothing)
    check_bool(train_with_ema_weights, "train_with_ema_weights")
    pairs = _pairs(model, ema_model, "compute_ema")
    for (device, dtype), (ema_list, model_list, originals) in pairs.groups.items():
        if isinstance(smoothing, torch.Tensor):
            weight = (1.0 - smoothing).to(device=device, dtype=dtype)
            torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
        elif torch.compiler.is_compiling():
            # A float passed as a Scalar argument would be specialised (a recompile per value);
            # as a factor of a tensor it stays a graph input.
            weight = torch.ones((), device=device, dtype=dtype) * (1.0 - smoothing)
            torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
        else:
            torch._foreach_lerp_(ema_list, model_list, 1.0 - smoothing)
        if train_with_ema_weights:
            torch._foreach_copy_(originals, ema_list)
    if pairs.copies:
        ema_ints, model_ints = zip(*pairs.copies, strict=True)
        torch._foreach_copy_(list(ema_ints), list(model_ints))


# Integer dtypes of each element size, to swap any tensor's bits in place.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of ``t``'s memory (same elements, same strides)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_floating_point():
        return t.view(_BITS[t.element_size()])
    return t


@torch.no_grad()
def swap_ema_weights(
    model: nn.Module, ema_model: nn.Module | MutableMapping[str, torch.Tensor]
) -> None:
    r"""Exchange the values of ``model``'s and ``ema_model``'s parameters and buffers, in place.

    Every floating and integer parameter and buffer, paired by name as in
    :func:`compute_ema`, trades its contents with its partner, bit for bit, through three
    in-place XORs of an integer view of the memory (:math:`a \mathrel{\oplus}= b,\
    b \mathrel{\oplus}= a,\ a \mathrel{\oplus}= b`): no copy of the model and no temporary
    (O(1) extra memory), and every tensor object, its storage, the optimizer's references and
    its state stay where they are. Calling it twice restores both sides exactly.

    This evaluates with the EMA weights without a third copy of the model (see
    :func:`use_ema_weights` for the context-manager form). It works through
    ``DistributedDataParallel`` and ``torch.compile`` wrappers (their inner modules) and on
    FSDP2 (``fully_shard``) models, whose ranks swap their local shards with no communication
    (FSDP modules are first returned to their sharded state with ``reshard()``, which an
    evaluation forward pass leaves unsharded at the root); call it on every rank, between
    steps. Both
    sides must keep each tensor in the same dtype and on the same device (a float32 EMA of a
    bfloat16 model cannot be swapped; load it instead).

    Args:
        model: the trained model (or its wrapper).
        ema_model: its EMA copy, or a name → tensor mapping such as the state dict of
            :func:`compute_ema`'s docstring.

    Raises:
        ValueError: if names or shapes do not match.
        TypeError: if a pair differs in dtype or device.

    Example:
        >>> import copy, torch, functional as F
        >>> model = torch.nn.Linear(3, 1)
        >>> ema = copy.deepcopy(model)
        >>> with torch.no_grad():
        ...     _ = ema.weight.zero_()
        >>> F.swap_ema_weights(model, ema)
        >>> bool((model.weight == 0).all())
        True
        >>> F.swap_ema_weights(model, ema)
        >>> bool((ema.weight == 0).all())
        True
    """
    for side in (model, ema_model):
        if isinstance(side, nn.Module):
            _reshard(side)
    pairs = _pairs(model, ema_model, "swap_ema_weights")
    swaps = list(pairs.copies)
    for ema_list, _, originals in pairs.groups.values():
        swaps += zip(ema_list, originals, strict=True)
    for ema, value in swaps:  # all checked before anything is swapped
        if ema.dtype != value.dtype or ema.device != value.device:
            raise TypeError(
                "swap_ema_weights: a tensor has dtype/device "
                f"{value.dtype}/{value.device} in model but {ema.dtype}/{ema.device} in "
                "ema_model; a swap in place needs the same on both sides"
            )
    seen: set[int] = set()
    for ema, value in swaps:
        if value.data_ptr() in seen:  # a tied tensor of the model: swapped once
            continue
        seen.add(value.data_ptr())
        a, b = _as_bits(value), _as_bits(ema)
        a.bitwise_xor_(b)
        b.bitwise_xor_(a)
        a.bitwise_xor_(b)


def _reshard(module: nn.Module) -> None:
    """Put FSDP2 modules back to their sharded parameters (the root keeps its parameters
    unsharded after a forward pass); frees the unsharded copies, no communication."""
    if FSDPModule is None:
        return
    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.reshard()


@contextlib.contextmanager
def use_ema_weights(
    model: nn.Module, ema_model: nn.Module | MutableMapping[str, torch.Tensor]
) -> Iterator[nn.Module]:
    """Inside the block, ``model`` holds the EMA weights; on leaving, its own weights are back.

    The context-manager form of :func:`swap_ema_weights` (swap on entry, swap back on exit,
    also when the block raises); the block holds ``ema_model``'s former contents in
    ``ema_model``. Yields ``model``.

    Example:
        >>> import copy, torch, functional as F
        >>> model = torch.nn.Linear(3, 1)
        >>> ema = copy.deepcopy(model)
        >>> with torch.no_grad():
        ...     _ = ema.bias.fill_(5.0)
        >>> with F.use_ema_weights(model, ema):
        ...     float(model.bias.detach())
        5.0
        >>> float(model.bias.detach()) == 5.0
        False
    """
    swap_ema_weights(model, ema_model)
    try:
        yield model
    finally:
        swap_ema_weights(model, ema_model)
