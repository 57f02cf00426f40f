r"""The thirteen AugMix/RandAugment operations on batches of tensors, with per-sample parameters.

Every operation here is deterministic: ``op(x, level[, sign])`` applies the PIL primitive of the
same name in :mod:`augment.primitives` to every sample of ``x`` (``N x C x H x W``, ``C`` = 1 or
3, ``torch.uint8`` or floating point in [0, 1], any device), sample ``i`` at level ``level[i]``
and direction ``sign[i]`` (:math:`\pm 1`, the draw the PIL operation takes from its ``rng``).
``level`` and ``sign`` are Python numbers (one value for the batch) or tensors of shape ``(N,)``.
The random transforms :class:`~augment.BatchAugMix` and :class:`~augment.BatchRandAugment` draw
these parameters; the tests compare these kernels with the PIL ones.

How the result relates to the PIL primitive (same level scaling, see :mod:`augment.primitives`):

* Geometric ops (rotate, shear_x, shear_y, translate_x, translate_y): bit for bit. Pillow's
  nearest-neighbour affine maps output pixel :math:`(x, y)` to input
  :math:`\lfloor (A_2 + A_0 x + A_1 y) / 2^{16} \rfloor` in 16.16 fixed point, with
  :math:`A_k` the rounded matrix entries (pixel centres folded into :math:`A_2`); this module
  computes the same integers (images up to 32767 pixels a side).
* Point ops (autocontrast, equalize, posterize, solarize) and the brightness and contrast
  enhancements are per-channel 256-entry tables, built with the PIL kernels' integer formulas:
  bit for bit. (Contrast's mean grey level uses Pillow's 'L' conversion, exactly.)
* color, sharpness and the blends of brightness and contrast: Pillow blends in float32 and
  truncates, :math:`\lfloor d + f (x - d) \rfloor` clamped to [0, 255]; so does this module,
  but a fused multiply-add on one side and not the other may move a value lying exactly on an
  integer by one grey level (within 1 grey level; in practice nearly always equal). Sharpness's
  3x3 ``SMOOTH`` blur is rounded half up and the one-pixel border is left as it is, as in
  Pillow; images under 3 pixels a side are returned unchanged.

Float input is processed at 8-bit precision: ``x * 255`` is rounded to the nearest integer
first, as the PIL pipeline sees the image, and each op's output is an integer grey level
divided by 255. The result has the dtype and device of ``x``.

Shape:
    ``x``: :math:`(N, C, H, W)`, :math:`C \in \{1, 3\}`; ``level``, ``sign``: scalars or
    :math:`(N,)`; output: like ``x``.

Example:
    >>> import torch
    >>> from augment import batched_ops as B
    >>> x = torch.full((2, 3, 4, 4), 100, dtype=torch.uint8)
    >>> B.brightness(x, torch.tensor([10.0, 10.0]), torch.tensor([-1.0, 1.0]))[:, 0, 0, 0]
    tensor([ 10, 190], dtype=torch.uint8)
    >>> B.solarize(x, 10.0)[0, 0, 0, 0]
    tensor(155, dtype=torch.uint8)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "GEOMETRIC",
    "KINDS",
    "apply_ops",
    "apply_plan",
    "autocontrast",
    "brightness",
    "brightness_original",
    "color",
    "color_original",
    "contrast",
    "contrast_original",
    "equalize",
    "from_levels",
    "plan_ops",
    "posterize",
    "rotate",
    "sharpness",
    "sharpness_original",
    "shear_x",
    "shear_y",
    "solarize",
    "to_levels",
    "translate_x",
    "translate_y",
]

# The operations this module knows, by the names of their PIL primitives.
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
_TABLES = ("autocontrast", "equalize", "posterize", "solarize")
_BLENDS = ("color", "contrast", "brightness", "sharpness")
KINDS = (
    *_TABLES,
    *GEOMETRIC,
    *_BLENDS,
    *(f"{name}_original" for name in _BLENDS),
)

_FIX = 65536.0  # Pillow's 16.16 fixed point


# ------------------------------------------------------------------------------- images


def check_batch(x: object, name: str = "x") -> Tensor:
    """``x`` as a checked (N, C, H, W) tensor, C = 1 or 3, uint8 or floating point."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(
            f"{name} must be an (N, C, H, W) batch with C = 1 or 3, got shape {tuple(x.shape)}"
        )
    if x.dtype != torch.uint8 and not x.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be torch.uint8 (0..255) or floating point (0..1), got {x.dtype}"
        )
    if max(x.shape[2], x.shape[3]) > 32767:
        raise ValueError(f"{name} must be at most 32767 pixels a side, got {tuple(x.shape)}")
    return x


