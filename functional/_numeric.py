"""Dtype and numeric helpers shared by the tensor ops and the training-state helpers.

The dtype an op computes or accumulates in (:func:`compute_dtype`, :func:`accumulation_dtype`),
a floating result cast back to an integer dtype without wrapping round (:func:`cast_result`,
:func:`int64_range`), grouping for the ``torch._foreach_*`` kernels and the global norm built on
it (SAM, gradient clipping, EMA, SWA), the local shards of ``DTensor`` parameters and sums over
their shards (:func:`local_tensors`, :func:`sum_over_shards`: SAM and clipping under FSDP2), SAM's
one-pass perturbation (:func:`add_scaled_`), rounding of scaled schedule lengths
(:func:`round_half_up`), and Python scalars that stay symbolic under ``torch.compile``
(:func:`sym_floor`, :func:`scalar_tensor`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np
import torch

from functional._compat import fused_sgd_is_correct

__all__ = [
    "accumulation_dtype",
    "add_scaled_",
    "cast_result",
    "compute_dtype",
    "foreach_total_norm",
    "group_by_device_and_dtype",
    "int64_range",
    "is_sharded",
    "local_tensors",
    "round_half_up",
    "scalar_tensor",
    "sum_over_shards",
    "sym_floor",
]


def round_half_up(value: float) -> int:
    """Nearest integer, halves rounded up (``2.5 -> 3``), robust to ``0.29 * 100 = 28.999...``.

    Python's ``round`` rounds halves to even and ``int`` truncates; lengths of schedules and
    training phases scaled by a ratio want the nearest integer, ties going to the longer phase.
    """
    return math.floor(value + 0.5 + 1e-9)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype reductions and decompositions of ``dtype`` data run in: float64 for float64,
    float32 for everything else (half precisions, integers).

    Compare :func:`compute_dtype`, which keeps every floating dtype (for elementwise ops).
    """
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def group_by_device_and_dtype(
    tensors: Sequence[torch.Tensor], *others: Sequence[torch.Tensor]
) -> dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]]:
    """Split parallel tensor lists into groups that ``torch._foreach_*`` kernels accept.

    The key of each group is the ``(device, dtype)`` of ``tensors[i]``; the value holds one list
    per argument (``tensors`` first, then each of ``others``), in the original order.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
    for i, t in enumerate(tensors):
        lists = groups.setdefault((t.device, t.dtype), [[] for _ in range(1 + len(others))])
        lists[0].append(t)
        for j, other in enumerate(others, start=1):
            lists[j].append(other[i])
    return groups


def _dtensor_type() -> type | None:
    """``DTensor`` when ``torch.distributed.tensor`` has been imported, else None: a tensor can
    only be a DTensor once that module is loaded, so plain code never pays for importing it."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def is_sharded(t: torch.Tensor) -> bool:
    """Whether ``t`` is a ``DTensor`` (a parameter or gradient of ``fully_shard``, for example)."""
    dtensor = _dtensor_type()
    return dtensor is not None and isinstance(t, dtensor)


