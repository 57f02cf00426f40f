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
    "autocontrast",
    "brightness",
    "brightness_original",
    "color",
    "color_original",
    "contrast",
    "contrast_original",
    "equalize",
    "from_levels",
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
    return ((v - d) * f).add_(d).clamp_(0.0, 255.0).trunc_()


def _tables(
    v: Tensor,
    op: Tensor,
    code: dict[str, int],
    level: Tensor,
    sign: Tensor,
) -> Tensor:
    """The (N, C, 256) per-sample tables of the point ops and the brightness/contrast blends
    (identity for the samples whose op is none of them)."""
    n, c, h, w = v.shape
    dev = v.device
    ramp = torch.arange(256, device=dev, dtype=torch.float32)
    lut = ramp.expand(n, c, 256)

    def pick(kind: str, table: Tensor) -> None:
        nonlocal lut
        if kind in code:
            lut = torch.where((op == code[kind]).view(n, 1, 1), table, lut)

    ramp64 = ramp.to(torch.float64)
    if "autocontrast" in code or "equalize" in code:
        flat = v.reshape(n * c, h * w)
        hist = torch.zeros(n * c * 256, device=dev, dtype=torch.float32)
        base = torch.arange(0, n * c * 256, 256, device=dev, dtype=torch.int32).view(n * c, 1)
        idx = (flat.to(torch.int32) + base).view(-1)
        hist.index_add_(0, idx, torch.ones((), device=dev, dtype=torch.float32).expand(idx.numel()))
        hist = hist.view(n, c, 256).to(torch.float64)  # counts below 2^24: exact
        present = hist > 0
        lo = torch.where(present, ramp64, 256.0).amin(-1, keepdim=True)
        hi = torch.where(present, ramp64, -1.0).amax(-1, keepdim=True)
        if "autocontrast" in code:
            span = (hi - lo).clamp(min=1.0)
            stretched = torch.floor(((ramp64 - lo) * 510.0 + span) / (2.0 * span)).clamp(0, 255)
            pick("autocontrast", torch.where(hi > lo, stretched, ramp64).float())
        if "equalize" in code:
            top_count = hist.gather(-1, hi.long())
            step = torch.floor((h * w - top_count) / 255.0)
            before = hist.cumsum(-1) - hist
            eq = torch.floor((torch.floor(step / 2) + before) / step.clamp(min=1.0)).clamp(max=255)
            pick("equalize", torch.where(step > 0, eq, ramp64).float())
    if "posterize" in code:
        q = _posterize_step(level).view(n, 1, 1)
        pick("posterize", (torch.floor(ramp64 / q) * q).float().expand(n, c, 256))
    if "solarize" in code:
        t = _solarize_threshold(level).view(n, 1, 1)
        pick("solarize", torch.where(ramp64 >= t, 255.0 - ramp64, ramp64).float().expand(n, c, 256))
    for form in ("", "_original"):
        s = None if form else sign
        if "brightness" + form in code:
            f = _factor(level, s).float().view(n, 1, 1)
            pick("brightness" + form, _blend(torch.zeros_like(ramp), ramp, f).expand(n, c, 256))
        if "contrast" + form in code:
            total = _grey(v).sum(dim=(1, 2, 3), dtype=torch.float64)
            mean = torch.floor((2.0 * total + h * w) / (2.0 * h * w)).float().view(n, 1, 1)
            f = _factor(level, s).float().view(n, 1, 1)
            pick("contrast" + form, _blend(mean.expand(n, 1, 256), ramp, f).expand(n, c, 256))
    return lut


def _apply_tables(v: Tensor, lut: Tensor) -> Tensor:
    n, c = v.shape[:2]
    base = torch.arange(0, n * c * 256, 256, device=v.device, dtype=torch.int32).view(n, c, 1, 1)
    idx = v.to(torch.int32).add_(base)
    return lut.reshape(-1).index_select(0, idx.view(-1)).view_as(v)


def _color(v: Tensor, f: Tensor) -> Tensor:
    if v.shape[1] == 1:  # a grey image has no colour to change
        return v
    return _blend(_grey(v), v, f.view(-1, 1, 1, 1))