def to_levels(x: Tensor) -> Tensor:
    """The batch as float32 grey levels 0..255 (integers): uint8 as is, float ``round(255 x)``."""
    if x.dtype == torch.uint8:
        return x.to(torch.float32)
    return (x.to(torch.float32) * 255.0).round_().clamp_(0.0, 255.0)


def from_levels(v: Tensor, like: Tensor) -> Tensor:
    """Grey levels back to ``like``'s dtype (uint8: rounded half up; float: divided by 255)."""
    if like.dtype == torch.uint8:
        return v.add(0.5).clamp_(0.0, 255.0).to(torch.uint8)
    return (v / 255.0).to(like.dtype)


def _per_sample(v: float | Tensor, n: int, device: torch.device, name: str) -> Tensor:
    """A scalar or (N,) parameter as a float64 (N,) tensor on ``device``."""
    t = torch.as_tensor(v, dtype=torch.float64, device=device)
    if t.ndim == 0:
        return t.expand(n)
    if t.shape != (n,):
        raise ValueError(
            f"{name} must be a number or a tensor of shape ({n},), got {tuple(t.shape)}"
        )
    return t


# ------------------------------------------------------------------------ level scaling
# The PIL primitives' formulas (augment.primitives), per sample, in float64 as Python does.


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


# ------------------------------------------------------------------------------- stages
# A stage applies one family of operations to the whole batch, each sample with its own
# parameters; identity parameters leave a sample exactly as it is.


def _grey(v: Tensor) -> Tensor:
    """Pillow's 'RGB' -> 'L' conversion, exactly: (19595 R + 38470 G + 7471 B + 2^15) >> 16."""
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
    t = t.mul_(f) if torch.broadcast_shapes(t.shape, f.shape) == t.shape else t * f
    return t.add_(d).clamp_(0.0, 255.0).trunc_()


def _table_index(v: Tensor) -> Tensor:
    """Every value's place in the flat (N * C * 256) tables: ``256 (n C + c) + value``, int32."""
    n, c = v.shape[:2]
    base = torch.arange(0, n * c * 256, 256, device=v.device, dtype=torch.int32).view(n, c, 1, 1)
    return v.to(torch.int32).add_(base).view(-1)


def plan_ops(
    op: Tensor, level: Tensor, sign: Tensor, kinds: Sequence[str], h: int, w: int
) -> dict[str, Tensor]:
    """The pixel-independent parameters of one operation per sample, for :func:`apply_plan`.

    ``op``, ``level`` and ``sign`` have any one shape ``S`` (e.g. ``(N,)``, or ``(N, width,
    depth)`` for all the layers of AugMix at once); every entry of the plan has leading shape
    ``S``: ``lut`` (``S x 256``, the tables of posterize, solarize and brightness, the identity
    elsewhere), the masks of the samples whose table depends on their pixels (autocontrast,
    equalize, contrast), the blend factors of contrast, color and sharpness (1: identity) and
    the 16.16 fixed-point affine coefficients (the identity for non-geometric ops).
    """
    code = {kind: i for i, kind in enumerate(kinds)}
    dev = op.device
    level = level.to(torch.float64)
    sign = sign.to(torch.float64)
    ramp = torch.arange(256, device=dev, dtype=torch.float64)
    shape = op.shape

    def chose(kind: str) -> Tensor:
        return op == code[kind] if kind in code else torch.zeros_like(op, dtype=torch.bool)

    plan: dict[str, Tensor] = {}
    lut = ramp.expand(*shape, 256)
    if "posterize" in code:
        q = _posterize_step(level).unsqueeze(-1)
        lut = torch.where(chose("posterize").unsqueeze(-1), torch.floor(ramp / q) * q, lut)
    if "solarize" in code:
        t = _solarize_threshold(level).unsqueeze(-1)
        sol = torch.where(ramp >= t, 255.0 - ramp, ramp)
        lut = torch.where(chose("solarize").unsqueeze(-1), sol, lut)
    for form, s in (("", sign), ("_original", None)):
        if "brightness" + form in code:
            f = _factor(level, s).float().unsqueeze(-1)
            bright = _blend(torch.zeros((), device=dev), ramp.float(), f).double()
            lut = torch.where(chose("brightness" + form).unsqueeze(-1), bright, lut)
    plan["lut"] = lut.float()
    plan["autocontrast"] = chose("autocontrast")
    plan["equalize"] = chose("equalize")
    one = torch.ones(shape, device=dev, dtype=torch.float64)
    for name in ("contrast", "color", "sharpness"):
        f = one
        for form, s in (("", sign), ("_original", None)):
            if name + form in code:
                f = torch.where(chose(name + form), _factor(level, s), f)
        plan[name] = f.float()
    matrix = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64, device=dev)
    matrix = matrix.expand(*shape, 6)
    for kind in GEOMETRIC:
        if kind in code:
            m = _matrix(kind, level.reshape(-1), sign.reshape(-1), h, w).view(*shape, 6)
            matrix = torch.where(chose(kind).unsqueeze(-1), m, matrix)
    plan["affine"] = _fixed_point(matrix)
    return plan


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