def local_tensors(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's local part: the shard a ``DTensor`` holds on this rank (the same storage:
    in-place updates of it update the DTensor, under ``torch.no_grad``), others unchanged.

    Element-wise work (scaling, clamping, copying, an update) is correct on local shards; reductions
    over a sharded tensor are not (see :func:`foreach_total_norm`, :func:`sum_over_shards`).
    """
    dtensor = _dtensor_type()
    if dtensor is None:
        return list(tensors)
    return [t.to_local() if isinstance(t, dtensor) else t for t in tensors]  # type: ignore[attr-defined]


def sum_over_shards(
    local: torch.Tensor, like: torch.Tensor, split_dims: Sequence[int] | None = None
) -> torch.Tensor:
    """Sums computed on this rank's shard of the DTensor ``like``, summed over the ranks that hold
    the other shards: an in-place all-reduce over every mesh dimension on which ``like`` is
    sharded along a tensor dimension in ``split_dims`` (None: any). Replicated mesh dimensions
    already hold whole values and are left alone. Returns ``local``.
    """
    import torch.distributed as dist

    mesh = like.device_mesh  # type: ignore[attr-defined]
    for mesh_dim, placement in enumerate(like.placements):  # type: ignore[attr-defined]
        if placement.is_partial():
            raise ValueError(
                "tensors with a Partial placement (unreduced sums) are not supported: "
                "redistribute them to Shard or Replicate first"
            )
        if placement.is_shard() and (split_dims is None or placement.dim in split_dims):
            dist.all_reduce(local, group=mesh.get_group(mesh_dim))
    return local


def _local_norm(
    tensors: Sequence[torch.Tensor], out_device: torch.device, out_dtype: torch.dtype
) -> torch.Tensor:
    """L2 norm of plain tensors, one ``torch._foreach_norm`` per device and dtype."""
    partial = []
    for (_, dtype), (group,) in group_by_device_and_dtype(tensors).items():
        norms = torch._foreach_norm(group, 2.0, dtype=accumulation_dtype(dtype))
        partial.append(torch.linalg.vector_norm(torch.stack(norms)).to(out_device, out_dtype))
    return partial[0] if len(partial) == 1 else torch.linalg.vector_norm(torch.stack(partial))


def foreach_total_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of all ``tensors`` taken together, with ``torch._foreach_norm``.

    Accumulates in float32 (float64 when a tensor is float64); returns a 0-d tensor on the first
    tensor's device (CPU and 0.0 for an empty list). Non-finite entries give a non-finite norm.
    ``DTensor`` entries (sharded with ``fully_shard``, for example) count whole: the norm of their
    local shards is summed over the ranks that hold the others (one all-reduce per mesh and
    placement), and the result, a plain tensor, is the same on every rank.
    """
    if len(tensors) == 0:
        return torch.zeros((), dtype=torch.float32)
    out_device = tensors[0].device
    out_dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    plain: list[torch.Tensor] = []
    sharded: dict[tuple[object, ...], list[torch.Tensor]] = {}
    for t in tensors:
        if is_sharded(t):
            sharded.setdefault((t.device_mesh, t.placements), []).append(t)  # type: ignore[attr-defined]
        else:
            plain.append(t)
    if not sharded:
        return _local_norm(plain, out_device, out_dtype)
    partial = [_local_norm(plain, out_device, out_dtype)] if plain else []
    for group in sharded.values():
        local = _local_norm(local_tensors(group), out_device, out_dtype)
        partial.append(sum_over_shards(local.square(), group[0]).sqrt())
    return partial[0] if len(partial) == 1 else torch.linalg.vector_norm(torch.stack(partial))


def _fusable(p: torch.Tensor, g: torch.Tensor) -> bool:
    """Whether CUDA's fused kernels take the pair: laid out alike, and dense."""
    dense = p.is_contiguous() or p.is_contiguous(memory_format=torch.channels_last)
    return dense and p.stride() == g.stride()


def add_scaled_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    scale: torch.Tensor,
    skipped: torch.Tensor,
) -> None:
    """``p += scale·g`` for same-device, same-dtype pairs, left undone when ``skipped`` is set.

    The product is formed in float32 (float64 for float64) and the sum rounded once to the
    weight's dtype: ``scale`` rounded to float16 would be subnormal, then 0, as ‖g‖ grows. Fused
    SGD with ``maximize=True``, no momentum and ``lr=scale`` is exactly this update, in one pass
    (one launch for all tensors), and it skips on the device when its ``found_inf`` is set: no
    ``0·inf = NaN`` reaches the weights, and no gradient is touched to prevent it. Under
    compile, and on releases whose kernel is wrong for the dtype (``fused_sgd_is_correct``), the
    same update runs per tensor.
    """
    device = params[0].device
    # CUDA reads a tensor lr as float32 (for float64 weights too: the factor is then rounded to
    # float32, a relative 6e-8); the CPU kernel reads it as a double.
    lr_dtype = scale.dtype if device.type == "cpu" else torch.float32
    lr = scale.to(device=device, dtype=lr_dtype, non_blocking=True)
    # (The fused kernel has no meta implementation, so a compiled step takes the per-tensor form,
    # which inductor fuses anyway.)
    usable = not torch.compiler.is_compiling() and fused_sgd_is_correct(device, params[0].dtype)
    pairs = zip(params, grads, strict=True)
    fused = [i for i, (p, g) in enumerate(pairs) if _fusable(p, g)] if usable else []
    if fused:
        torch._fused_sgd_(
            [params[i] for i in fused],
            [grads[i] for i in fused],
            [],
            weight_decay=0.0,
            momentum=0.0,
            lr=lr,
            dampening=0.0,
            nesterov=False,
            maximize=True,
            is_first_step=False,
            found_inf=skipped.to(device=device, dtype=torch.float32, non_blocking=True),
        )
    if len(fused) < len(params):  # compiling, a pair it does not take, or a wrong kernel
        skip = skipped.to(device, non_blocking=True)
        factor = scale.to(device, non_blocking=True)
        acc = accumulation_dtype(params[0].dtype)
        for i in sorted(set(range(len(params))) - set(fused)):
            p = params[i]
            e = torch.where(skip, 0.0, grads[i].to(acc) * factor)  # no 0·inf = NaN either
            p.copy_(torch.add(p, e))  # one rounding to p's dtype


