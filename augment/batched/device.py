"""The device path of the batched chains: every layer of slots (:mod:`augment.batched.slots`) in
three stages, each over its own rows, in a few kernels whatever the number of operations.

A layer's slots are gathered in the order of :data:`DEVICE_ORDER`, so that each stage owns one
range of rows:

* **tables** (posterize, solarize, brightness, autocontrast, equalize): every row's
  per-channel 256-entry table, then one lookup for the whole range. The tables of the
  level-only operations are planned once per call (:func:`plan_slots`); autocontrast's come
  from the lowest and highest levels of its planes, equalize's from their histograms (one
  ``index_add_``), both through one formula, ``floor(num / den)`` (Pillow's integer
  arithmetic, exact in float32: every quantity is an integer below ``2^24``, for images of
  up to ``2^24`` pixels, 4096 x 4096).
* **blends** (contrast, color, sharpness): Pillow's ``Image.blend(d, v, f)``, one blend for the
  range, each row with its degenerate image ``d``: its mean grey level (contrast), its grey
  image (color) or its ``SMOOTH``-filtered image with the border unchanged (sharpness).
* **warps** (rotate, shear and translate): Pillow's nearest-neighbour affine map in 16.16
  fixed point, one coordinate computation and one gather for the range.

The values equal the grouped CPU path's (:mod:`augment.batched.grouped`) and so the PIL
primitives' (tested). Per-slot parameters are planned once per call for every layer, on the
host when the level is one number for every slot (RandAugment: only the directions differ, one
``where`` per parameter selects them), otherwise on the device (AugMix's levels). No value is
read on the host and every shape is fixed by the batch's shape: for accelerators and
``torch.compile``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

from augment.batched.plan import _factor, _plan_affine, _plan_lut
from augment.batched.stages import GEOMETRIC

_FIXED = ("posterize", "solarize", "brightness", "brightness_original")  # tables of the level
_STATS = ("autocontrast", "equalize")  # tables of the pixels, in this order
_BLENDS = (
    *("contrast", "contrast_original", "color", "color_original"),
    *("sharpness", "sharpness_original"),
)
DEVICE_ORDER = (*_FIXED, *_STATS, *_BLENDS, *GEOMETRIC)
_WIDTH = 257  # a plane's table: entry 0 unused, so that its index also addresses a histogram
T = TypeVar("T")


def host_cache(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, an ``lru_cache`` of host work, or under ``torch.compile`` the function it wraps
    (traced through: its results are constants of the graph)."""
    return fn.__wrapped__ if torch.compiler.is_compiling() else fn  # type: ignore[attr-defined]


def on_device(
    host: Callable[..., tuple[Tensor, ...]], *args: object, device: torch.device
) -> tuple[Tensor, ...]:
    """The tensors of ``host(*args)`` (an ``lru_cache`` of host tensors) on ``device``, copied
    once and kept: no host-to-device copy per call. Under ``torch.compile``, traced (constants
    of the graph)."""
    if torch.compiler.is_compiling():
        return tuple(t.to(device) for t in host.__wrapped__(*args))  # type: ignore[attr-defined]
    return _device_copies(host, args, device)


@functools.lru_cache(maxsize=256)
def _device_copies(
    host: Callable[..., tuple[Tensor, ...]], args: tuple[object, ...], device: torch.device
) -> tuple[Tensor, ...]:
    return tuple(t.to(device, non_blocking=True) for t in host(*args))


def _floor_div_into(t: Tensor, divisor: float, out: Tensor) -> None:
    """``out = floor(t / divisor)``, ``out`` a strided view (dynamo takes only contiguous
    ``out=`` tensors: there, a copy, which inductor fuses)."""
    if torch.compiler.is_compiling():
        out.copy_(torch.div(t, divisor, rounding_mode="floor"))
    else:
        torch.div(t, divisor, rounding_mode="floor", out=out)


def block_order(kinds: Sequence[str]) -> tuple[int, ...]:
    """The index in ``kinds`` of the operation of every block of slots, in device order (the
    operations a stage applies adjacent, a repeated kind too)."""
    return tuple(sorted(range(len(kinds)), key=lambda j: DEVICE_ORDER.index(kinds[j])))


