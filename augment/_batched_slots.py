"""The slots of the batched chains: balanced draws of the operations, and the device path that
runs each operation on the samples that drew it, with sizes known on the host.

A layer of chains has ``R`` rows (samples, or AugMix's chains) and a set of ``K`` operations.
Its draw is a random injection of the rows into ``K c`` *slots*, ``c = ceil(P / K)`` of them per
operation (``P``: the rows the layer may change), made with one device permutation: the slot
decides the row's operation, and every slot's level and direction are drawn on their own.
Every row's operation is therefore uniform over the set, independent of its level, direction
and other layers, as in the PIL transforms; across a batch the draws are not independent: an
operation is drawn by at most ``c`` rows of a layer (sampling without replacement from ``c``
copies of each operation). AugMix's random chain depths are drawn the same way: a depth in
{1, 2, 3} for at most ``ceil(R / 3)`` chains each.

The device path (:func:`run_slots`) gathers a layer's slots in the order of the stages
(:data:`augment._batched_grouped._ORDER`), applies each operation to its own ``c`` rows (the
grouped path's uint8 stages, in their host-free forms), and writes the rows back; the slots
that no row took hold a spare row, whose result is dropped. Fixed shapes, no host reads, one
operation's work per slot: for accelerators and ``torch.compile``. The grouped CPU path reads
the same draws as per-row operation indices, so both paths give the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from augment._batched_grouped import _GROUPS, _ORDER, _STAGES, NOT_LUT, _Slice
from augment._batched_plan import plan_ops


class Slots(NamedTuple):
    """One draw of the slots of ``layers`` layers over ``R`` rows.

    ``per_op``: ``c``, slots per operation (a host int); ``slot``: (layers, R) int64, the slot
    of every row in every layer, ``K c`` (no slot) where the row is past its chain's depth;
    ``level`` and ``sign``: (layers, K c) float64, per slot.
    """

    per_op: int
    slot: Tensor
    level: Tensor
    sign: Tensor


def block_order(kinds: tuple[str, ...]) -> tuple[int, ...]:
    """The index in ``kinds`` of the operation of every block of ``c`` slots: the blocks in
    the order of the stages (the operations a stage applies adjacent, a repeated kind too)."""
    return tuple(sorted(range(len(kinds)), key=lambda j: _ORDER.index(kinds[j])))


def _perms(layers: int, size: int, g: torch.Generator | None, dev: torch.device) -> Tensor:
    """``layers`` independent random permutations of ``range(size)``, (layers, size) int64."""
    return torch.stack([torch.randperm(size, generator=g, device=dev) for _ in range(layers)])


def draw_slots(
    rows: int,
    n_ops: int,
    layers: int,
    random_depth: bool,
    g: torch.Generator | None,
    dev: torch.device,
) -> tuple[Tensor, Tensor, int]:
    """The slots of every row and layer, ``(slot, active, c)``: ``slot`` (layers, rows) int64
    (``n_ops c`` where ``active`` is False), ``active`` (layers, rows) bool.

    ``random_depth``: each row's chain stops after a depth uniform in {1, 2, 3} (``layers``
    must be 3), drawn balanced: row ``r`` holds one of ``3 D`` depth places ``t_r``
    (``D = ceil(rows / 3)``; depth ``t_r // D + 1``) and, in layer ``k``, position
    ``t_r - k D`` if that is ``>= 0`` (else it is past its depth).
    """
    if random_depth:
        d = -(-rows // 3)
        places = 3 * d
        t = torch.randperm(places, generator=g, device=dev)[:rows]
        pos = t - d * torch.arange(layers, device=dev).view(layers, 1)  # (layers, rows)
        active = pos >= 0
        pos = pos.clamp(min=0)
    else:
        places = rows
        pos = torch.arange(rows, device=dev).expand(layers, rows)
        active = torch.ones((), dtype=torch.bool, device=dev).expand(layers, rows)
    c = -(-places // n_ops)
    perm = _perms(layers, n_ops * c, g, dev)
    slot = torch.where(active, perm.gather(1, pos), n_ops * c)
    return slot, active, c


def _host_index(values: Sequence[int], dev: torch.device) -> Tensor:
    """A constant int64 index built on the host and copied without waiting."""
    return torch.tensor(values, dtype=torch.int64).to(dev, non_blocking=True)


def row_draws(slots: Slots) -> tuple[Tensor, Tensor, Tensor]:
    """Per row and layer (layers, R): the operation's index in the set (slot ``s`` draws
    operation ``s // c``; -1: past the chain's depth), its level and its direction, read from
    the row's slot."""
    m = slots.level.shape[1]
    at = slots.slot.clamp(max=m - 1)
    op = torch.where(slots.slot < m, slots.slot.div(slots.per_op, rounding_mode="floor"), -1)
    return op, slots.level.gather(1, at), slots.sign.gather(1, at)


def _rows_of_slots(slot: Tensor, m: int, spare: int) -> Tensor:
    """The row of every slot, (layers, m): ``spare`` for the slots no row took."""
    layers, rows = slot.shape
    out = torch.full((layers, m + 1), spare, dtype=torch.int64, device=slot.device)
    src = torch.arange(rows, device=slot.device).expand(layers, rows)
    return out.scatter_(1, slot, src)[:, :m]  # rows past their depth land on column m


def _stage_parts(kinds: tuple[str, ...], c: int) -> tuple[tuple[str, slice, dict[str, slice]], ...]:
    """Per stage present: its name, its slots' range and each of its operations' range in it."""
    names = [kinds[j] for j in block_order(kinds)]
    out = []
    for stage, members, _ in _GROUPS:
        blocks = [b for b, kind in enumerate(names) if kind in members]
        if not blocks:
            continue
        start = blocks[0] * c
        parts: dict[str, slice] = {}
        for kind in members:
            own = [b for b in blocks if names[b] == kind]
            if own:
                parts[kind] = slice(own[0] * c - start, (own[-1] + 1) * c - start)
        out.append((stage, slice(start, (blocks[-1] + 1) * c), parts))
    return tuple(out)


def run_slots(
    u: Tensor,
    copies: int,
    slots: Slots,
    kinds: Sequence[str],
) -> Tensor:
    """Every layer of the slots on ``copies`` copies of the uint8 levels ``u`` (N samples,
    ``R = copies N`` rows: row ``j N + i`` is copy ``j`` of sample ``i``). Returns the
    (R + 1, C, H, W) rows (the last one spare): ``[:R]`` is the result.

    Per layer: one gather of the slots' rows, in the order of the stages, each stage on its
    range (each operation on its ``c`` slots), one write back. Every row is changed by the
    first layer (its depth is at least 1), so the first layer reads ``u`` directly.
    """
    n, dev = u.shape[0], u.device
    rows = copies * n
    layers, m = slots.level.shape
    kinds = tuple(kinds)
    c = slots.per_op
    order = block_order(kinds)
    # the slots in the order of the stages: block b of the gathered rows is block order[b]
    by_stage = _host_index([j * c + i for j in order for i in range(c)], dev)
    level, sign = (t.index_select(1, by_stage) for t in (slots.level, slots.sign))
    op = _host_index([j for j in order for _ in range(c)], dev).expand(layers, m)
    plan = plan_ops(op, level, sign, kinds, u.shape[2], u.shape[3], only=NOT_LUT)
    at = _rows_of_slots(slots.slot, m, rows).index_select(1, by_stage)
    out = torch.empty((rows + 1, *u.shape[1:]), dtype=torch.uint8, device=u.device)
    stages = _stage_parts(kinds, c)
    for k in range(layers):
        if k == 0:  # the spare row (rows) reads sample 0 here
            v = u.index_select(0, at[0].remainder(n))
        else:
            v = out.index_select(0, at[k])
        for stage, s, parts in stages:
            sub = {key: t[k, s] for key, t in plan.items()}
            group = _Slice(v[s], sub, level[k, s], sign[k, s], parts, host_free=True)
            _STAGES[stage](group)
        out.index_copy_(0, at[k], v)
    return out
