"""Evaluating with the EMA weights: :func:`swap_ema_weights` exchanges the model's and the EMA's
tensors bit for bit in place (multi-tensor copies through a scratch of at most 32 MiB, or three
XORs for strided tensors), :func:`use_ema_weights` is its context-manager form and watches for
checkpoints taken inside it; FSDP2 modules are resharded first so that each rank swaps its local
shards."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, MutableMapping

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from functional._args import check_one_of
from functional.ema.pairing import _memory_order, _pairs
from surgery import unwrap_model

try:  # torch.distributed may be missing from some builds
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # pragma: no cover
    FSDPModule = None  # type: ignore[assignment,misc]

__all__ = ["swap_ema_weights", "use_ema_weights"]

# Integer dtypes of each element size, to swap any tensor's bits in place.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# The most memory a swap borrows: its scratch buffer, one per (device, element size) in turn.
_SCRATCH_BYTES = 32 * 2**20
# Devices that swap by three XORs rather than through the scratch: on the CPU a kernel launch
# costs nothing, and a fresh 32 MiB scratch costs more page faults than the XORs' extra traffic.
_XOR_DEVICE_TYPES = ("cpu",)
# What a state_dict() call inside use_ema_weights does.
_ON_STATE_DICT = ("warn", "raise", "allow")


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
    :func:`compute_ema`, trades its contents with its partner, bit for bit (copies of an
    integer view of the memory, so NaN payloads and signed zeros survive). Every tensor object,
    its storage, the optimizer's references and its state stay where they are. Calling it
    twice restores both sides exactly.

    The exchange goes through a scratch buffer of at most 32 MiB (less for a smaller model),
    freed on return: a round at a time, up to 32 MiB of tensors are copied to the scratch,
    their partners copied over them and the scratch copied into the partners, three
    multi-tensor copies per round. That reads and writes each side once plus the scratch
    twice, :math:`1.5\times` the minimum traffic, in a few dozen kernel launches for a
    ResNet-50, with extra memory that does not grow with the model. A pair whose memory is
    not one dense block (a strided slice) or whose two sides differ in strides is swapped by
    three in-place XORs instead (:math:`a \mathrel{\oplus}= b,\ b \mathrel{\oplus}= a,\
    a \mathrel{\oplus}= b`, no scratch, :math:`2.25\times` the minimum traffic), and so are
    CPU tensors: there a kernel launch costs nothing and a fresh scratch costs page faults.

    This evaluates with the EMA weights without a third copy of the model (see
    :func:`use_ema_weights` for the context-manager form). It works through
    ``DistributedDataParallel`` and ``torch.compile`` wrappers (their inner modules) and on
    FSDP2 (``fully_shard``) models, whose ranks swap their local shards with no communication
    (FSDP modules are first returned to their sharded state with ``reshard()``, which an
    evaluation forward pass leaves unsharded at the root); call it on every rank, between
    steps. Both
    sides must keep each tensor in the same dtype and on the same device (a float32 EMA of a
    bfloat16 model cannot be swapped; load it instead).

    Between a call and the next, ``model`` holds the EMA weights and ``ema_model`` the
    training weights: a training checkpoint saved then would resume from the EMA weights.
    :func:`use_ema_weights` watches ``state_dict()`` calls in its block for this; with this
    function, save only after swapping back.

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
    _swap_(swaps)


def _swap_(swaps: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Exchange the memory of every (ema, model) pair; tied tensors once."""
    seen: set[int] = set()
    by_copies: dict[tuple[torch.device, torch.dtype], list] = {}
    for ema, value in swaps:
        if value.data_ptr() in seen:  # a tied tensor of the model: swapped once
            continue
        seen.add(value.data_ptr())
        a, b = _as_bits(value), _as_bits(ema)
        if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
            continue  # one tensor on both sides: nothing to exchange (XORs would zero it)
        flat_a, flat_b = _memory_order(a), _memory_order(b)
        if (
            a.device.type not in _XOR_DEVICE_TYPES
            and flat_a is not None
            and flat_b is not None
            and a.stride() == b.stride()
        ):
            by_copies.setdefault((a.device, a.dtype), []).append((flat_a, flat_b))
        else:  # on the CPU, or strided: three XORs, in place
            a.bitwise_xor_(b)
            b.bitwise_xor_(a)
            a.bitwise_xor_(b)
    for (device, dtype), flats in by_copies.items():
        _swap_through_scratch(flats, device, dtype)