def _tables(v: Tensor, idx: Tensor, plan: dict[str, Tensor], kinds: frozenset[str]) -> Tensor:
    """The (N, C, 256) tables of the chunk ``v``: the plan's, with those of autocontrast,
    equalize and contrast (which depend on the pixels) for the samples that chose them."""
    n, c, h, w = v.shape
    dev = v.device
    ramp = torch.arange(256, device=dev, dtype=torch.float64)
    lut = plan["lut"].view(n, 1, 256).expand(n, c, 256)
    if kinds & {"autocontrast", "equalize"}:
        hist = torch.zeros(n * c * 256, device=dev, dtype=torch.float32)
        hist.index_add_(0, idx, torch.ones((), device=dev, dtype=torch.float32).expand(idx.numel()))
        hist = hist.view(n, c, 256).to(torch.float64)  # counts below 2^24: exact
        present = hist > 0
        lo = torch.where(present, ramp, 256.0).amin(-1, keepdim=True)
        hi = torch.where(present, ramp, -1.0).amax(-1, keepdim=True)
        if "autocontrast" in kinds:
            span = (hi - lo).clamp(min=1.0)
            stretched = torch.floor(((ramp - lo) * 510.0 + span) / (2.0 * span)).clamp(0, 255)
            ac = torch.where(hi > lo, stretched, ramp).float()
            lut = torch.where(plan["autocontrast"].view(n, 1, 1), ac, lut)
        if "equalize" in kinds:
            top_count = hist.gather(-1, hi.long())
            step = torch.floor((h * w - top_count) / 255.0)
            before = hist.cumsum(-1) - hist
            eq = torch.floor((torch.floor(step / 2) + before) / step.clamp(min=1.0)).clamp(max=255)
            eq = torch.where(step > 0, eq, ramp).float()
            lut = torch.where(plan["equalize"].view(n, 1, 1), eq, lut)
    if kinds & {"contrast", "contrast_original"}:
        total = _grey(v).sum(dim=(1, 2, 3), dtype=torch.float64)
        mean = torch.floor((2.0 * total + h * w) / (2.0 * h * w)).float().view(n, 1, 1)
        f = plan["contrast"].view(n, 1, 1)
        ct = _blend(mean, ramp.float(), f)  # f = 1 (another op): the identity
        lut = torch.where((f != 1.0), ct.expand(n, c, 256), lut)
    return lut


def _apply_tables(v: Tensor, idx: Tensor, lut: Tensor) -> Tensor:
    return lut.reshape(-1).index_select(0, idx).view_as(v)


def _color(v: Tensor, f: Tensor) -> Tensor:
    if v.shape[1] == 1:  # a grey image has no colour to change
        return v
    return _blend(_grey(v), v, f.view(-1, 1, 1, 1))


def _sharpness(v: Tensor, f: Tensor) -> Tensor:
    h, w = v.shape[2:]
    if h < 3 or w < 3:
        return v
    # SMOOTH: [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded half up, on the interior pixels
    # 3x3 box sums (integers below 2^12: exact) plus 4 x the centre, by shifted slices
    rows = v[:, :, :-2] + v[:, :, 1:-1]
    rows += v[:, :, 2:]
    k = rows[..., :-2] + rows[..., 1:-1]
    k += rows[..., 2:]
    centre = v[:, :, 1:-1, 1:-1]
    k.add_(centre, alpha=4.0)
    # floor(k / 13 + 1/2): k / 13 is never within 1/26 of a half-integer, so float32 is exact
    smooth = k.mul_(1.0 / 13.0).add_(0.5).floor_()
    out = torch.nn.functional.pad(_blend(smooth, centre, f.view(-1, 1, 1, 1)), (1, 1, 1, 1))
    out[:, :, 0] = v[:, :, 0]  # the border is left as it is
    out[:, :, -1] = v[:, :, -1]
    out[:, :, :, 0] = v[:, :, :, 0]
    out[:, :, :, -1] = v[:, :, :, -1]
    return out


