"""The grouped way of running the batched chains (eager CPU): each operation runs on the
samples that chose it only, on uint8 grey levels, as the PIL path does per image.

A layer sorts the rows of the batch by operation (one copy of the batch), so that the samples
of each operation are a slice. The operations that share a stage run as one group
(:data:`_GROUPS`): the point operations and the brightness and contrast blends apply the
formulas of their 256-entry tables to their slice's levels (equalize: a table lookup); color
and sharpness are one blend each; rotate and shear_y are warped, and the shifts of whole rows
or planes (shear_x, translate_x, translate_y) are window copies. The rows go back to their
order once, after the last layer. Sorting reads the op indices on the host: CPU tensors only,
not for accelerators or compiled code (the slots of :mod:`augment.batched.slots` are that
path). The values equal :func:`~augment.batched.ops.apply_plan`'s (the same pixels, per
sample; tested).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from augment.batched.plan import _factor, _posterize_step, _solarize_threshold, plan_ops
from augment.batched.stages import (
    FAMILIES,
    KINDS,
    _affine,
    _blend16,
    _grey,
    _smooth,
    _table_index,
    as_rows,
    autocontrast_range,
    equalize_tables,
    grey_mean,
    to_uint8,
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
    # the warped ones first, then those that shift rows: each two are one slice
    ("geometric", ("rotate", "shear_y", "shear_x", "translate_x", "translate_y"), ("affine",)),
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


def _posterize(u: Tensor, level: Tensor) -> None:
    """floor(v / step) step, step a power of 2: the high bits of v."""
    u &= (256 - _posterize_step(level)).to(torch.uint8).view(-1, 1, 1, 1)


def _solarize(u: Tensor, level: Tensor) -> None:
    """255 - v = v XOR 255 where v >= the threshold (256: nowhere)."""
    t = _solarize_threshold(level)
    threshold = t.clamp(max=255.0).to(torch.uint8).view(-1, 1, 1, 1)
    # against a full-size threshold: torch's CPU comparison with a broadcast (or scalar)
    # operand is over 10x slower than with a tensor of the same shape
    threshold = threshold.expand_as(u).contiguous()
    flip = torch.ge(u, threshold).view(torch.uint8)
    u ^= flip.mul_(torch.where(t < 256.0, 255, 0).to(torch.uint8).view(-1, 1, 1, 1))


def _scaled(u: Tensor, level: Tensor, sign: Tensor | None) -> None:
    """brightness: a blend with black, ``f v`` (``v - 0`` and ``+ 0`` change no float32)."""
    f = _factor(level, sign).float().view(-1, 1, 1, 1)
    u.copy_(u.to(torch.float32).mul_(f).clamp_(0.0, 255.0).to(torch.int16))


def _contrast(u: Tensor, f: Tensor) -> None:
    """A blend with the mean grey level, rounded half up (see :func:`contrast_tables`)."""
    v = u.to(torch.float32)
    u.copy_(_blend16(grey_mean(_grey(v)), v, f.view(-1, 1, 1, 1)))


def _autocontrast(u: Tensor) -> None:
    """:func:`autocontrast_tables`'s formula on the levels themselves: between the lowest and
    the highest level present, the quotient lies in [1/2, 255 + 1/2], so no clamp is needed
    and the conversion's truncation is the floor."""
    lo, span = autocontrast_range(u)
    q = u.to(torch.float32).sub_(lo).mul_(510.0).add_(span).div_(span * 2.0)
    u.copy_(q.to(torch.int16))


def _equalize(u: Tensor) -> None:
    n, c = u.shape[:2]
    idx = _table_index(u)  # read before u is overwritten
    hist = torch.bincount(idx, minlength=n * c * 256).view(n, c, 256).to(torch.int32)
    tables = to_uint8(equalize_tables(u, hist))
    torch.index_select(tables.view(-1), 0, idx, out=u.view(-1))