# Integer dtypes whose values float32 cannot hold exactly: mixed and resized in float64.
_WIDE_INTEGERS = frozenset(
    {
        torch.int32,
        torch.int64,
        getattr(torch, "uint32", torch.int64),
        getattr(torch, "uint64", torch.int64),
    }
)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The floating dtype an op computes in for data of ``dtype``.

    Floating and complex dtypes are kept; 8- and 16-bit integers compute in float32 (exact); 32- and 64-bit
    integers in float64 (exact for int32; int64 beyond 2**53 is rounded to float64's precision).
    Compare :func:`accumulation_dtype`, which also lifts half precisions to float32.
    """
    if dtype.is_floating_point or dtype.is_complex:
        return dtype
    return torch.float64 if dtype in _WIDE_INTEGERS else torch.float32


def _float_bounds(dtype: torch.dtype, float_dtype: torch.dtype) -> tuple[float, float]:
    """The integer range of ``dtype`` as values ``float_dtype`` holds exactly (rounded inwards).

    ``float32(2**31 - 1)`` is ``2**31``: clamping to it and casting wraps round to the minimum.
    """
    info = torch.iinfo(dtype)
    np_float = np.float64 if float_dtype == torch.float64 else np.float32
    high = np_float(info.max)
    while int(high) > info.max:
        high = np.nextafter(high, np_float(0))
    return float(info.min), float(high)  # powers of two (or 0): the minimum is exact


_BOUNDS = {
    (d, f): _float_bounds(d, f)
    for d in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    for f in (torch.float32, torch.float64)
}


def cast_result(
    result: torch.Tensor,
    dtype: torch.dtype,
    *,
    within: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``result`` (computed in a floating dtype) back in ``dtype``; integers rounded and clamped.

    The clamp bounds are the integer range rounded inwards to values the floating dtype holds,
    so a result near an integer dtype's maximum never wraps round to its minimum. ``within``
    (from :func:`int64_range`) further clamps an int64 result to the range of the values it
    was computed from: float64 rounds int64 values beyond 2**53, and a convex combination
    must stay within its inputs.
    """
    if result.dtype == dtype:
        return result
    if dtype.is_floating_point:
        return result.to(dtype)
    if dtype == torch.bool:
        return result.round() != 0
    if result.dtype not in (torch.float32, torch.float64):
        result = result.float()
    key = (dtype, result.dtype)
    low, high = _BOUNDS[key] if key in _BOUNDS else _float_bounds(dtype, result.dtype)
    out = result.round().clamp_(low, high).to(dtype)
    return out if within is None else torch.clamp(out, *within)


def int64_range(
    x: torch.Tensor, *, with_zero: bool = False
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(min, max)`` of a non-empty int64 ``x`` as 0-d tensors on its device (widened to hold 0
    when ``with_zero``: zero padding), for :func:`cast_result`'s ``within``; ``None`` for any
    other dtype (exact in float64 or float32) or an empty ``x``. No value is read on the host."""
    if x.dtype != torch.int64 or x.numel() == 0:
        return None
    low, high = torch.aminmax(x)
    if with_zero:
        low, high = low.clamp(max=0), high.clamp(min=0)
    return low, high


def sym_floor(value: float) -> int:
    """``math.floor(value)`` for a non-negative Python number, without specialising under compile.

    Eagerly this is ``math.floor``. Under ``torch.compile`` a Python float argument is symbolic,
    and ``int()``/``math.floor`` of it makes dynamo recompile for every new value; the same
    integer found by comparisons (an exponential then a binary search) leaves guards of the form
    ``v >= k``/``v < k`` only, which every value with the same floor passes. Shapes derived from
    a scale or a keep fraction therefore recompile only when the shape itself changes.
    """
    if not torch.compiler.is_compiling():
        return math.floor(value)
    low, high = 0, 1
    while value >= high:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        if value >= mid:
            low = mid
        else:
            high = mid
    return low


def scalar_tensor(
    value: float | torch.Tensor, *, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A Python number or a 0-d tensor as a 0-d tensor of ``dtype`` on ``device``.

    Built as ``zeros + value`` on purpose: under ``torch.compile`` a symbolic Python float
    becomes a graph input this way, where ``torch.tensor(value)``/``torch.full`` would
    specialise on it (a recompile per value).
    """
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype, non_blocking=True)
    return torch.zeros((), dtype=dtype, device=device) + value
