"""The per-sample parameters of the batched operations (:func:`plan_ops`): the PIL primitives'
level scaling (:mod:`augment.primitives`) per sample, in float64 as Python computes it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import torch
from torch import Tensor

from augment.batched.stages import FAMILIES, GEOMETRIC, _blend

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


class Chooser(Protocol):
    """Which samples (or slots) chose an operation: ``kind in chooser`` (drawn by some),
    ``chooser(kind)`` (a bool mask, the shape of the levels)."""

    def __contains__(self, kind: str) -> bool: ...

    def __call__(self, kind: str) -> Tensor: ...


def _matrix(chose: Chooser, level: Tensor, sign: Tensor, h: int, w: int) -> Tensor:
    """The (..., 6) float64 inverse affine matrices of the geometric ops, as the PIL kernels
    build them (the identity for the other ops), every op at once: a rotation by 0 where
    none is drawn, plus the shear or translation term of the op drawn (adding 0 changes no
    float)."""
    zero = torch.zeros_like(level)
    t = torch.where(chose("rotate"), torch.deg2rad(3.0 * level * sign), zero)
    cos, sin = t.cos().round(decimals=15), t.sin().round(decimals=15)
    shear = 0.03 * level * sign
    cx, cy = w / 2, h / 2
    return torch.stack(
        [
            cos,
            torch.where(chose("shear_x"), shear, zero) - sin,
            (cx - cos * cx + sin * cy)
            + torch.where(chose("translate_x"), (level * w / 30.0).trunc() * sign, zero),
            sin + torch.where(chose("shear_y"), shear, zero),
            cos,
            (cy - sin * cx - cos * cy)
            + torch.where(chose("translate_y"), (level * h / 30.0).trunc() * sign, zero),
        ],
        dim=-1,
    )


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
    """Which samples chose which operation (``op`` is one of its codes: a set may name an
    operation twice)."""

    def __init__(self, op: Tensor, kinds: Sequence[str], only: Collection[str] | None) -> None:
        self.op = op
        self.codes: dict[str, list[int]] = {}
        for i, kind in enumerate(kinds):
            if only is None or kind in only:
                self.codes.setdefault(kind, []).append(i)

    def __contains__(self, kind: str) -> bool:
        return kind in self.codes

    def __call__(self, kind: str) -> Tensor:
        codes = self.codes.get(kind)
        if not codes:
            return torch.zeros_like(self.op, dtype=torch.bool)
        chose = self.op == codes[0]
        for code in codes[1:]:
            chose = chose | (self.op == code)
        return chose


def fixed_table(kind: str, level: Tensor, sign: Tensor) -> Tensor:
    """The float32 (..., 256) tables of ``kind`` (posterize, solarize, brightness or
    brightness_original) at float64 ``level`` and ``sign`` (any one shape)."""
    ramp = torch.arange(256, device=level.device, dtype=torch.float64)
    if kind == "posterize":
        q = _posterize_step(level).unsqueeze(-1)
        return (torch.floor(ramp / q) * q).float()
    if kind == "solarize":
        t = _solarize_threshold(level).unsqueeze(-1)
        return torch.where(ramp >= t, 255.0 - ramp, ramp).float()
    f = _factor(level, None if kind.endswith("_original") else sign).float().unsqueeze(-1)
    return _blend(torch.zeros((), device=level.device), ramp.float(), f)


def _plan_lut(chose: Chooser, level: Tensor, sign: Tensor) -> Tensor:
    """The fixed tables (posterize, solarize, brightness), the identity elsewhere."""
    lut = torch.arange(256, device=level.device, dtype=torch.float32).expand(*level.shape, 256)
    for kind in FAMILIES["lut"]:
        if kind in chose:
            lut = torch.where(chose(kind).unsqueeze(-1), fixed_table(kind, level, sign), lut)
    return lut


def _plan_factor(chose: Chooser, level: Tensor, sign: Tensor, name: str) -> Tensor:
    """The blend factor of ``name`` (contrast, color, sharpness) per sample, 1 elsewhere."""
    f = torch.ones(level.shape, device=level.device, dtype=torch.float64)
    for form, s in (("", sign), ("_original", None)):
        if name + form in chose:
            f = torch.where(chose(name + form), _factor(level, s), f)
    return f.float()


def _plan_affine(chose: Chooser, level: Tensor, sign: Tensor, h: int, w: int) -> Tensor:
    """The 16.16 affine coefficients of the geometric ops, the identity elsewhere."""
    return _fixed_point(_matrix(chose, level, sign, h, w))


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
