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

A layer of per-sample operations runs in one of three ways with equal values:
:func:`apply_plan` (every family of operations on every sample, float32 levels, fixed shapes,
no host reads: the deterministic kernels here and custom pipelines), :func:`apply_grouped`
(each operation on the samples that chose it, uint8 levels, sorting by host reads of the CPU
op indices: the transforms on eager CPU) and the slot path of :mod:`augment.batched.slots`
(each operation on the rows of its slots, sizes known on the host: the transforms on
accelerators and under ``torch.compile``). The planning of the per-sample parameters lives in
:mod:`augment.batched.plan`, the stages and their shared formulas in
:mod:`augment.batched.stages`, the sorted path in :mod:`augment.batched.grouped`.

Float input is processed at 8-bit precision: ``x * 255`` is rounded to the nearest integer
first, as the PIL pipeline sees the image, and each op's output is an integer grey level
divided by 255. The result has the dtype and device of ``x``.

Shape:
    ``x``: :math:`(N, C, H, W)`, :math:`C \in \{1, 3\}`; ``level``, ``sign``: scalars or
    :math:`(N,)`; output: like ``x``.

Example:
    >>> import torch
    >>> from augment.batched import ops as B
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

from augment._args import check_values
from augment.batched.grouped import apply_grouped
from augment.batched.plan import plan_ops
from augment.batched.stages import GEOMETRIC, KINDS, apply_plan

__all__ = [
    "GEOMETRIC",
    "KINDS",
    "apply_grouped",
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
    "from_levels8",
    "plan_ops",
    "posterize",
    "rotate",
    "sharpness",
    "sharpness_original",
    "shear_x",
    "shear_y",
    "solarize",
    "to_levels",
    "to_levels8",
    "translate_x",
    "translate_y",
]

# ------------------------------------------------------------------------------- images


def check_batch(x: object, name: str = "x") -> Tensor:
    """``x`` as a checked (N, C, H, W) tensor, C = 1 or 3, uint8 or floating point in [0, 1]
    (the values checked without a host read on accelerators: :func:`augment._args.check_values`),
    with H, W >= 1 unless the batch is empty (N = 0 comes back as a copy)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim == 4 and x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        raise ValueError(
            f"{name} must be an (N, C, H, W) batch with C = 1 or 3, got shape "
            f"{tuple(x.shape)}, which looks like (N, H, W, C): pass {name}.permute(0, 3, 1, 2) "
            "(a view; the result then comes back in channels_last memory format)"
        )
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(
            f"{name} must be an (N, C, H, W) batch with C = 1 or 3, got shape {tuple(x.shape)}"
        )
    if x.dtype != torch.uint8 and not x.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be torch.uint8 (0..255) or floating point (0..1), got {x.dtype}"
        )
    if x.shape[0] > 0 and (x.shape[2] == 0 or x.shape[3] == 0):  # as the PIL path says it
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if max(x.shape[2], x.shape[3]) > 32767:
        raise ValueError(f"{name} must be at most 32767 pixels a side, got {tuple(x.shape)}")
    if x.is_floating_point() and x.numel() > 0:
        lo, hi = torch.aminmax(x)
        check_values(
            (lo >= 0.0) & (hi <= 1.0),
            f"{name} must hold values in [0, 1] when floating point (it is processed as "
            f"round(255 {name})): divide a batch of 0..255 levels by 255 (or pass it as "
            "torch.uint8), and augment before normalizing (or undo it first: "
            f"{name} * std + mean)",
            lambda: f"values in [{lo.item():g}, {hi.item():g}]",
        )
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


def to_levels8(x: Tensor) -> Tensor:
    """The batch as uint8 grey levels in a new tensor (the values of :func:`to_levels`)."""
    if x.dtype == torch.uint8:
        return x.clone(memory_format=torch.contiguous_format)
    v = (x.to(torch.float32) * 255.0).round_().clamp_(0.0, 255.0)
    return v.to(torch.uint8, memory_format=torch.contiguous_format)


def from_levels8(u: Tensor, like: Tensor) -> Tensor:
    """uint8 grey levels back to ``like``'s dtype (the values of :func:`from_levels`)."""
    if like.dtype == torch.uint8:
        return u
    return (u.to(torch.float32) / 255.0).to(like.dtype)


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