def _affine(v: Tensor, a: Tensor) -> Tensor:
    """Nearest-neighbour inverse affine warp with black fill, in Pillow's 16.16 fixed point
    (``a``: (N, 6) int32 coefficients from :func:`_fixed_point`)."""
    n, c, h, w = v.shape
    dev = v.device
    a = a.view(n, 6, 1, 1)
    xs = torch.arange(w, device=dev, dtype=torch.int32).view(1, 1, w)
    ys = torch.arange(h, device=dev, dtype=torch.int32).view(1, h, 1)
    # (A2 + A0 x) per column plus (A1 y) per row: one full-size add per coordinate
    xin = torch.add(a[:, 2] + xs * a[:, 0], ys * a[:, 1]).bitwise_right_shift_(16)
    yin = torch.add(a[:, 5] + xs * a[:, 3], ys * a[:, 4]).bitwise_right_shift_(16)
    # read from the image framed by one black pixel: every outside source lands on the frame
    xin = xin.clamp_(-1, w).add_(1)
    yin = yin.clamp_(-1, h).add_(1)
    src = yin.mul_(w + 2).add_(xin).to(torch.int64).view(n, 1, h * w)
    framed = torch.nn.functional.pad(v, (1, 1, 1, 1)).view(n, c, (h + 2) * (w + 2))
    return framed.gather(2, src.expand(n, c, h * w)).view(n, c, h, w)


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
    tables = {*_TABLES, "brightness", "contrast", "brightness_original", "contrast_original"}
    if present & tables:
        idx = _table_index(v)
        v = _apply_tables(v, idx, _tables(v, idx, plan, present))
    if present & {"color", "color_original"}:
        v = _color(v, plan["color"])
    if present & {"sharpness", "sharpness_original"}:
        v = _sharpness(v, plan["sharpness"])
    if present & set(GEOMETRIC):
        v = _affine(v, plan["affine"])
    return v


def apply_ops(v: Tensor, op: Tensor, level: Tensor, sign: Tensor, kinds: Sequence[str]) -> Tensor:
    """:func:`apply_plan` of :func:`plan_ops`: sample ``i`` gets ``kinds[op[i]]`` at
    ``level[i]`` in direction ``sign[i]`` (an ``op`` outside ``range(len(kinds))``: unchanged)."""
    return apply_plan(v, plan_ops(op, level, sign, kinds, v.shape[2], v.shape[3]), kinds)


# ---------------------------------------------------------------- deterministic kernels


def _run(kind: str, x: Tensor, level: float | Tensor, sign: float | Tensor = 1.0) -> Tensor:
    check_batch(x)
    n = x.shape[0]
    lv = _per_sample(level, n, x.device, "level")
    sg = _per_sample(sign, n, x.device, "sign")
    op = torch.zeros(n, dtype=torch.int64, device=x.device)
    return from_levels(apply_ops(to_levels(x), op, lv, sg, (kind,)), x)


def autocontrast(x: Tensor, level: float | Tensor = 0.0) -> Tensor:
    """:func:`augment.autocontrast` on every sample (``level`` unused)."""
    return _run("autocontrast", x, level)


def equalize(x: Tensor, level: float | Tensor = 0.0) -> Tensor:
    """:func:`augment.equalize` on every sample (``level`` unused)."""
    return _run("equalize", x, level)


def posterize(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.posterize` on every sample at its level."""
    return _run("posterize", x, level)


def solarize(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.solarize` on every sample at its level."""
    return _run("solarize", x, level)


def rotate(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.rotate`: :math:`3\\ell\\sigma` degrees counter-clockwise per sample."""
    return _run("rotate", x, level, sign)


def shear_x(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.shear_x` on every sample at its level and sign."""
    return _run("shear_x", x, level, sign)


def shear_y(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.shear_y` on every sample at its level and sign."""
    return _run("shear_y", x, level, sign)


def translate_x(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.translate_x` on every sample at its level and sign."""
    return _run("translate_x", x, level, sign)


def translate_y(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.translate_y` on every sample at its level and sign."""
    return _run("translate_y", x, level, sign)


def color(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.color`: saturation factor :math:`1 + 0.09\\ell\\sigma` per sample."""
    return _run("color", x, level, sign)


def contrast(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.contrast`: contrast factor :math:`1 + 0.09\\ell\\sigma` per sample."""
    return _run("contrast", x, level, sign)


def brightness(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.brightness`: brightness factor :math:`1 + 0.09\\ell\\sigma` per sample."""
    return _run("brightness", x, level, sign)


def sharpness(x: Tensor, level: float | Tensor, sign: float | Tensor) -> Tensor:
    """:func:`augment.sharpness`: sharpness factor :math:`1 + 0.09\\ell\\sigma` per sample."""
    return _run("sharpness", x, level, sign)


def color_original(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.color_original`: factor :math:`0.1 + 0.18\\ell` per sample."""
    return _run("color_original", x, level)


def contrast_original(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.contrast_original`: factor :math:`0.1 + 0.18\\ell` per sample."""
    return _run("contrast_original", x, level)


def brightness_original(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.brightness_original`: factor :math:`0.1 + 0.18\\ell` per sample."""
    return _run("brightness_original", x, level)


def sharpness_original(x: Tensor, level: float | Tensor) -> Tensor:
    """:func:`augment.sharpness_original`: factor :math:`0.1 + 0.18\\ell` per sample."""
    return _run("sharpness_original", x, level)