def _swap_through_scratch(
    flats: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, dtype: torch.dtype
) -> None:
    """Swap 1-D pairs through a scratch buffer of at most ``_SCRATCH_BYTES``, a round at a time:
    three multi-tensor copies per round (scratch ← a, a ← b, b ← scratch)."""
    total = sum(a.numel() for a, _ in flats)
    size = min(total, _SCRATCH_BYTES // dtype.itemsize)
    if size == 0:
        return
    scratch = torch.empty(size, dtype=dtype, device=device)
    for pieces in _rounds(flats, scratch):
        a, b, tmp = (list(side) for side in zip(*pieces, strict=True))
        torch._foreach_copy_(tmp, a)
        torch._foreach_copy_(a, b)
        torch._foreach_copy_(b, tmp)


def _rounds(
    flats: list[tuple[torch.Tensor, torch.Tensor]], scratch: torch.Tensor
) -> Iterator[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """Cut the pairs into rounds that fit in ``scratch``: (a piece, b piece, scratch piece)
    triples; a tensor larger than what a round has left continues in the next round."""
    size = scratch.numel()
    used, pieces = 0, []
    for a, b in flats:
        start, n = 0, a.numel()
        while start < n:
            end = start + min(n - start, size - used)
            pieces.append((a[start:end], b[start:end], scratch[used : used + end - start]))
            used += end - start
            start = end
            if used == size:
                yield pieces
                used, pieces = 0, []
    if pieces:
        yield pieces


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
    model: nn.Module,
    ema_model: nn.Module | MutableMapping[str, torch.Tensor],
    *,
    on_state_dict: str = "warn",
) -> Iterator[nn.Module]:
    """Inside the block, ``model`` holds the EMA weights; on leaving, its own weights are back.

    The context-manager form of :func:`swap_ema_weights` (swap on entry, swap back on exit,
    also when the block raises); the block holds ``ema_model``'s former contents in
    ``ema_model``. Yields ``model``.

    **Checkpoints.** Inside the block ``model.state_dict()`` holds the EMA weights and
    ``ema_model.state_dict()`` the training weights, so a training checkpoint saved there
    would resume from the EMA weights and average into the training weights. Calling
    ``state_dict()`` on ``model`` or on an ``ema_model`` module inside the block therefore
    warns (``on_state_dict="warn"``, the default: a ``UserWarning`` that says the fix), raises
    a ``RuntimeError`` before anything is saved (``"raise"``), or passes silently
    (``"allow"``: the block is *meant* to hand out the EMA weights, e.g. to export them for
    inference with ``torch.save(model.state_dict(), ...)``, ``torch.export`` or an ONNX
    export; a state dict shares memory with the model, so save or copy it inside the block).
    Save training checkpoints outside the block; the simplest export of the EMA
    weights is ``ema_model.state_dict()`` outside it. An ``ema_model`` given as a dict of
    tensors holds the training weights inside the block and cannot be watched: do not save it
    there.

    Args:
        model: the trained model (or its wrapper).
        ema_model: its EMA copy, or a name → tensor mapping.
        on_state_dict: ``"warn"``, ``"raise"`` or ``"allow"``: what a ``state_dict()`` call on
            ``model`` or ``ema_model`` does inside the block.

    Raises:
        ValueError: for another ``on_state_dict``.
        RuntimeError: with ``on_state_dict="raise"``, from a ``state_dict()`` call in the block.

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
        >>> with F.use_ema_weights(model, ema, on_state_dict="allow"):
        ...     exported = copy.deepcopy(model.state_dict())  # the EMA weights, for inference
        >>> float(exported["bias"])
        5.0
    """
    check_one_of(on_state_dict, "on_state_dict", _ON_STATE_DICT)
    swap_ema_weights(model, ema_model)
    handles = []
    try:
        if on_state_dict != "allow":
            handles = _watch_state_dicts(model, ema_model, on_state_dict)
        yield model
    finally:
        for handle in handles:
            handle.remove()
        swap_ema_weights(model, ema_model)


def _watch_state_dicts(
    model: nn.Module, ema_model: nn.Module | MutableMapping[str, torch.Tensor], action: str
) -> list[RemovableHandle]:
    """Hooks that warn or raise when ``state_dict()`` is called on either side while swapped
    (a pre-hook runs for the module whose state dict is taken and for each of its children)."""
    sides = [("model", "the EMA weights", unwrap_model(model))]
    if isinstance(ema_model, nn.Module):
        sides.append(("ema_model", "the training weights", unwrap_model(ema_model)))
    return [
        module.register_state_dict_pre_hook(_StateDictWatch(name, holds, action))
        for name, holds, module in sides
    ]


class _StateDictWatch:
    """A state-dict pre-hook of :func:`use_ema_weights`: warns or raises; registered on the
    (unwrapped) root module, so it runs once per ``state_dict()`` call of the root or of a
    wrapper around it."""

    def __init__(self, side: str, holds: str, action: str) -> None:
        self.message = (
            f"{side}.state_dict() was called inside use_ema_weights, where {side} holds "
            f"{holds}: a training checkpoint saved here would resume from the EMA weights and "
            "average into the training weights. Save training checkpoints outside the block; "
            "to export the EMA weights, save ema_model.state_dict() outside the block, or "
            "pass use_ema_weights(..., on_state_dict='allow')"
        )
        self.action = action

    def __call__(self, module: nn.Module, prefix: str, keep_vars: bool) -> None:
        if self.action == "raise":
            raise RuntimeError(self.message)
        warnings.warn(self.message, UserWarning, stacklevel=3)
