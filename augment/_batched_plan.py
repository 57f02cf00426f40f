"""The per-sample parameters of the batched operations (:func:`plan_ops`): the PIL primitives'
level scaling (:mod:`augment.primitives`) per sample, in float64 as Python computes it."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

import torch
from torch import Tensor

from augment._batched_stages import (
    _STAGES,
    FAMILIES,
    GEOMETRIC,
    KINDS,
    _as_rows,
    _blend,
)

_FIX = 65536.0  # Pillow's 16.16 fixed point


def _posterize_step(level: Tensor) -> Tensor:
    bits = 4 - torch.clamp((level * 0.4).trunc(), max=3.0)
    return torch.exp2(8 - bits)  # values are kept as floor(v / step) * step


def _solarize_threshold(level: Tensor) -> Tensor:
    return 256 - (level * 25.6).trunc()


def _factor(level: Tensor, sign: Tensor | None) -> Tensor:
    if sign is None:  # the reference ("*_original") form
        return 0.1 + 0.18 * level
    return 1.0 + 0.09 * level * sign


def _matrix(kind: str, level: Tensor, sign: Tensor, h: int, w: int) -> Tensor:
    """The (N, 6) float64 inverse affine matrix of a geometric op, as the PIL kernel builds it."""
    one, zero = torch.ones_like(level), torch.zeros_like(level)
    if kind == "rotate":
        t = torch.deg2rad(3.0 * level * sign)
        cos, sin = t.cos().round(decimals=15), t.sin().round(decimals=15)
        cx, cy = w / 2, h / 2
        return torch.stack(
            [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy], dim=1
        )
    if kind == "shear_x":
        return torch.stack([one, 0.03 * level * sign, zero, zero, one, zero], dim=1)
    if kind == "shear_y":
        return torch.stack([one, zero, zero, 0.03 * level * sign, one, zero], dim=1)
    if kind == "translate_x":
        return torch.stack([one, zero, (level * w / 30.0).trunc() * sign, zero, one, zero], dim=1)
    if kind == "translate_y":
        return torch.stack([one, zero, zero, zero, one, (level * h / 30.0).trunc() * sign], dim=1)
    raise AssertionError(kind)


def _fixed_point(m: Tensor) -> Tensor:
    """Pillow's 16.16 coefficients of an inverse affine matrix, pixel centres folded in."""
    a = torch.stack(
        [
            m[..., 0],
            m[..., 1],
            m[..., 2] + 0.5 * m[..., 0] + 0.5 * m[..., 1],
            m[..., 3],
            m[..., 4],
            m[..., 5] + 0.5 * m[..., 3] + 0.5 * m[..., 4],
        ],
        dim=-1,
    )
    return torch.floor(a * _FIX + 0.5).to(torch.int32)


class _Choice:
    """Which samples chose which operation (``op == code``)."""

    def __init__(self, op: Tensor, kinds: Sequence[str], only: Collection[str] | None) -> None:
        self.op = op
        self.code = {kind: i for i, kind in enumerate(kinds) if only is None or kind in only}

    def __contains__(self, kind: str) -> bool:
        return kind in self.code

    def __call__(self, kind: str) -> Tensor:
        if kind in self.code:
            return self.op == self.code[kind]
        return torch.zeros_like(self.op, dtype=torch.bool)


def _plan_lut(chose: _Choice, level: Tensor, sign: Tensor) -> Tensor:
    """The fixed tables (posterize, solarize, brightness), the identity elsewhere."""
    ramp = torch.arange(256, device=level.device, dtype=torch.float64)
    lut = ramp.expand(*level.shape, 256)
    if "posterize" in chose:
        q = _posterize_step(level).unsqueeze(-1)
        lut = torch.where(chose("posterize").unsqueeze(-1), torch.floor(ramp / q) * q, lut)
    if "solarize" in chose:
        t = _solarize_threshold(level).unsqueeze(-1)
        sol = torch.where(ramp >= t, 255.0 - ramp, ramp)
        lut = torch.where(chose("solarize").unsqueeze(-1), sol, lut)
    for form, s in (("", sign), ("_original", None)):
        if "brightness" + form in chose:
            f = _factor(level, s).float().unsqueeze(-1)
            bright = _blend(torch.zeros((), device=level.device), ramp.float(), f).double()
            lut = torch.where(chose("brightness" + form).unsqueeze(-1), bright, lut)
    return lut.float()


