"""The stages of the batched operations: each applies one family of operations to a batch of
grey levels, every sample with its own planned parameters (:func:`augment.batched.ops.plan_ops`),
and the formulas both ways of running a layer of chains share (the tables of the point
operations, the blends, the warp).

* :func:`apply_plan`, every family on every sample (the identity for those that chose another
  family): fixed shapes, no value read on the host; the deterministic kernels of
  :mod:`augment.batched.ops`.
* :func:`augment.batched.grouped.apply_grouped`, each operation on the samples that chose it
  only (one operation's work per sample, as the PIL path), on uint8: for eager CPU, where
  grouping reads the (host) op indices.
* the slots of :mod:`augment.batched.slots` (accelerators, ``torch.compile``): each
  operation on the rows of its slots, in three stages per layer
  (:mod:`augment.batched.device`).

All give the same values for the same draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# The operations, by the names of their PIL primitives, and the families a stage applies.
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
_TABLES = ("autocontrast", "equalize", "posterize", "solarize")
_BLENDS = ("color", "contrast", "brightness", "sharpness")
KINDS = (*_TABLES, *GEOMETRIC, *_BLENDS, *(f"{name}_original" for name in _BLENDS))
FAMILIES: dict[str, tuple[str, ...]] = {
    "lut": ("posterize", "solarize", "brightness", "brightness_original"),  # fixed tables
    "autocontrast": ("autocontrast",),  # tables from the histogram
    "equalize": ("equalize",),
    "contrast": ("contrast", "contrast_original"),  # tables from the mean grey level
    "color": ("color", "color_original"),
    "sharpness": ("sharpness", "sharpness_original"),
    "affine": GEOMETRIC,
}
_TABLE_FAMILIES = ("lut", "autocontrast", "equalize", "contrast")


def _grey(v: Tensor) -> Tensor:
    """Pillow's 'RGB' -> 'L' conversion, exactly: (19595 R + 38470 G + 7471 B + 2^15) >> 16
    (float32 grey levels; ``v``: uint8 or float32 levels)."""
    if v.shape[1] == 1 or v.dtype != torch.float32:
        # converted first: an op that mixes uint8 and float32 converts value by value on CPU
        v = v.to(torch.float32)
        if v.shape[1] == 1:
            return v
    r, g, b = v.unbind(1)
    s = r * 19595.0 + g * 38470.0  # integers below 2^24: exact in float32
    s.add_(b * 7471.0).add_(32768.0)
    return s.mul_(1.0 / 65536.0).floor_().unsqueeze(1)


def _blend(d: Tensor, v: Tensor, f: Tensor) -> Tensor:
    """``Image.blend(d, v, f)``: float32 ``d + f (v - d)``, clamped to [0, 255], truncated."""
    # three float32 roundings in Pillow's order (no fused multiply-add)
    t = v - d
    t = t.mul_(f) if _fits(f.shape, t.shape) else t * f
    return t.add_(d).clamp_(0.0, 255.0).trunc_()


def _blend16(d: Tensor, v: Tensor, f: Tensor) -> Tensor:
    """:func:`_blend` as int16 levels (the truncation is the conversion's), to copy into
    uint8: on CPU several times faster than converting float32 to uint8 directly. Works in
    ``v`` (a float32 temporary of the caller's, overwritten)."""
    t = v.sub_(d)
    t = t.mul_(f) if _fits(f.shape, t.shape) else t * f
    return t.add_(d).clamp_(0.0, 255.0).to(torch.int16)


def to_uint8(v: Tensor) -> Tensor:
    """Float32 levels in [0, 256) as uint8, truncated, through int16: on CPU several times
    faster than torch's direct float-to-uint8 conversion, with the same values."""
    return v.to(torch.int16).to(torch.uint8)


def _fits(shape: Sequence[int], into: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to ``into`` without growing it (an in-place op may take
    it): ``torch.broadcast_shapes(into, shape) == into``, without its cost per call."""
    return len(shape) <= len(into) and all(
        a == 1 or a == b for a, b in zip(reversed(shape), reversed(into), strict=False)
    )


def _table_index(v: Tensor) -> Tensor:
    """Every value's place in the flat (N * C * 256) tables: ``256 (n C + c) + value``, int32."""
    n, c = v.shape[:2]
    base = torch.arange(0, n * c * 256, 256, device=v.device, dtype=torch.int32).view(n, c, 1, 1)
    return v.to(torch.int32).add_(base).view(-1)


def autocontrast_range(v: Tensor) -> tuple[Tensor, Tensor]:
    """The lowest level ``lo`` and the span ``hi - lo`` of every plane of the levels ``v``
    (uint8 or float32), as (N, C, 1, 1) float32; one level only: ``lo = 0``, ``span = 255``,
    which makes autocontrast's formula the identity (``floor(x + 1/2) = x``)."""
    n, c = v.shape[:2]
    flat = v.reshape(n, c, -1)
    lo = flat.amin(-1).float()
    hi = flat.amax(-1).float()
    one_level = hi <= lo
    span = (hi - lo).masked_fill_(one_level, 255.0)
    return lo.masked_fill_(one_level, 0.0).view(n, c, 1, 1), span.view(n, c, 1, 1)


def autocontrast_tables(v: Tensor) -> Tensor:
    """The (N, C, 256) float32 autocontrast tables of the levels ``v`` (uint8 or float32):
    Pillow's ``floor(((x - lo) 510 + span) / (2 span))``, clamped, from the lowest and highest
    levels present (:func:`autocontrast_range`); exact (float32 holds these integers below
    2^17, and the quotient is never within float32's rounding of an integer it is not)."""
    lo, span = (t.flatten(2) for t in autocontrast_range(v))
    ramp = torch.arange(256, device=v.device, dtype=torch.float32)
    return (ramp - lo).mul_(510.0).add_(span).div_(span * 2.0).floor_().clamp_(0.0, 255.0)


def equalize_tables(v: Tensor, hist: Tensor) -> Tensor:
    """The (N, C, 256) float32 equalize tables of the levels ``v`` from their int32 (N, C, 256)
    histograms ``hist``, in Pillow's integer arithmetic (exact)."""
    n, c, h, w = v.shape
    hi = v.reshape(n, c, -1).amax(-1, keepdim=True).long()  # the highest level present
    ramp = torch.arange(256, device=v.device, dtype=torch.int32)
    step = torch.div(h * w - hist.gather(-1, hi), 255, rounding_mode="floor")
    before = hist.cumsum(-1, dtype=torch.int32).sub_(hist)
    eq = torch.div(before.add_(step // 2), step.clamp(min=1), rounding_mode="floor")
    return torch.where(step > 0, eq.clamp_(max=255), ramp).float()


def grey_mean(grey: Tensor) -> Tensor:
    """The (N, 1, 1, 1) float32 mean of every sample's grey levels ``grey`` (:func:`_grey`),
    rounded half up: Pillow's 'L' histogram mean, as contrast blends with."""
    n, _, h, w = grey.shape
    # integers: exact in float32 while the total stays below 2^24 (in any order of summing);
    # a float64 sum of float32 values is several times slower on CPU
    exact = torch.float32 if 255 * h * w < 2**24 else torch.float64
    total = grey.sum(dim=(1, 2, 3), dtype=exact).to(torch.float64)
    return torch.floor((2.0 * total + h * w) / (2.0 * h * w)).float().view(n, 1, 1, 1)


def contrast_tables(v: Tensor, f: Tensor) -> Tensor:
    """The (N, 1, 256) float32 contrast tables of the levels ``v`` at factors ``f`` (N,): a
    blend with the mean grey level (:func:`grey_mean`)."""
    n = v.shape[0]
    ramp = torch.arange(256, device=v.device, dtype=torch.float32)
    return _blend(grey_mean(_grey(v)).view(n, 1, 1), ramp, f.view(n, 1, 1))


def _counts(idx: Tensor, size: int) -> Tensor:
    """How many of ``idx`` (int32, in ``range(size)``) fall on each value, int32: fixed shapes
    (a float ``index_add_``, counts below 2^24: exact), for accelerators and compiled code."""
    hist = torch.zeros(size, device=idx.device, dtype=torch.float32)
    hist.index_add_(
        0, idx, torch.ones((), device=idx.device, dtype=torch.float32).expand(idx.numel())
    )
    return hist.to(torch.int32)


def _tables(
    v: Tensor,
    idx: Tensor,
    plan: dict[str, Tensor],
    kinds: frozenset[str],
) -> Tensor:
    """The (N, C, 256) float32 tables of ``v``: the plan's, with those of autocontrast,
    equalize and contrast (which depend on the pixels) for the samples that chose them
    (histograms of ``idx`` by ``counts``)."""
    n, c = v.shape[:2]
    dev = v.device
    if "lut" in plan:
        lut = plan["lut"].view(n, 1, 256).expand(n, c, 256)
    else:  # the identity
        lut = torch.arange(256, device=dev, dtype=torch.float32).expand(n, c, 256)
    if "autocontrast" in kinds:
        lut = torch.where(plan["autocontrast"].view(n, 1, 1), autocontrast_tables(v), lut)
    if "equalize" in kinds:
        eq = equalize_tables(v, _counts(idx, n * c * 256).view(n, c, 256))
        lut = torch.where(plan["equalize"].view(n, 1, 1), eq, lut)
    if kinds & {"contrast", "contrast_original"}:
        f = plan["contrast"]
        ct = contrast_tables(v, f)  # f = 1 (another op): the identity
        lut = torch.where((f != 1.0).view(n, 1, 1), ct.expand(n, c, 256), lut)
    return lut


def _apply_tables(v: Tensor, idx: Tensor, lut: Tensor) -> Tensor:
    return lut.reshape(-1).index_select(0, idx).view_as(v)


def _color(v: Tensor, f: Tensor) -> Tensor:
    if v.shape[1] == 1:  # a grey image has no colour to change
        return v
    return _blend(_grey(v), v, f.view(-1, 1, 1, 1))


def _smooth(v: Tensor) -> tuple[Tensor, Tensor]:
    """Pillow's ``SMOOTH`` filter of the interior pixels of float32 levels ``v``, rounded half
    up, and those interior pixels."""
    # SMOOTH: [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded half up, on the interior pixels
    # 3x3 box sums (integers below 2^12: exact) plus 4 x the centre, by shifted slices
    rows = v[:, :, :-2] + v[:, :, 1:-1]
    rows += v[:, :, 2:]
    k = rows[..., :-2] + rows[..., 1:-1]
    k += rows[..., 2:]
    centre = v[:, :, 1:-1, 1:-1]
    k.add_(centre, alpha=4.0)
    # floor(k / 13 + 1/2): k / 13 is never within 1/26 of a half-integer, so float32 is exact
    return k.mul_(1.0 / 13.0).add_(0.5).floor_(), centre


def _sharpness(v: Tensor, f: Tensor) -> Tensor:
    h, w = v.shape[2:]
    if h < 3 or w < 3:
        return v
    smooth, centre = _smooth(v)
    out = torch.nn.functional.pad(_blend(smooth, centre, f.view(-1, 1, 1, 1)), (1, 1, 1, 1))
    out[:, :, 0] = v[:, :, 0]  # the border is left as it is
    out[:, :, -1] = v[:, :, -1]
    out[:, :, :, 0] = v[:, :, :, 0]
    out[:, :, :, -1] = v[:, :, :, -1]
    return out


def _affine(v: Tensor, a: Tensor, out: Tensor | None = None) -> Tensor:
    """Nearest-neighbour inverse affine warp with black fill, in Pillow's 16.16 fixed point
    (``a``: (N, 6) int32 coefficients; ``v``: any dtype, gathered as it is; ``out``: a
    contiguous tensor like ``v`` to write the result into, ``v`` itself allowed)."""
    n, c, h, w = v.shape
    dev = v.device
    a = a.view(n, 6, 1, 1)
    xs = torch.arange(w, device=dev, dtype=torch.int32).view(1, 1, w)
    ys = torch.arange(h, device=dev, dtype=torch.int32).view(1, h, 1)
    # read from the image framed by one black pixel: every outside source lands on the frame,
    # at the coordinates plus 1 ((A2 + 2^16) >> 16 = (A2 >> 16) + 1)
    # (A2 + A0 x) per column plus (A1 y) per row: one full-size add per coordinate
    xin = torch.add((a[:, 2] + 65536) + xs * a[:, 0], ys * a[:, 1]).bitwise_right_shift_(16)
    yin = torch.add((a[:, 5] + 65536) + xs * a[:, 3], ys * a[:, 4]).bitwise_right_shift_(16)
    src = torch.empty(n, 1, h * w, device=dev, dtype=torch.int64)
    torch.add(xin.clamp_(0, w + 1), yin.clamp_(0, h + 1), alpha=w + 2, out=src.view(n, h, w))
    framed = torch.nn.functional.pad(v, (1, 1, 1, 1)).view(n, c, (h + 2) * (w + 2))
    if out is None:
        return framed.gather(2, src.expand(n, c, h * w)).view(n, c, h, w)
    torch.gather(framed, 2, src.expand(n, c, h * w), out=out.view(n, c, h * w))
    return out


def apply_plan(v: Tensor, plan: dict[str, Tensor], kinds: Sequence[str]) -> Tensor:
    """One operation per sample, as planned by :func:`plan_ops` (entries of leading shape (N,)).

    ``v`` holds float32 grey levels (see :func:`to_levels`). Every family of operations present
    in ``kinds`` is applied to the whole batch, each sample with its own parameters (the
    identity for the samples that chose another operation): one table lookup for the point
    ops and the brightness and contrast blends, one blend with the grey image for color, one
    3x3 blur and blend for sharpness, one fixed-point affine gather for the five geometric
    ops. No value is read on the host. Temporaries: a few float32 copies of ``v`` at a time
    (the largest stage, sharpness, holds about four), an int32 table index the size of ``v``
    and an int64 gather index a third of it.
    """
    present = frozenset(kinds)
    if present & {k for f in _TABLE_FAMILIES for k in FAMILIES[f]}:
        idx = _table_index(v)
        v = _apply_tables(v, idx, _tables(v, idx, plan, present))
    if present & set(FAMILIES["color"]):
        v = _color(v, plan["color"])
    if present & set(FAMILIES["sharpness"]):
        v = _sharpness(v, plan["sharpness"])
    if present & set(GEOMETRIC):
        v = _affine(v, plan["affine"])
    return v


def as_rows(u: Tensor) -> Tensor:
    """``u`` as one row per sample, of 8-byte words where the row's size allows (row copies
    of wide words are many times faster than byte by byte in torch's CPU kernels)."""
    rows = u.view(u.shape[0], -1)
    if rows.shape[1] % 8 == 0 and rows.is_contiguous():
        return rows.view(torch.int64)
    return rows