class Layout(NamedTuple):
    """The row ranges of one layer's stages, from the start of the layer's slots: the tables
    ``[0, tables)`` (autocontrast ``[stats, equalize)``, equalize ``[equalize, tables)``),
    the blends ``[tables, blends)`` (contrast ``[tables, color)``, color ``[color,
    sharpness)``, sharpness ``[sharpness, blends)``), the warps ``[blends, rows)``."""

    stats: int
    equalize: int
    tables: int
    color: int
    sharpness: int
    blends: int
    rows: int


@functools.lru_cache(maxsize=64)
def layout(kinds: tuple[str, ...], per_op: int) -> Layout:
    """The :class:`Layout` of a layer with ``per_op`` slots per operation of ``kinds``."""
    names = [kinds[j] for j in block_order(kinds)]

    def end(group: Sequence[str]) -> int:
        last = max(DEVICE_ORDER.index(k) for k in group)
        return per_op * sum(DEVICE_ORDER.index(k) <= last for k in names)

    return Layout(
        stats=end(_FIXED),
        equalize=end((*_FIXED, "autocontrast")),
        tables=end((*_FIXED, *_STATS)),
        color=end((*_FIXED, *_STATS, "contrast", "contrast_original")),
        sharpness=end(DEVICE_ORDER[: DEVICE_ORDER.index("sharpness")]),
        blends=end((*_FIXED, *_STATS, *_BLENDS)),
        rows=per_op * len(names),
    )


class _SlotKinds(NamedTuple):
    """Which operation every slot draws (slots of every layer in turn): ``flags`` (kinds of
    :data:`DEVICE_ORDER` and "original", M) bool; ``columns`` and ``offset``, the warp's
    coefficients from the affine ones."""

    flags: Tensor
    columns: Tensor
    offset: Tensor


class _SlotChoice:
    """:class:`_SlotKinds`' masks as :class:`augment.batched.plan.Chooser` answers them: the
    planning of :func:`augment.batched.plan.plan_ops` then serves the slots."""

    def __init__(self, kinds: Sequence[str], flags: Tensor) -> None:
        self.kinds, self.flags = frozenset(kinds), flags

    def __contains__(self, kind: str) -> bool:
        return kind in self.kinds

    def __call__(self, kind: str) -> Tensor:
        return self.flags[DEVICE_ORDER.index(kind)]


@functools.lru_cache(maxsize=64)
def _slot_kinds(kinds: tuple[str, ...], per_op: tuple[int, ...]) -> _SlotKinds:
    names = [kinds[j] for j in block_order(kinds)]
    kind = [name for c in per_op for name in names for _ in range(c)]
    original = [s.endswith("_original") for s in kind]
    flags = torch.tensor([[s == k for s in kind] for k in DEVICE_ORDER] + [original])
    # per coordinate (A2, A0, A1) and (A5, A3, A4); + 2^16: the source is read from the image
    # framed by one black pixel (coordinates + 1)
    columns = torch.tensor([2, 0, 1, 5, 3, 4])
    offset = torch.tensor([[65536, 0, 0], [65536, 0, 0]], dtype=torch.int32)
    return _SlotKinds(flags, columns, offset)


class Plan(NamedTuple):
    """Per-slot parameters of every layer (slots in turn, layer after layer): ``table``
    (M, C, 257) uint8, the fixed tables at ``[..., 1:]`` (the other rows are written by their
    layer or unused); ``hist`` (M, C, 257) float32 zeros, equalize's histograms; ``factor``
    (M,) float32, the blend factors; ``warp`` (2, M, 3) int32, per coordinate
    ``(A2 + 2^16, A0, A1)`` and ``(A5 + 2^16, A3, A4)``, the 16.16 affine coefficients."""

    table: Tensor
    hist: Tensor
    factor: Tensor
    warp: Tensor