def _plan_factor(chose: _Choice, level: Tensor, sign: Tensor, name: str) -> Tensor:
    """The blend factor of ``name`` (contrast, color, sharpness) per sample, 1 elsewhere."""
    f = torch.ones(level.shape, device=level.device, dtype=torch.float64)
    for form, s in (("", sign), ("_original", None)):
        if name + form in chose:
            f = torch.where(chose(name + form), _factor(level, s), f)
    return f.float()


def _plan_affine(chose: _Choice, level: Tensor, sign: Tensor, h: int, w: int) -> Tensor:
    """The 16.16 affine coefficients of the geometric ops, the identity elsewhere."""
    shape = level.shape
    matrix = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64, device=level.device)
    matrix = matrix.expand(*shape, 6)
    for kind in GEOMETRIC:
        if kind in chose:
            m = _matrix(kind, level.reshape(-1), sign.reshape(-1), h, w).view(*shape, 6)
            matrix = torch.where(chose(kind).unsqueeze(-1), m, matrix)
    return _fixed_point(matrix)


def plan_ops(
    op: Tensor,
    level: Tensor,
    sign: Tensor,
    kinds: Sequence[str],
    h: int,
    w: int,
    only: Collection[str] | None = None,
) -> dict[str, Tensor]:
    """The pixel-independent parameters of one operation per sample, for :func:`apply_plan`.

    ``op``, ``level`` and ``sign`` have any one shape ``S`` (e.g. ``(N,)``, or ``(N, width,
    depth)`` for all the layers of AugMix at once); every entry of the plan has leading shape
    ``S``: ``lut`` (``S x 256``, the tables of posterize, solarize and brightness, the identity
    elsewhere), the masks of the samples whose table depends on their pixels (autocontrast,
    equalize), the blend factors of contrast, color and sharpness (1: identity) and
    the 16.16 fixed-point affine coefficients (the identity for non-geometric ops).
    ``only``: plan these kinds only (the others as the identity), and only the entries their
    stages read (``lut`` absent: the identity tables).
    """
    chose = _Choice(op, kinds, only)
    level = level.to(torch.float64)
    sign = sign.to(torch.float64)
    plan: dict[str, Tensor] = {}
    if _wanted(only, FAMILIES["lut"]):
        plan["lut"] = _plan_lut(chose, level, sign)
    for name in ("autocontrast", "equalize"):
        if _wanted(only, (name,)):
            plan[name] = chose(name)
    for name in ("contrast", "color", "sharpness"):
        if _wanted(only, FAMILIES[name]):
            plan[name] = _plan_factor(chose, level, sign, name)
    if _wanted(only, GEOMETRIC):
        plan["affine"] = _plan_affine(chose, level, sign, h, w)
    return plan


def _wanted(only: Collection[str] | None, kinds: Sequence[str]) -> bool:
    return only is None or any(kind in only for kind in kinds)


# Families that share a stage, run as one group (their stages are per sample).
_GROUPS: tuple[tuple[str, ...], ...] = (
    ("lut", "contrast"),
    ("autocontrast", "equalize"),
    ("color",),
    ("sharpness",),
    ("affine",),
)
NOT_LUT = frozenset(KINDS) - set(FAMILIES["lut"])  # what :func:`apply_layers`'s plan holds
_ORDER = tuple(f for group in _GROUPS for f in group)  # the families, a group's adjacent


