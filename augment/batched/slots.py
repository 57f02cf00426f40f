"""The slots of the batched chains: balanced draws of the operations, and the device path that
runs each operation on the rows that drew it, with sizes known on the host.

Layer ``k`` of the chains has a set of ``K`` operations and ``P_k`` *positions* (every row, or
for AugMix's random depths the rows still in their chain: see :func:`draw_slots`), and ``K
c_k`` *slots*, ``c_k = ceil(P_k / K)`` per operation. A random permutation puts one position in
every slot; the slot decides the row's operation, and every slot draws its level and
direction. Every row's operation is therefore uniform over the set, independent of its level,
direction and other layers, as in the PIL transforms; across a batch the draws are not
independent: an operation is drawn by at most ``c_k`` rows of a layer (sampling without
replacement from ``c_k`` copies of each operation). AugMix's random chain depths are drawn the
same way: a depth in {1, 2, 3} for at most ``ceil(R / 3)`` chains each, and layer ``k`` has
slots for the chains deeper than ``k`` only.

The device path (:func:`run_slots`) gathers a layer's slots in device order
(:mod:`augment.batched.device`: the blocks of operations that one stage applies adjacent),
applies each stage to its own range of rows and writes the rows back; the slots that hold no
row hold a spare one, whose result is dropped. Fixed shapes, no host reads, one operation's
work per slot: for accelerators and ``torch.compile``. The grouped CPU path reads the same
draws as per-row operation indices (:func:`row_draws`), so both paths give the same values.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from augment.batched.device import (
    apply_layer,
    block_order,
    host_cache,
    layout,
    on_device,
    plan_slots,
)


class Slots(NamedTuple):
    """One draw of the slots of every layer over ``rows`` rows.

    ``per_op``: ``c_k`` per layer, slots per operation (host ints); ``order``: the index in the
    set of the operation of every block of ``c_k`` slots (device order, the same in every
    layer); ``held``: per layer, the (K c_k,) int64 row in every slot (``>= rows``: a spare,
    a different one in every slot); ``spares``: the rows and spares there are; ``level``:
    (M,) float64, every slot's level (``M``: the slots of every layer, layer after layer), or
    one level for every slot; ``sign``: (M,) bool, every slot's direction (True: +1).
    """

    rows: int
    per_op: tuple[int, ...]
    order: tuple[int, ...]
    held: tuple[Tensor, ...]
    spares: int
    level: Tensor | float
    sign: Tensor


@functools.lru_cache(maxsize=64)
def _ramp(n: int) -> tuple[Tensor]:
    return (torch.arange(n),)


def draw_slots(
    rows: int,
    n_ops: int,
    layers: int,
    random_depth: bool,
    g: torch.Generator | None,
    dev: torch.device,
) -> tuple[tuple[int, ...], tuple[Tensor, ...], int]:
    """The slots of every layer: ``(per_op, held, spares)`` as in :class:`Slots`.

    Without ``random_depth`` the positions of every layer are the rows (positions past them:
    spares). With it (``layers`` = 3) each row's chain stops after a depth uniform in
    {1, 2, 3}, drawn balanced: row ``r`` holds one of ``3 D`` places ``t_r``
    (``D = ceil(rows / 3)``, depth ``t_r // D + 1``) and, in layer ``k``, position
    ``t_r - k D`` if that is ``>= 0`` (else its chain has ended): layer ``k`` has ``(3 - k) D``
    positions.
    """
    if random_depth:
        d = -(-rows // 3)
        positions = [(3 - k) * d for k in range(layers)]
    else:
        positions = [rows] * layers
    per_op = tuple(-(-p // n_ops) for p in positions)
    perms = [torch.randperm(n_ops * c, generator=g, device=dev) for c in per_op]
    if not random_depth:  # position p is row p (p >= rows: a spare)
        return per_op, tuple(perms), max(p.numel() for p in perms)
    # the row at every place of every layer's positions, spares (>= rows) elsewhere
    t = torch.randperm(3 * d, generator=g, device=dev)[:rows]
    span = max(k * d + n_ops * c for k, c in enumerate(per_op))
    row_at = torch.arange(rows, rows + span, device=dev)
    row_at.scatter_(0, t, on_device(_ramp, rows, device=dev)[0])
    held = tuple(row_at[k * d :].index_select(0, p) for k, p in enumerate(perms))
    return per_op, held, rows + span


def row_draws(slots: Slots) -> tuple[Tensor, Tensor, Tensor]:
    """Per layer and row, (layers, rows): the operation's index in the set (-1: past the
    chain's depth), its level and its direction (+-1), read from the row's slot."""
    dev = slots.sign.device
    ops, levels, signs = [], [], []
    start = 0
    for c, held in zip(slots.per_op, slots.held, strict=True):
        m = held.numel()
        slot = torch.full((slots.spares + 1,), -1, dtype=torch.int64, device=dev)
        slot = slot.scatter_(0, held, torch.arange(m, device=dev))[: slots.rows]
        active = slot >= 0
        at = slot.clamp(min=0)
        op_of_slot = torch.tensor(slots.order, device=dev).repeat_interleave(c)
        ops.append(torch.where(active, op_of_slot[at], -1))
        own = slice(start, start + m)
        if isinstance(slots.level, Tensor):
            levels.append(slots.level[own][at])
        else:
            levels.append(torch.full((slots.rows,), slots.level, dtype=torch.float64, device=dev))
        signs.append(torch.where(slots.sign[own][at], 1.0, -1.0).double())
        start += m
    return torch.stack(ops), torch.stack(levels), torch.stack(signs)


def run_slots(u: Tensor, copies: int, slots: Slots, kinds: Sequence[str]) -> Tensor:
    """Every layer of the slots on ``copies`` copies of the uint8 levels ``u`` (N samples,
    ``R = copies N`` rows: row ``j N + i`` is copy ``j`` of sample ``i``). Returns the rows and
    spares, ``(slots.spares, C, H, W)``: ``[:R]`` is the result.

    Per layer: one gather of the slots' rows (device order), each stage on its range of rows
    (:func:`augment.batched.device.apply_layer`), one write back. Every row is in the first
    layer (its depth is at least 1), which reads ``u`` directly.
    """
    n = u.shape[0]
    kinds = tuple(kinds)
    c, h, w = u.shape[1:]
    plan = plan_slots(kinds, slots.per_op, slots.level, slots.sign, (c, h, w))
    out = torch.empty((slots.spares, *u.shape[1:]), dtype=torch.uint8, device=u.device)
    start = 0
    for k, (per_op, held) in enumerate(zip(slots.per_op, slots.held, strict=True)):
        if k == 0:  # a spare reads some sample: its result is dropped
            v = u.index_select(0, held.remainder(n))
        else:
            v = out.index_select(0, held)
        lay = host_cache(layout)(kinds, per_op)
        apply_layer(v, plan, start, lay)
        out.index_copy_(0, held, v)
        start += lay.rows
    return out


__all__ = ["Slots", "block_order", "draw_slots", "row_draws", "run_slots"]