def _slot_parameters(
    kinds: tuple[str, ...], k: _SlotKinds, level: Tensor, sign: Tensor, h: int, w: int
) -> tuple[Tensor, Tensor, Tensor]:
    """``(lut, factor, warp)`` of every slot: the (M, 256) float32 tables of the level-only
    table operations, the (M,) float32 blend factors and the (2, M, 3) int32 warp
    coefficients, planned as :func:`augment.batched.plan.plan_ops` plans them (``level`` and
    ``sign``: (M,) float64 on ``k``'s device)."""
    chose = _SlotChoice(kinds, k.flags)
    f = torch.where(k.flags[-1], _factor(level, None), _factor(level, sign)).float()
    a = _plan_affine(chose, level, sign, h, w)  # (M, 6)
    warp = a.index_select(-1, k.columns).view(-1, 2, 3).add_(k.offset).transpose(0, 1)
    return _plan_lut(chose, level, sign), f, warp


def _tables(lut: Tensor, c: int) -> Tensor:
    """(..., M, C, 257) uint8 tables from (..., M, 256) float32 ones (entry 0 unused)."""
    table = torch.empty((*lut.shape[:-1], c, _WIDTH), dtype=torch.uint8, device=lut.device)
    table[..., 1:].copy_(lut.unsqueeze(-2).expand(*lut.shape[:-1], c, 256))
    return table


@functools.lru_cache(maxsize=16)
def _host_parameters(
    kinds: tuple[str, ...], per_op: tuple[int, ...], level: float, shape: tuple[int, int, int]
) -> tuple[Tensor, Tensor, Tensor]:
    """``(table, factor, warp)`` of :func:`_slot_parameters` at one level for every slot, for
    both directions (a new first dimension: -1, +1), on the host; ``table`` as in
    :class:`Plan`."""
    k = host_cache(_slot_kinds)(kinds, per_op)
    m = k.flags.shape[1]
    lv = torch.full((m,), level, dtype=torch.float64)
    sides = [
        _slot_parameters(kinds, k, lv, torch.full((m,), s, dtype=torch.float64), *shape[1:])
        for s in (-1.0, 1.0)
    ]
    lut, factor, warp = (torch.stack(pair) for pair in zip(*sides, strict=True))
    return _tables(lut, shape[0]), factor, warp


def plan_slots(
    kinds: tuple[str, ...],
    per_op: tuple[int, ...],
    level: Tensor | float,
    sign: Tensor,
    shape: tuple[int, int, int],
) -> Plan:
    """The :class:`Plan` of every layer's slots (``per_op``: slots per operation, by layer):
    ``level`` (M,) float64 on the device, or one level for every slot (then planned on the
    host for both directions and selected on the device: four launches); ``sign`` (M,) bool,
    True for +1; ``shape``: the images' (C, H, W)."""
    dev = sign.device
    if isinstance(level, Tensor):
        k = _SlotKinds(*on_device(_slot_kinds, kinds, per_op, device=dev))
        lut, factor, warp = _slot_parameters(
            kinds, k, level, torch.where(sign, 1.0, -1.0).double(), *shape[1:]
        )
        table = _tables(lut, shape[0])
    else:
        pairs = on_device(_host_parameters, kinds, per_op, float(level), shape, device=dev)
        (t_neg, t_pos), (f_neg, f_pos), (w_neg, w_pos) = pairs
        table = torch.where(sign.view(-1, 1, 1), t_pos, t_neg)
        factor = torch.where(sign, f_pos, f_neg)
        warp = torch.where(sign.view(1, -1, 1), w_pos, w_neg)
    hist = torch.zeros((sign.shape[0], shape[0], _WIDTH), dtype=torch.float32, device=dev)
    return Plan(table, hist, factor, warp)


# ------------------------------------------------------------------------------- the stages


class _Consts(NamedTuple):
    """A layer's constants, built on the host and copied without waiting."""

    base: Tensor  # (tables, C, 1, 1) int32: 257 (row C + channel) + 1, a plane's table
    ramp: Tensor  # (256,) float32: 0..255
    from510: Tensor  # (tables, C, 256) int32: 510 (x + base), autocontrast's numerator
    one: Tensor  # (1,) float32: 1, the histogram's increment
    xs: Tensor  # (1, 1, 1, W) int32
    ys: Tensor  # (1, 1, H, 1) int32
    lows: Tensor  # (2, 1, 1, 1) int32: 0
    highs: Tensor  # (2, 1, 1, 1) int32: W + 1, H + 1 (the framed image's last column, row)
    taps: Tensor  # (C, 1, 3, 3) float32: Pillow's SMOOTH filter times 13
    half: Tensor  # (C,) float32: 13 / 2, rounding the filtered sum half up
    grey: Tensor  # (2,) float32: 2^15 and 19595, the start of Pillow's 'L' conversion