def _table_stage(g: _Slice) -> None:
    """The point operations and the brightness and contrast blends, each on its slice: the
    formula of its 256-entry table applied to the levels themselves (a table lookup, in torch
    single-threaded and several times slower, only for equalize)."""
    for kind, s in g.parts.items():
        u = g.u[s]
        if kind == "posterize":
            _posterize(u, g.level[s])
        elif kind == "solarize":
            _solarize(u, g.level[s])
        elif kind.startswith("brightness"):
            _scaled(u, g.level[s], None if kind.endswith("_original") else g.sign[s])
        elif kind.startswith("contrast"):
            _contrast(u, g.plan["contrast"][s])
        elif kind == "autocontrast":
            _autocontrast(u)
        else:
            _equalize(u)


def _color_stage(g: _Slice) -> None:
    if g.u.shape[1] == 1:  # a grey image has no colour to change
        return
    v = g.u.to(torch.float32)
    g.u.copy_(_blend16(_grey(v), v, g.plan["color"].view(-1, 1, 1, 1)))


def _sharpness_stage(g: _Slice) -> None:
    h, w = g.u.shape[2:]
    if h < 3 or w < 3:
        return
    v = g.u.to(torch.float32)
    smooth, centre = _smooth(v)
    # the border is left as it is
    g.u[:, :, 1:-1, 1:-1] = _blend16(smooth, centre, g.plan["sharpness"].view(-1, 1, 1, 1))


def _shifted(rows: Tensor, shift: Tensor, out: Tensor) -> None:
    """``out[r, i] = rows[r, i + shift[r]]``, black outside the row (``rows``: (R, L) uint8,
    ``shift``: (R,) int64): each row of ``out`` is one window of the rows laid out with a
    black gap as long as the longest shift between them (read on the host: CPU only), so a
    copy, several times cheaper than a gather."""
    r, length = rows.shape
    shift = shift.clamp(-length, length)
    gap = int(shift.abs().max())
    framed = torch.zeros(gap + r * (length + gap), dtype=rows.dtype)
    framed[gap:].view(r, length + gap)[:, :length] = rows
    start = torch.arange(gap, gap + r * (length + gap), length + gap).add_(shift)
    torch.index_select(framed.unfold(0, length, 1), 0, start, out=out)


def _shift_rows(u: Tensor, a: Tensor) -> None:
    """shear_x and translate_x: their 16.16 coefficients have ``A0 = A4 = 2^16``, ``A3 = 0``
    and ``A5 = 2^15``, so :func:`_affine`'s source pixel is ``(x + ((A2 + A1 y) >> 16), y)``:
    each row shifted as a whole, the same pixels as the warp."""
    n, c, h, w = u.shape
    ys = torch.arange(h, dtype=torch.int32)
    shift = (a[:, 2:3] + a[:, 1:2] * ys).bitwise_right_shift_(16).to(torch.int64)
    rows = u.view(n * c * h, w)
    _shifted(rows, shift.view(n, 1, h).expand(n, c, h).reshape(-1), rows)


def _shift_planes(u: Tensor, a: Tensor) -> None:
    """translate_y: ``A0 = A4 = 2^16``, ``A1 = A3 = 0``, ``A2 = 2^15`` and ``A5 = 2^16 dy +
    2^15``, so the source pixel is ``(x, y + dy)``: each plane shifted by ``dy`` whole rows."""
    n, c, h, w = u.shape
    shift = a[:, 5].bitwise_right_shift(16).to(torch.int64).mul_(w)
    planes = u.view(n * c, h * w)
    _shifted(planes, shift.view(n, 1).expand(n, c).reshape(-1), planes)


def _geometric_stage(g: _Slice) -> None:
    """rotate and shear_y by the warp (:func:`_affine`), the shifts of whole rows or planes
    (shear_x, translate_x, translate_y) as window copies: the same pixels."""
    a = g.plan["affine"]
    for kinds, apply in _GEOMETRIC_PARTS:
        present = [g.parts[kind] for kind in kinds if kind in g.parts]
        if present:
            s = slice(present[0].start, present[-1].stop)  # adjacent in the group's order
            apply(g.u[s], a[s])


def _warp(u: Tensor, a: Tensor) -> None:
    _affine(u, a, out=u)  # _affine reads a framed copy of u