@functools.lru_cache(maxsize=64)
def _ranks(kinds: tuple[str, ...]) -> Tensor:
    """``table[op + 1]``: the place in :data:`_ORDER` of ``kinds[op]``'s family (-1: none)."""
    family = {k: f for f, members in FAMILIES.items() for k in members}
    return torch.tensor([-1, *(_ORDER.index(family[k]) for k in kinds)], dtype=torch.int64)


def apply_grouped(
    u: Tensor, op: Tensor, level: Tensor, sign: Tensor, kinds: Sequence[str]
) -> Tensor:
    """:func:`apply_plan` of :func:`plan_ops` on uint8 grey levels ``u`` (CPU, eager), family
    by family on the samples that chose it: the work per sample is that of its one operation.
    ``op``, ``level``, ``sign``: (N,), as in :func:`apply_ops` (-1: unchanged). Returns a new
    tensor (``u`` may be overwritten).

    Reads ``op`` on the host (to group the samples): CPU tensors only, not for compiled code.
    The values equal :func:`apply_plan`'s on ``u``'s levels (the same stages, per sample).
    """
    plan = plan_ops(op, level, sign, kinds, u.shape[2], u.shape[3], only=NOT_LUT)
    draws = (op.unsqueeze(0), level.unsqueeze(0), sign.unsqueeze(0))
    return apply_layers(u, draws, {key: t.unsqueeze(0) for key, t in plan.items()}, kinds)


def apply_layers(
    u: Tensor, draws: tuple[Tensor, Tensor, Tensor], plan: dict[str, Tensor], kinds: Sequence[str]
) -> Tensor:
    """:func:`apply_grouped` layer after layer: ``draws`` ``(op, level, sign)``, each
    (layers, N), and ``plan``, their :func:`plan_ops` but the fixed tables (``only=NOT_LUT``,
    entries (layers, N, ...)). Returns the result in a new tensor (``u`` may be overwritten).

    Each layer sorts the rows of ``u`` by the group of families of their operation (one copy
    of the batch; the families that share a stage are one group, :data:`_GROUPS`), so that a
    group's samples are a slice that its stage reads and overwrites in place; the rows go back
    to their order once, at the end. The fixed tables (a table a sample is large) are planned
    per layer, for the samples that chose them only.
    """
    n = u.shape[0]
    table = _ranks(tuple(kinds))
    at = torch.arange(n)  # at[i]: the sample whose row is the i-th row of u
    rows = _as_rows(u)
    for layer in range(draws[0].shape[0]):
        op, level, sign = (t[layer].index_select(0, at) for t in draws)
        rank = table.index_select(0, op + 1)
        bins = torch.bincount(rank + 1, minlength=len(_ORDER) + 1).tolist()
        order = torch.argsort(rank, stable=True)
        rows = rows.index_select(0, order)
        at, op, level, sign = (t.index_select(0, order) for t in (at, op, level, sign))
        u = rows.view(torch.uint8).view(u.shape)
        start = bins[0]  # the samples past their chain's depth (-1) come first, unchanged
        counts = dict(zip(_ORDER, bins[1:], strict=True))
        for group in _GROUPS:
            count = sum(counts[f] for f in group)
            if count == 0:
                continue
            s = slice(start, start + count)
            start += count
            present = frozenset(k for f in group if counts[f] for k in FAMILIES[f]) & set(kinds)
            sub = {f: plan[f][layer].index_select(0, at[s]) for f in group if f in plan}
            if counts["lut"] and "lut" in group:
                h, w = u.shape[2], u.shape[3]
                lut_kinds = present & set(FAMILIES["lut"])
                sub.update(plan_ops(op[s], level[s], sign[s], kinds, h, w, only=lut_kinds))
            u[s] = _STAGES[group[0]](u[s], sub, present)
    out = torch.empty_like(rows)
    out.index_copy_(0, at, rows)  # back to the samples' order
    return out.view(torch.uint8).view(u.shape)