@functools.lru_cache(maxsize=64)
def _host_consts(tables: int, c: int, h: int, w: int) -> _Consts:
    base = torch.arange(tables * c, dtype=torch.int32).view(tables, c, 1) * _WIDTH + 1
    ramp = torch.arange(256, dtype=torch.int32)
    taps = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]])
    return _Consts(
        base=base.unsqueeze(-1),
        ramp=ramp.float(),
        from510=(ramp + base) * 510,
        one=torch.ones(1),
        xs=torch.arange(w, dtype=torch.int32).view(1, 1, 1, w),
        ys=torch.arange(h, dtype=torch.int32).view(1, 1, h, 1),
        lows=torch.zeros((2, 1, 1, 1), dtype=torch.int32),
        highs=torch.tensor([w + 1, h + 1], dtype=torch.int32).view(2, 1, 1, 1),
        taps=taps.expand(c, 1, 3, 3).contiguous(),
        half=torch.full((c,), 6.5),
        grey=torch.tensor([32768.0, 19595.0]),
    )


def _consts(tables: int, shape: tuple[int, ...], dev: torch.device) -> _Consts:
    return _Consts(*on_device(_host_consts, tables, *shape, device=dev))


def _table_stage(v: Tensor, table: Tensor, hist: Tensor, lay: Layout, k: _Consts) -> None:
    """The table operations on rows ``[0, lay.tables)`` of ``v``, in place: the tables of
    autocontrast and equalize written into ``table`` (their rows), then one lookup."""
    rows = v[: lay.tables]
    n, c, h, w = rows.shape
    idx = torch.add(rows, k.base)  # int32: the value's entry in its plane's table
    a, e = lay.stats, lay.equalize
    if lay.tables > a:
        # the lowest and highest levels, as entries of the planes' tables (level + base)
        lo, hi = torch.aminmax(idx[a:].flatten(2), dim=-1, keepdim=True)  # (., C, 1) int32
        num = torch.empty((n - a, c, 256), dtype=torch.float32, device=v.device)
        den = torch.empty((n - a, c, 1), dtype=torch.float32, device=v.device)
        if e > a:  # autocontrast: floor(((x - lo) 510 + span) / (2 span))
            span = hi[: e - a] - lo[: e - a]
            torch.sub(k.from510[a:e], lo[: e - a], alpha=510, out=num[: e - a]).add_(span)
            torch.mul(span, 2.0, out=den[: e - a])
        if lay.tables > e:  # equalize: floor((before(x) + step // 2) / step), Pillow's
            own = hist[e : lay.tables]  # bin 1 + x counts level x; bin 0 holds step // 2
            flat = hist.view(-1)
            flat.index_add_(0, idx[e:].view(-1), k.one.expand(idx[e:].numel()))
            top = flat.index_select(0, hi[e - a :].view(-1)).view(-1, c, 1)  # at the highest
            torch.div(torch.rsub(top, h * w), 255.0, rounding_mode="floor", out=den[e - a :])
            _floor_div_into(den[e - a :], 2.0, own[..., :1])
            torch.cumsum(own[..., :256], -1, out=num[e - a :])
        # span 0 (one level) or step 0: the identity (the quotient by 0 is dropped)
        q = torch.div(num, den, rounding_mode="floor").clamp_(0.0, 255.0)
        table[a : lay.tables, :, 1:].copy_(torch.where(den > 0, q, k.ramp))
    torch.index_select(table.view(-1), 0, idx.view(-1), out=rows.view(-1))


