"""The grouped way of running the batched chains (eager CPU): each operation runs on the
samples that chose it only, on uint8 grey levels, as the PIL path does per image.

A layer sorts the rows of the batch by operation (one copy of the batch), so that the samples
of each operation are a slice. The operations that share a stage run as one group
(:data:`_GROUPS`): the point operations and the brightness and contrast blends build their
256-entry tables slice by slice and are applied as one table lookup; color and sharpness
are one blend each; the geometric operations are warped slice by slice. The rows go back to
their order once, after the last layer. Sorting reads the op indices on the host: CPU
tensors only, not for compiled code (:func:`augment.batched_ops.apply_plan` is that path).
The values equal :func:`~augment.batched_ops.apply_plan`'s (the same formulas, per sample).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from augment._batched_plan import _posterize_step, fixed_table, plan_ops
from augment._batched_stages import (
    FAMILIES,
    GEOMETRIC,
    KINDS,
    _affine,
    _blend16,
    _grey,
    _smooth,
    _table_index,
    as_rows,
    autocontrast_tables,
    contrast_tables,
    equalize_tables,
)

# The operations that share a stage, and the plan entries (plan_ops) their stage reads.
_GROUPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "table",
        (*FAMILIES["lut"], "contrast", "contrast_original", "autocontrast", "equalize"),
        ("contrast",),
    ),
    ("color", FAMILIES["color"], ("color",)),
    ("sharpness", FAMILIES["sharpness"], ("sharpness",)),
    ("geometric", GEOMETRIC, ("affine",)),
)
_ORDER = tuple(kind for _, kinds, _ in _GROUPS for kind in kinds)  # a group's kinds adjacent
NOT_LUT = frozenset(KINDS) - set(FAMILIES["lut"])  # the plan :func:`apply_layers` takes


@functools.lru_cache(maxsize=64)
def _places(kinds: tuple[str, ...]) -> Tensor:
    """``table[op + 1]``: the place in :data:`_ORDER` of ``kinds[op]`` (-1: no operation)."""
    return torch.tensor([-1, *(_ORDER.index(k) for k in kinds)], dtype=torch.int64)


class _Slice:
    """One group's samples in a layer: their grey levels ``u`` (a slice of the sorted batch),
    plan entries, levels and signs, and which rows of ``u`` chose which operation."""

    def __init__(
        self,
        u: Tensor,
        plan: dict[str, Tensor],
        level: Tensor,
        sign: Tensor,
        parts: dict[str, slice],
    ) -> None:
        self.u, self.plan, self.level, self.sign, self.parts = u, plan, level, sign, parts


def _table_stage(g: _Slice) -> None:
    """One table lookup for the point operations and the brightness and contrast blends, their
    tables built slice by slice; posterize (first in the group) is a bit mask instead."""
    first = 0
    if "posterize" in g.parts:  # floor(v / step) step, step a power of 2: the high bits of v
        s = g.parts["posterize"]
        keep = (256 - _posterize_step(g.level[s])).to(torch.uint8).view(-1, 1, 1, 1)
        g.u[s] &= keep
        first = s.stop
    if first == g.u.shape[0]:
        return
    u = g.u[first:]
    n, c = u.shape[:2]
    tables = torch.empty(n, c, 256, dtype=torch.float32)
    for kind, part in g.parts.items():
        s = slice(part.start - first, part.stop - first)
        if kind == "posterize":
            continue
        if kind == "autocontrast":
            tables[s] = autocontrast_tables(u[s])
        elif kind == "equalize":
            hist = torch.bincount(_table_index(u[s]), minlength=(s.stop - s.start) * c * 256)
            tables[s] = equalize_tables(u[s], hist.view(-1, c, 256).to(torch.int32))
        elif kind.startswith("contrast"):
            tables[s] = contrast_tables(u[s], g.plan["contrast"][part])
        else:
            tables[s] = fixed_table(kind, g.level[part], g.sign[part]).unsqueeze(1)
    idx = _table_index(u)  # read before u is overwritten
    torch.index_select(tables.to(torch.uint8).view(-1), 0, idx, out=u.view(-1))


def _color_stage(g: _Slice) -> None:
    if g.u.shape[1] == 1:  # a grey image has no colour to change
        return
    v = g.u.to(torch.float32)
    g.u.copy_(_blend16(_grey(v), v, g.plan["color"].view(-1, 1, 1, 1)))


def _sharpness_stage(g: _Slice) -> None:
    h, w = g.u.shape[2:]
    if h < 3 or w < 3:
        return
    smooth, centre = _smooth(g.u.to(torch.float32))
    # the border is left as it is
    g.u[:, :, 1:-1, 1:-1] = _blend16(smooth, centre, g.plan["sharpness"].view(-1, 1, 1, 1))


def _geometric_stage(g: _Slice) -> None:
    g.u.copy_(_affine(g.u, g.plan["affine"]))  # _affine reads a framed copy of u


# Each stage overwrites its group's slice of the sorted batch with the result.
_STAGES: dict[str, Callable[[_Slice], None]] = {
    "table": _table_stage,
    "color": _color_stage,
    "sharpness": _sharpness_stage,
    "geometric": _geometric_stage,
}


def apply_grouped(
    u: Tensor, op: Tensor, level: Tensor, sign: Tensor, kinds: Sequence[str]
) -> Tensor:
    """:func:`~augment.batched_ops.apply_plan` of :func:`~augment.batched_ops.plan_ops` on
    uint8 grey levels ``u`` (CPU, eager), each operation on the samples that chose it: the work
    per sample is that of its one operation. ``op``, ``level``, ``sign``: (N,), as in
    :func:`~augment.batched_ops.apply_ops` (-1: unchanged). Returns a new tensor (``u`` is
    left as it is).

    Reads ``op`` on the host (to group the samples): CPU tensors only, not for compiled code.
    """
    if not isinstance(u, Tensor) or u.dtype != torch.uint8 or u.ndim != 4 or u.device.type != "cpu":
        raise TypeError("u must be an (N, C, H, W) uint8 tensor on the CPU")
    if any(t.shape != (u.shape[0],) for t in (op, level, sign)):
        raise ValueError(
            f"op, level and sign must each have shape ({u.shape[0]},), got "
            f"{[tuple(t.shape) for t in (op, level, sign)]}"
        )
    u = u.contiguous()
    plan = plan_ops(op, level, sign, kinds, u.shape[2], u.shape[3], only=NOT_LUT)
    draws = (op.unsqueeze(0), level.unsqueeze(0), sign.unsqueeze(0))
    return apply_layers(u, draws, {key: t.unsqueeze(0) for key, t in plan.items()}, kinds)


def apply_layers(
    u: Tensor, draws: tuple[Tensor, Tensor, Tensor], plan: dict[str, Tensor], kinds: Sequence[str]
) -> Tensor:
    """:func:`apply_grouped` layer after layer: ``draws`` ``(op, level, sign)``, each
    (layers, N), and ``plan``, their :func:`~augment.batched_ops.plan_ops` but the fixed
    tables (``only=NOT_LUT``, entries (layers, N, ...)). Returns the result in a new tensor;
    ``u`` (contiguous uint8) is left as it is: each layer works on a sorted copy.
    """
    n = u.shape[0]
    table = _places(tuple(kinds))
    at = torch.arange(n)  # at[i]: the sample whose row is the i-th row of u
    rows = as_rows(u)
    draws = (draws[0], draws[1].to(torch.float64), draws[2].to(torch.float64))
    for layer in range(draws[0].shape[0]):
        op, level, sign = (t[layer].index_select(0, at) for t in draws)
        place = table.index_select(0, op + 1)
        counts = torch.bincount(place + 1, minlength=len(_ORDER) + 1).tolist()
        order = torch.argsort(place, stable=True)
        rows = rows.index_select(0, order)
        at, level, sign = (t.index_select(0, order) for t in (at, level, sign))
        u = rows.view(torch.uint8).view(u.shape)
        start = counts[0]  # the samples past their chain's depth (-1) come first, unchanged
        counts = counts[1:]
        for name, members, keys in _GROUPS:
            first = _ORDER.index(members[0])
            sizes = counts[first : first + len(members)]
            total = sum(sizes)
            if total == 0:
                continue
            parts, at_part = {}, 0
            for kind, size in zip(members, sizes, strict=True):
                if size:
                    parts[kind] = slice(at_part, at_part + size)
                at_part += size
            s = slice(start, start + total)
            start += total
            sub = {key: plan[key][layer].index_select(0, at[s]) for key in keys if key in plan}
            group = _Slice(u[s], sub, level[s], sign[s], parts)
            _STAGES[name](group)
    out = torch.empty_like(rows)
    out.index_copy_(0, at, rows)  # back to the samples' order
    return out.view(torch.uint8).view(u.shape)