def _sharpness(v: Tensor, f: Tensor) -> Tensor:
    h, w = v.shape[2:]
    if h < 3 or w < 3:
        return v
    # SMOOTH: [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded half up, on the interior pixels
    rows = v[:, :, :-2] + v[:, :, 1:-1] + v[:, :, 2:]
    k = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]
    centre = v[:, :, 1:-1, 1:-1]
    k.add_(centre, alpha=4.0)
    smooth = k.mul_(2.0).add_(13.0).div_(26.0).floor_()
    out = v.clone()
    out[:, :, 1:-1, 1:-1] = _blend(smooth, centre, f.view(-1, 1, 1, 1))
    return out


def _affine(v: Tensor, matrix: Tensor) -> Tensor:
    """Nearest-neighbour inverse affine warp with black fill, in Pillow's 16.16 fixed point."""
    n, c, h, w = v.shape
    dev = v.device
    m = matrix
    # pixel centres folded into the offsets, as Pillow does, then rounded to 16.16
    a = torch.stack(
        [
            m[:, 0],
            m[:, 1],
            m[:, 2] + 0.5 * m[:, 0] + 0.5 * m[:, 1],
            m[:, 3],
            m[:, 4],
            m[:, 5] + 0.5 * m[:, 3] + 0.5 * m[:, 4],
        ],
        dim=1,
    )
    a = torch.floor(a * _FIX + 0.5).to(torch.int32).view(n, 6, 1, 1)
    xs = torch.arange(w, device=dev, dtype=torch.int32).view(1, 1, w)
    ys = torch.arange(h, device=dev, dtype=torch.int32).view(1, h, 1)
    xin = (a[:, 2] + xs * a[:, 0] + ys * a[:, 1]) >> 16
    yin = (a[:, 5] + xs * a[:, 3] + ys * a[:, 4]) >> 16
    inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
    src = torch.where(inside, yin * w + xin, 0).to(torch.int64).view(n, 1, h * w)
    out = v.reshape(n, c, h * w).gather(2, src.expand(n, c, h * w)).view(n, c, h, w)
    return out.mul_(inside.view(n, 1, h, w))


def apply_ops(v: Tensor, op: Tensor, level: Tensor, sign: Tensor, kinds: Sequence[str]) -> Tensor:
    """One operation per sample: sample ``i`` gets ``kinds[op[i]]`` at ``level[i]``, ``sign[i]``.

    ``v`` holds float32 grey levels (see :func:`to_levels`); ``op`` is an (N,) integer tensor,
    and an index outside ``range(len(kinds))`` leaves the sample unchanged; ``level`` and
    ``sign`` are (N,) float tensors. Every family of operations present in ``kinds`` is applied
    to the whole batch, each sample with its own parameters (the identity for the samples that
    chose another operation): one table lookup for the point ops and the brightness and
    contrast blends, one blend with the grey image for color, one 3x3 blur and blend for
    sharpness, one fixed-point affine gather for the five geometric ops. No value is read on
    the host. Peak extra memory: about three float32 copies of ``v`` (plus an int32 index the
    size of ``v``, and an int64 one a third of it).
    """
    n, _, h, w = v.shape
    code = {kind: i for i, kind in enumerate(kinds)}
    level = level.to(torch.float64)
    sign = sign.to(torch.float64)
    if any(
        k in code
        for k in (*_TABLES, "brightness", "contrast", *_original(("brightness", "contrast")))
    ):
        v = _apply_tables(v, _tables(v, op, code, level, sign))
    for form in ("", "_original"):
        s = None if form else sign
        if "color" + form in code:
            f = torch.where(op == code["color" + form], _factor(level, s), 1.0).float()
            v = _color(v, f)
        if "sharpness" + form in code:
            f = torch.where(op == code["sharpness" + form], _factor(level, s), 1.0).float()
            v = _sharpness(v, f)
    geometric = [k for k in GEOMETRIC if k in code]
    if geometric:
        identity = torch.tensor(
            [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64, device=v.device
        )
        matrix = identity.expand(n, 6)
        for kind in geometric:
            matrix = torch.where(
                (op == code[kind]).view(n, 1), _matrix(kind, level, sign, h, w), matrix
            )
        v = _affine(v, matrix)
    return v


def _original(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"{name}_original" for name in names)


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