def _blend_stage(v: Tensor, factor: Tensor, lay: Layout, k: _Consts) -> None:
    """The blends on rows ``[lay.tables, lay.blends)`` of ``v``, in place: each row's
    degenerate image ``d``, then ``Image.blend(d, v, f)`` for all of them (float32
    ``d + f (v - d)``, clamped, truncated: three roundings in Pillow's order)."""
    rows = v[lay.tables : lay.blends]
    n, c, h, w = rows.shape
    d = torch.empty(rows.shape, dtype=torch.float32, device=v.device)
    contrast, color = lay.color - lay.tables, lay.sharpness - lay.tables
    if color > 0:  # Pillow's 'L' conversion of contrast's and color's rows, exactly
        src = rows[:color]
        if c == 3:  # (2^15 + 19595 R + 38470 G + 7471 B) >> 16: integers below 2^24, exact
            grey = torch.addcmul(k.grey[0], src[:, :1], k.grey[1])
            grey.add_(src[:, 1:2], alpha=38470.0).add_(src[:, 2:], alpha=7471.0)
            grey.div_(65536.0, rounding_mode="floor")
        else:
            grey = src
        if contrast > 0:  # the mean grey level, rounded half up
            total = grey[:contrast].sum(dim=(1, 2, 3), dtype=torch.float64)
            mean = total.add_(h * w / 2).div_(h * w, rounding_mode="floor")
            d[:contrast].copy_(mean.view(-1, 1, 1, 1).expand(-1, c, h, w))
        if color > contrast:
            d[contrast:color].copy_(grey[contrast:].expand(-1, c, h, w))
    if n > color:  # sharpness: SMOOTH rounded half up inside, the border as it is
        smooth = d[color:]
        smooth.copy_(rows[color:])
        if h >= 3 and w >= 3:
            # integer taps and levels: exact even in TF32; an error under 1/2 of another
            # algorithm vanishes in the rounding (k / 13 is never within 1/26 of a half)
            s = torch.nn.functional.conv2d(smooth, k.taps, k.half, groups=c)
            _floor_div_into(s, 13.0, smooth[:, :, 1:-1, 1:-1])
    f = factor[lay.tables : lay.blends].view(-1, 1, 1, 1)
    rows.copy_(torch.sub(rows, d).mul_(f).add_(d).clamp_(0.0, 255.0))


def _warp_stage(v: Tensor, warp: Tensor, lay: Layout, k: _Consts) -> None:
    """The geometric operations on rows ``[lay.blends, lay.rows)`` of ``v``, in place: the
    source of output pixel (x, y) is ``((A2 + A0 x + A1 y) >> 16, (A5 + A3 x + A4 y) >> 16)``
    (Pillow's nearest-neighbour affine), black outside the image."""
    rows = v[lay.blends : lay.rows]
    n, c, h, w = rows.shape
    p = warp[:, lay.blends : lay.rows].unsqueeze(-1).unsqueeze(-1)  # (2, n, 3, 1, 1)
    coords = torch.addcmul(torch.addcmul(p[:, :, 0], p[:, :, 1], k.xs), p[:, :, 2], k.ys)
    # in the image framed by one black pixel: + 1 (in the planned A2, A5), clamped onto the frame
    coords.bitwise_right_shift_(16).clamp_(k.lows, k.highs)
    src = torch.empty((n, 1, h * w), dtype=torch.int64, device=v.device)
    torch.add(coords[0], coords[1], alpha=w + 2, out=src.view(n, h, w))
    framed = torch.nn.functional.pad(rows, (1, 1, 1, 1)).view(n, c, -1)
    torch.gather(framed, 2, src.expand(n, c, h * w), out=rows.view(n, c, h * w))


def apply_layer(v: Tensor, plan: Plan, start: int, lay: Layout) -> None:
    """One layer of slots on its gathered rows ``v`` (uint8, in device order), in place; its
    slots are ``[start, start + lay.rows)`` of the plan's."""
    k = _consts(lay.tables, v.shape[1:], v.device)
    end = start + lay.rows
    if lay.tables:
        _table_stage(v, plan.table[start:end], plan.hist[start:end], lay, k)
    if lay.blends > lay.tables:
        _blend_stage(v, plan.factor[start:end], lay, k)
    if lay.rows > lay.blends:
        _warp_stage(v, plan.warp[:, start:end], lay, k)
