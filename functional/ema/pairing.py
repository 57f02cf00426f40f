"""How the EMA finds its tensors: every parameter and buffer of the model paired with its EMA
counterpart, derived afresh on every call (no cache). Covers two module trees (a quick path for
the usual copy, a careful named walk otherwise), state dicts (tied weights recognised by memory,
DDP/compile key prefixes stripped) and DDP/FSDP2 models (each rank's DTensor shards). Private
to the package: :mod:`~functional.ema.update` and :mod:`~functional.ema.swap` use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import TypeGuard

import torch
from torch import nn

from surgery import WRAPPER_PREFIXES, unwrap_model

try:  # torch.distributed may be missing from some builds
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = None  # type: ignore[assignment,misc]


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
        caches = mine._non_persistent_buffers_set | theirs._non_persistent_buffers_set
        if not (
            _pair_slots(prefix, mine._parameters, theirs._parameters, pairs)
            and _pair_slots(prefix, mine._buffers, theirs._buffers, pairs, caches)
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
    caches: set[str] | frozenset[str] = frozenset(),
) -> bool:
    """Add one module's parameters (or buffers) to ``pairs``; False if the two differ in names
    or in which of them are None.

    ``caches`` are non-persistent buffers (ALiBi's bias tables, built on the first forward and
    grown with the longest input): averaged when both models hold one of the same shape, left
    alone when only one holds it or the shapes differ.
    """
    if own.keys() != other.keys():
        return False
    for name, value in own.items():
        ema_value = other[name]
        if name in caches and (
            value is None or ema_value is None or value.shape != ema_value.shape
        ):
            continue
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
    for prefix in WRAPPER_PREFIXES:
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
        if n not in source
        and n not in optional
        and isinstance(v, torch.Tensor)
        and not n.endswith("_extra_state")
    ]
    if missing or extra:
        raise ValueError(
            f"{caller}: model and ema_model must have the same parameters and buffers; "
            f"missing from ema_model: {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"not in model: {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )


def _memory_order(t: torch.Tensor) -> torch.Tensor | None:
    """A 1-D view of ``t``'s elements in the order they lie in memory, or None if they do not
    fill one block of memory (a strided slice, an expanded tensor).

    Contiguous and channels-last tensors qualify, as any permutation of a contiguous tensor.
    Two tensors with the same shape and strides list their elements in the same order, so
    element ``i`` of one view pairs with element ``i`` of the other.
    """
    if t.is_contiguous():
        return t.view(-1)
    strides = t.stride()
    permuted = t.permute(sorted(range(t.dim()), key=lambda d: -strides[d]))
    return permuted.view(-1) if permuted.is_contiguous() else None


def _same_dense_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` have the same strides and fill their memory densely (so that
    kernels that walk memory pair their elements correctly)."""
    return a.stride() == b.stride() and _memory_order(a) is not None


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
            own, own_caches = _named_tensors(model)
            ema_tensors, ema_caches = _named_tensors(ema_model)
            # Non-persistent buffers are caches (ALiBi's bias tables, built on the first
            # forward): averaged where both models hold one, never a mismatch where one does not.
            _pair_by_name(own, ema_tensors, own_caches | ema_caches, pairs)
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