_GEOMETRIC_PARTS: tuple[tuple[tuple[str, ...], Callable[[Tensor, Tensor], None]], ...] = (
    (("rotate", "shear_y"), _warp),
    (("shear_x", "translate_x"), _shift_rows),
    (("translate_y",), _shift_planes),
)

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
    """:func:`~augment.batched.ops.apply_plan` of :func:`~augment.batched.ops.plan_ops` on
    uint8 grey levels ``u`` (CPU, eager), each operation on the samples that chose it: the work
    per sample is that of its one operation. ``op``, ``level``, ``sign``: (N,), as in
    :func:`~augment.batched.ops.apply_ops` (-1: unchanged). Returns a new tensor (``u`` is
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


class Workspace:
    """The buffers of :func:`apply_layers`'s sorted rows, kept by a transform object from one
    batch to the next: a fresh large tensor on every batch comes back as fresh pages from the
    C allocator (with glibc: page faults, about a tenth of AugMix's time at 32 x 32 on a 2-core
    machine). Two buffers as large as the largest group seen (about 16 MiB at 224 x 224).

    One caller at a time: a call that finds it in use (another thread) takes fresh buffers.
    Copies and pickles start empty."""

    def __init__(self) -> None:
        self._buffers: list[Tensor] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[Workspace | None]:
        """This workspace while the caller holds it, or ``None`` if another caller does."""
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            yield self
        finally:
            self._lock.release()

    def rows(self, like: Tensor, count: int) -> list[Tensor]:
        """Two (count, L) tensors of ``like``'s dtype (``like``: (., L)) in the buffers."""
        nbytes = count * like.shape[1] * like.element_size()
        if not self._buffers or self._buffers[0].numel() < nbytes:
            self._buffers = [torch.empty(nbytes, dtype=torch.uint8) for _ in range(2)]
        return [b[:nbytes].view(like.dtype).view(count, like.shape[1]) for b in self._buffers]

    def __reduce__(self) -> tuple[type[Workspace], tuple[()]]:
        return (Workspace, ())


def apply_layers(
    u: Tensor,
    draws: tuple[Tensor, Tensor, Tensor],
    plan: dict[str, Tensor],
    kinds: Sequence[str],
    copies: int = 1,
    workspace: Workspace | None = None,
) -> Tensor:
    """:func:`apply_grouped` layer after layer: ``draws`` ``(op, level, sign)``, each
    (layers, N), and ``plan``, their :func:`~augment.batched.ops.plan_ops` but the fixed
    tables (``only=NOT_LUT``, entries (layers, N, ...)), on ``copies`` copies of ``u``
    (contiguous uint8, K samples, ``N = copies K``: row ``j K + i`` is copy ``j`` of sample
    ``i``; the first layer's sort makes them). Returns the result in a new tensor (with a
    ``workspace``: in its buffers, valid until its next use); ``u`` is left as it is.
    """
    layers = draws[0].shape[0]
    if layers == 0:
        return u.repeat(copies, 1, 1, 1)
    k = u.shape[0]
    n = copies * k
    shape = (n, *u.shape[1:])
    table = _places(tuple(kinds))
    at = torch.arange(n)  # at[i]: the row of the result that the i-th row of u holds
    rows = as_rows(u)
    # two buffers, written in turn (a fresh one per layer costs page faults)
    if workspace is None:
        spare = [rows.new_empty((n, rows.shape[1])) for _ in range(2)]
    else:
        spare = workspace.rows(rows, n)
    draws = (draws[0], draws[1].to(torch.float64), draws[2].to(torch.float64))
    for layer in range(layers):
        op, level, sign = (t[layer].index_select(0, at) for t in draws)
        place = table.index_select(0, op + 1)
        counts = torch.bincount(place + 1, minlength=len(_ORDER) + 1).tolist()
        order = torch.argsort(place, stable=True)
        source = order % k if layer == 0 and copies > 1 else order
        rows = torch.index_select(rows, 0, source, out=spare[layer % 2])
        at, level, sign = (t.index_select(0, order) for t in (at, level, sign))
        u = rows.view(torch.uint8).view(shape)
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
    out = spare[layers % 2].index_copy_(0, at, rows)  # back to the samples' order
    return out.view(torch.uint8).view(shape)
