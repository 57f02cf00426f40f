"""Gradient clipping: by global norm, by value, and unit-wise adaptive (AGC, Brock et al. 2021).

Paper (AGC): A. Brock, S. De, S. L. Smith, K. Simonyan, "High-Performance Large-Scale Image
Recognition Without Normalization", ICML 2021, https://arxiv.org/abs/2102.06171.
"""

# Long file: one algorithm with its three schedules (CPU, grouped for eager accelerators, batched
# under compile) kept side by side, as they must give the same result.

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from functional._args import check_one_of, check_positive
from functional._numeric import (
    accumulation_dtype,
    foreach_total_norm,
    group_by_device_and_dtype,
    is_sharded,
    local_tensors,
    sum_over_shards,
)
from functional._values import check_step_scalar

__all__ = ["apply_gradient_clipping"]

CLIPPING_TYPES = ("norm", "value", "adaptive")

# Floor on a unit's weight norm, so zero-initialised weights (biases, the last BatchNorm gain of
# a residual block) may still receive gradient: AGC's epsilon, 1e-3 in the paper.
AGC_EPS = 1e-3

# The most memory a round of the grouped AGC schedule (accelerators, eager) copies its units'
# gradients and weights into, in the accumulation dtype.
_SCRATCH_BYTES = 32 * 2**20


def _as_parameter_list(parameters: object) -> list[torch.Tensor]:
    if isinstance(parameters, nn.Module):
        return list(parameters.parameters())
    if isinstance(parameters, torch.Tensor):
        return [parameters]
    if isinstance(parameters, (str, bytes)) or not isinstance(parameters, Iterable):
        raise TypeError(
            "parameters must be a tensor, an iterable of tensors or an nn.Module, "
            f"got {type(parameters).__name__}"
        )
    params = list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameters[{i}] must be a torch.Tensor, got {type(p).__name__}")
    return params


def _row_dims(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(1, t.ndim))


def _check_threshold(value: object) -> float | torch.Tensor:
    """A finite number > 0, or such a 0-d floating tensor (see ``check_step_scalar``)."""
    return check_step_scalar(
        value,
        "clipping_threshold",
        "a finite number > 0",
        lambda t: (t > 0) & t.isfinite(),
        check_positive,
    )


def _clip_by_value_(params: list[torch.Tensor], threshold: float | torch.Tensor) -> None:
    """Clamp every gradient entry to [-threshold, threshold], one foreach pair per group.

    The bound is rounded to each gradient's dtype: one beyond its range (1e300 for float32,
    1e5 for float16) is infinite there, and leaves that group unchanged.
    """
    for p in params:
        if p.grad is not None and p.grad.is_sparse:
            # Sparse COO gradients (nn.Embedding(sparse=True)): a row may be stored several
            # times, summed on use, so clamp the coalesced values (torch's clip_grad_value_
            # has no sparse kernel).
            grad = p.grad.coalesce()
            grad._values().clamp_(-threshold, threshold)  # type: ignore[arg-type]
            p.grad = grad
    grads = local_tensors([p.grad for p in params if p.grad is not None and not p.grad.is_sparse])
    for (device, dtype), (gs,) in group_by_device_and_dtype(grads).items():
        if isinstance(threshold, torch.Tensor) or torch.compiler.is_compiling():
            # A tensor bound (or a float under compile, which a Scalar argument would
            # specialise): one 0-d bound per gradient, kept on the device (a bound beyond the
            # dtype's range becomes inf here: clamping to it changes nothing).
            high = (torch.ones((), device=device, dtype=dtype) * threshold).to(dtype)
            torch._foreach_clamp_min_(gs, [-high] * len(gs))
            torch._foreach_clamp_max_(gs, [high] * len(gs))
        elif threshold <= torch.finfo(dtype).max:  # a Python number: no device read
            torch._foreach_clamp_min_(gs, -threshold)
            torch._foreach_clamp_max_(gs, threshold)


def _clip_by_norm_(params: list[torch.Tensor], threshold: float | torch.Tensor) -> torch.Tensor:
    """Scale all gradients by min(1, threshold / (‖g‖ + 1e-6)); returns ‖g‖ (as
    ``torch.nn.utils.clip_grad_norm_``, whose tensor-threshold path reads it on the host)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), dtype=torch.float32)
    sparse = [g for g in grads if g.is_sparse]
    if sparse:
        grads = [g for g in grads if not g.is_sparse]
    total = _sparse_aware_norm(grads, sparse)
    denom = total + 1e-6
    if isinstance(threshold, torch.Tensor):
        threshold = threshold.to(denom.dtype)  # rounded as a Python float would be
    # min(1, threshold / denom), except that a threshold at least as large as the norm never
    # scales, even when both are inf (a threshold beyond float32 with a norm that overflowed
    # float32: inf/inf would be NaN). A NaN norm (NaN gradients) still gives NaN, as in torch.
    coef = torch.where(denom <= threshold, 1.0, threshold / denom)
    for (device, _), (gs,) in group_by_device_and_dtype(local_tensors(grads)).items():
        torch._foreach_mul_(gs, coef.to(device))
    for g in sparse:
        g.mul_(coef.to(device=g.device, dtype=g.dtype))
    return total


def _sparse_aware_norm(dense: list[torch.Tensor], sparse: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of dense and sparse COO gradients together (a sparse gradient's norm is that
    of its coalesced values: a row stored twice counts once, summed)."""
    if not sparse:
        return foreach_total_norm(dense)
    dtype = (
        torch.float64 if any(g.dtype == torch.float64 for g in dense + sparse) else torch.float32
    )
    device = (dense or sparse)[0].device
    parts = [foreach_total_norm(dense).to(device=device, dtype=dtype)] if dense else []
    parts += [
        torch.linalg.vector_norm(g.coalesce()._values(), dtype=dtype).to(device) for g in sparse
    ]
    return torch.linalg.vector_norm(torch.stack(parts))


def _coefficients(
    w_norm: torch.Tensor, g_norm: torch.Tensor, threshold: float | torch.Tensor
) -> torch.Tensor:
    """min(1, λ·max(‖W‖, 1e-3) / ‖G‖), computed in ``w_norm``'s storage.

    A unit whose gradient norm is within its bound is never scaled, also when both are 0 (a
    zero gradient with a λ that rounds to 0) or both inf (a λ beyond float32 with a gradient
    norm that overflowed float32), where the quotient would be NaN. A NaN gradient norm still
    gives NaN, as in torch.
    """
    max_norm = w_norm.clamp_min_(AGC_EPS).mul_(threshold)
    within = g_norm <= max_norm
    return max_norm.div_(g_norm).masked_fill_(within, 1.0)


def _clip_batched_(
    ps: list[torch.Tensor],
    gs: list[torch.Tensor],
    threshold: float | torch.Tensor,
    acc: torch.dtype,
) -> torch.Tensor:
    """AGC of same-device, same-dtype tensors with few kernel launches; returns ‖G‖²."""
    # Whole-tensor units (0-D and 1-D: biases, norm gains) with one foreach launch each; per-row
    # norms of the other tensors with one reduction each; the coefficients of all units at once.
    vec = [i for i, p in enumerate(ps) if p.ndim <= 1]
    mat = [i for i, p in enumerate(ps) if p.ndim > 1]
    w_norms: list[torch.Tensor] = []
    g_norms: list[torch.Tensor] = []
    if vec:
        w_norms.append(torch.stack(torch._foreach_norm([ps[i] for i in vec], 2.0, dtype=acc)))
        g_norms.append(torch.stack(torch._foreach_norm([gs[i] for i in vec], 2.0, dtype=acc)))
    for i in mat:
        w_norms.append(torch.linalg.vector_norm(ps[i], dim=_row_dims(ps[i]), dtype=acc))
        g_norms.append(torch.linalg.vector_norm(gs[i], dim=_row_dims(gs[i]), dtype=acc))
    g_norm = torch.cat(g_norms)
    coef = _coefficients(torch.cat(w_norms), g_norm, threshold)
    pieces = torch.split(coef, [len(vec)] + [ps[i].shape[0] for i in mat])
    if vec:
        # Each whole-tensor unit's coefficient spread over its entries (these tensors are small),
        # so that one multi-tensor product on CUDA's fast route (same shapes) scales them all.
        small = [gs[i] for i in vec]
        units = pieces[0].unbind()
        spread = torch.cat([c.expand(g.numel()) for c, g in zip(units, small, strict=True)])
        parts = spread.split([g.numel() for g in small])
        torch._foreach_mul_(small, [c.view(g.shape) for c, g in zip(parts, small, strict=True)])
    for c, i in zip(pieces[1:], mat, strict=True):
        gs[i].mul_(c.view(-1, *([1] * (ps[i].ndim - 1))))
    return torch.dot(g_norm, g_norm)


def _flat_rows(t: torch.Tensor) -> torch.Tensor | None:
    """A 1-D view of ``t``'s memory in which each unit (a slice along dim 0, or all of a 0-D/1-D
    tensor) is one contiguous run, in order: contiguous and channels-last tensors (a row's
    entries are permuted there, which its norm and a per-row scale ignore); None otherwise."""
    if t.is_contiguous():
        return t.view(-1)
    for fmt, order in (
        (torch.channels_last, (0, 2, 3, 1)),
        (torch.channels_last_3d, (0, 2, 3, 4, 1)),
    ):
        if t.ndim == len(order) and t.is_contiguous(memory_format=fmt):
            return t.permute(order).view(-1)
    return None


def _rounds(sizes: list[tuple[int, int]], cap: int) -> list[list[tuple[int, int, int]]]:
    """Cut units into rounds of at most ``cap`` elements: ``sizes`` holds each tensor's
    (rows, row length); a round is a list of (tensor, first row, rows). A tensor too large for
    one round is split between rows, and a single row larger than ``cap`` is a round alone."""
    rounds: list[list[tuple[int, int, int]]] = [[]]
    used = 0
    for i, (rows, length) in enumerate(sizes):
        start = 0
        while start < rows:
            fit = max(cap - used, 0) // max(length, 1)
            if fit == 0 and rounds[-1]:
                rounds.append([])
                used = 0
                continue
            take = min(rows - start, max(fit, 1))
            rounds[-1].append((i, start, take))
            used += take * length
            start += take
    return [r for r in rounds if r]


def _clip_grouped_(
    ps: list[torch.Tensor],
    gs: list[torch.Tensor],
    threshold: float | torch.Tensor,
    acc: torch.dtype,
) -> torch.Tensor:
    """AGC of same-device, same-dtype tensors in a few launches per round; returns ‖G‖².

    A round copies the gradients and weights of up to ``_SCRATCH_BYTES`` of units into one
    scratch buffer (one ``cat``), squares it and sums each unit (one segmented reduction); the
    coefficients of all units are computed at once; a round then spreads its units'
    coefficients over their entries (a row index and a gather into the scratch) and scales its
    gradients with one multi-tensor product. The unit layout travels to the device in two
    non-blocking copies. Tensors that are neither contiguous nor channels-last go the batched
    way (``_clip_batched_``).
    """
    device, dtype = gs[0].device, gs[0].dtype
    flat: list[tuple[torch.Tensor, torch.Tensor]] = []  # (weight, gradient) memory views
    keep, odd = [], []
    for i, (p, g) in enumerate(zip(ps, gs, strict=True)):
        w_flat, g_flat = _flat_rows(p), _flat_rows(g)
        if w_flat is None or g_flat is None:
            odd.append(i)
        else:
            keep.append(i)
            flat.append((w_flat, g_flat))
    totals = []
    if odd:
        totals.append(_clip_batched_([ps[i] for i in odd], [gs[i] for i in odd], threshold, acc))
    # (units, entries per unit) of each tensor: its rows, or itself as one unit
    sizes = [
        (ps[i].shape[0], math.prod(ps[i].shape[1:])) if ps[i].ndim > 1 else (1, ps[i].numel())
        for i in keep
    ]
    rounds = _rounds(sizes, max(_SCRATCH_BYTES // (2 * acc.itemsize), 1))
    if not rounds:  # no tensor with entries in a memory layout of its own
        return totals[0] if totals else torch.zeros((), dtype=acc, device=device)
    # Each round's pieces: (tensor, first entry, entries). The layout, built on the host: the
    # rounds' unit lengths (for the row index) and the offsets of their gradient units, then
    # weight units, in the scratch (for the segmented reduction).
    pieces = [
        [(i, start * sizes[i][1], rows * sizes[i][1]) for i, start, rows in r] for r in rounds
    ]
    numel = [sum(k for _, _, k in r) for r in pieces]
    lengths = [
        torch.tensor([sizes[i][1] for i, _, _ in r], dtype=torch.int32).repeat_interleave(
            torch.tensor([rows for _, _, rows in r])
        )
        for r in rounds
    ]
    offsets = []
    for units, size in zip(lengths, numel, strict=True):
        ends = units.to(torch.int64).cumsum(0)
        offsets.append(torch.cat([ends.new_zeros(1), ends, ends + size]))
    lengths_dev = torch.cat(lengths).to(device, non_blocking=True).split([len(u) for u in lengths])
    offsets_dev = torch.cat(offsets).to(device, non_blocking=True).split([len(o) for o in offsets])
    scratch = torch.empty(2 * max(numel), dtype=acc, device=device)
    sums = []
    for r, size, off in zip(pieces, numel, offsets_dev, strict=True):
        data = scratch[: 2 * size]
        torch.cat(
            [flat[i][1].narrow(0, a, k) for i, a, k in r]
            + [flat[i][0].narrow(0, a, k) for i, a, k in r],
            out=data,
        )
        sums.append(
            torch.segment_reduce(data.square_(), "sum", offsets=off, unsafe=True).view(2, -1)
        )
    sq = torch.cat(sums, dim=1)  # (gradient, weight) sums of squares of every unit
    totals.append(sq[0].sum())
    g_norm, w_norm = sq.sqrt_().unbind()
    coef = _coefficients(w_norm, g_norm, threshold).to(dtype)
    per_entry = scratch.view(dtype)  # the scratch again, for each entry's coefficient
    first = 0
    for r, size, units in zip(pieces, numel, lengths_dev, strict=True):
        index = torch.repeat_interleave(units, output_size=size)
        spread = coef[first : first + len(units)]
        torch.index_select(spread, 0, index, out=per_entry[:size])
        first += len(units)
        torch._foreach_mul_(
            [flat[i][1].narrow(0, a, k) for i, a, k in r],
            list(per_entry[:size].split([k for _, _, k in r])),
        )
    return totals[0] if len(totals) == 1 else totals[0] + totals[1]


def _clip_cache_friendly_(
    ps: list[torch.Tensor],
    gs: list[torch.Tensor],
    threshold: float | torch.Tensor,
    acc: torch.dtype,
) -> torch.Tensor:
    """The CPU schedule: each large gradient is multiplied right after its norm is taken, while
    it is still in cache (all norms first, then all products, reads every gradient twice from
    memory: measured ~25% slower on resnet50). The small 0-D/1-D tensors go batched."""
    vec = [i for i, p in enumerate(ps) if p.ndim <= 1]
    total = torch.zeros((), dtype=acc, device=ps[0].device)
    if vec:
        total = _clip_batched_([ps[i] for i in vec], [gs[i] for i in vec], threshold, acc)
    # dtype= only where it changes something: the plain reduction is a little faster.
    cast = None if ps[0].dtype == acc else acc
    g_norms = []
    for p, g in zip(ps, gs, strict=True):
        if p.ndim > 1:
            w_norm = torch.linalg.vector_norm(p, dim=_row_dims(p), keepdim=True, dtype=cast)
            g_norm = torch.linalg.vector_norm(g, dim=_row_dims(g), keepdim=True, dtype=cast)
            g_norms.append(g_norm.view(-1))
            g.mul_(_coefficients(w_norm, g_norm, threshold))
    if g_norms:
        g_norm = torch.cat(g_norms)
        total = total + torch.dot(g_norm, g_norm)
    return total


def _clip_sharded_(
    ps: list[torch.Tensor], gs: list[torch.Tensor], threshold: float | torch.Tensor
) -> torch.Tensor:
    """AGC of DTensor gradients (FSDP2) on their local shards; returns ‖G‖² over all shards.

    A unit's norm is a sum over the shards that hold a piece of it: for a whole-tensor unit
    (0-D/1-D), every shard; for a row, the shards of a split along a later dimension (FSDP2
    shards dim 0, so its rows are whole on one rank and need no communication). The partial
    sums of the weight and gradient norms of all units that split alike travel in one
    all-reduce per mesh dimension.
    """
    total = foreach_total_norm(gs)  # before any gradient is scaled
    pending: dict[tuple[object, ...], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
    for p, g in zip(ps, gs, strict=True):
        local_p, local_g = local_tensors([p, g])
        acc = accumulation_dtype(local_g.dtype)
        dims = None if p.ndim <= 1 else _row_dims(p)
        w_sq = torch.linalg.vector_norm(local_p, dim=dims, dtype=acc).square()
        g_sq = torch.linalg.vector_norm(local_g, dim=dims, dtype=acc).square()
        key = (p.device_mesh, p.placements, p.ndim <= 1)  # type: ignore[attr-defined]
        pending.setdefault(key, []).append((p, local_g, torch.stack([w_sq, g_sq]).view(2, -1)))
    for (_, _, whole), units in pending.items():
        sums = torch.cat([both for _, _, both in units], dim=1)
        sum_over_shards(sums, units[0][0], None if whole else range(1, units[0][0].ndim))
        norms = sums.sqrt_().split([both.shape[1] for _, _, both in units], dim=1)
        for (p, local_g, _), (w_norm, g_norm) in zip(units, norms, strict=True):
            coef = _coefficients(w_norm, g_norm, threshold)
            local_g.mul_(coef.view(()) if whole else coef.view(-1, *([1] * (p.ndim - 1))))
    return total.square()


# Which schedule runs where; tests switch the CPU entry to run the batched one on CPU too.
_CACHE_FRIENDLY_DEVICES = {"cpu"}


def _adaptive_clip_(
    params: list[torch.Tensor], grads: list[torch.Tensor], threshold: float | torch.Tensor
) -> torch.Tensor:
    """Unit-wise AGC of ``grads`` in place; returns the global L2 norm of the unclipped grads."""
    out_dtype = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
    total_device = grads[0].device if grads else torch.device("cpu")
    total_sq = []
    sharded = [i for i, g in enumerate(grads) if is_sharded(g)]
    if sharded:
        total_sq.append(
            _clip_sharded_([params[i] for i in sharded], [grads[i] for i in sharded], threshold).to(
                device=total_device, dtype=out_dtype
            )
        )
        plain = sorted(set(range(len(grads))) - set(sharded))
        params, grads = [params[i] for i in plain], [grads[i] for i in plain]
    for (device, dtype), (ps, gs) in group_by_device_and_dtype(params, grads).items():
        acc = accumulation_dtype(dtype)
        if device.type in _CACHE_FRIENDLY_DEVICES:
            sq = _clip_cache_friendly_(ps, gs, threshold, acc)
        elif torch.compiler.is_compiling():  # inductor fuses the per-tensor reductions
            sq = _clip_batched_(ps, gs, threshold, acc)
        else:
            sq = _clip_grouped_(ps, gs, threshold, acc)
        total_sq.append(sq.to(device=total_device, dtype=out_dtype))
    if not total_sq:
        return torch.zeros((), dtype=torch.float32)
    return torch.stack(total_sq).sum().sqrt()


def apply_gradient_clipping(
    parameters: torch.Tensor | Iterable[torch.Tensor] | nn.Module,
    clipping_type: str,
    clipping_threshold: float | torch.Tensor,
) -> torch.Tensor | None:
    r"""Clip the gradients of ``parameters`` in place, by global norm, by value or unit-wise.

    Parameters whose ``.grad`` is None are skipped. Call it after ``backward()`` and before
    ``optimizer.step()`` (after ``scaler.unscale_(optimizer)`` under AMP). A per-step op, not
    a model transform despite its ``apply_`` name: it changes gradients, not the model, and
    takes no ``optimizers=``.

    - ``'norm'``: if the L2 norm of all gradients together exceeds ``clipping_threshold``,
      scale them all by ``clipping_threshold / (norm + 1e-6)`` (the rule of
      ``torch.nn.utils.clip_grad_norm_``; the norm accumulates in float32, float64 for
      float64 gradients).
    - ``'value'``: clamp every gradient entry to ``[-clipping_threshold, clipping_threshold]``
      (the rule of ``torch.nn.utils.clip_grad_value_``).

    - ``'adaptive'``: adaptive gradient clipping (AGC), unit by unit. For a unit with weights
      :math:`W_i` and gradient :math:`G_i`, with :math:`\lambda` = ``clipping_threshold``:

      .. math::
          G_i \leftarrow G_i \cdot \min\Bigl(1,\ \frac{\lambda\,\max(\lVert W_i\rVert_2,
          10^{-3})}{\lVert G_i\rVert_2}\Bigr)

      A unit is a slice along dim 0 of a tensor with two or more dimensions (an output unit of
      ``Linear``, an output channel of ``Conv*d``, a row of ``Embedding``; for
      ``ConvTranspose*d`` dim 0 is the input channel, as in the paper's reference code and
      timm), and the whole tensor for 0-D and 1-D tensors (biases, normalisation gains). The
      :math:`10^{-3}` floor lets zero-initialised weights learn. The paper does not clip the
      final classifier layer: pass the parameters you want clipped. Norms accumulate in float32
      (float64 for float64 tensors). On accelerators (eager) the units go in rounds of up to
      32 MiB of gradients and weights (in the accumulation dtype; one ResNet-50 takes 7
      rounds): a round copies them into one scratch buffer, squares it and sums each unit in
      one segmented reduction, then scales its gradients by a per-entry coefficient (a row
      index of 4 bytes per entry, one gather, one multi-tensor product), about six launches
      a round instead of three per tensor, for about five times the memory traffic of reading
      the tensors (most of it on the scratch); the scratch and the index are freed on return.
      Under ``torch.compile`` each tensor gets its own row-norm reductions (inductor fuses
      them). On CPU each large gradient is rescaled right after its norm, while in cache.

    Sparse gradients (``nn.Embedding(sparse=True)``) are clipped as torch clips them: by
    ``'norm'``, counted in the global norm through their coalesced values and scaled with the
    rest; by ``'value'``, coalesced (a row stored twice is one summed row) and clamped, so
    ``.grad`` becomes the coalesced tensor (torch's ``clip_grad_value_`` has no sparse kernel).
    ``'adaptive'`` refuses them with a ``TypeError`` (a unit's norm needs its whole row).

    Args:
        parameters: a tensor, an iterable of tensors, or an ``nn.Module`` (its parameters).
        clipping_type: ``'norm'``, ``'value'`` or ``'adaptive'``.
        clipping_threshold: the maximum norm (``'norm'``), maximum absolute value
            (``'value'``) or maximum gradient-to-weight norm ratio :math:`\lambda`
            (``'adaptive'``); a finite number > 0, or a 0-d tensor (range-checked on the CPU
            eagerly, by a device-side assert on accelerators).

    Edge values: the threshold is compared in the dtype the bound applies in (each gradient's
    dtype for ``'value'``, the float32/float64 norms otherwise), so one beyond that range
    (1e300 in float32, 1e5 in float16) clips nothing, without error, and a gradient or unit
    whose norm is within the bound is never scaled, also when both are inf (a norm that
    overflowed float32) or both 0 (a zero gradient and a threshold that rounds to 0): no NaN
    from inf/inf or 0/0. Finite gradients whose float32 norm overflows, with a finite
    threshold, are scaled by threshold/inf = 0, as in torch. With no gradient at all, every
    mode is a no-op.

    Sharded parameters (FSDP2's ``fully_shard``, ``DTensor``): every mode gives what one
    process gives on the whole gradient. The norms are global (shard norms summed over the
    ranks, one all-reduce per mesh and placement; the returned norm is a plain tensor, the same
    on every rank) and each rank scales or clamps its own shards in place. For ``'adaptive'`` a
    row split by dim-0 sharding is whole on one rank and needs no communication; the norms of
    0-D/1-D units (and of rows split along a later dimension) are summed over the ranks, in one
    all-reduce per mesh dimension for all of them.

    Device and compile behaviour: no mode reads a tensor value on the host, and each traces
    under ``torch.compile(fullgraph=True)``; a threshold that changes between calls does not
    recompile when given as a 0-d tensor, and recompiles once (dynamo's automatic dynamic
    floats), then never again, when given as a Python float.

    Returns:
        For ``'norm'`` and ``'adaptive'``, the L2 norm of all the gradients together before
        clipping, a 0-d tensor on the first parameter's device (0 when no parameter has a
        gradient); non-finite gradients give a non-finite norm and, as in torch, non-finite
        clipped gradients. For ``'value'``, None (element-wise clipping computes no norm).

    Example:
        >>> import torch
        >>> from functional import apply_gradient_clipping
        >>> model = torch.nn.Linear(3, 2)
        >>> model(torch.randn(4, 3)).pow(2).sum().mul(100).backward()
        >>> norm = apply_gradient_clipping(model.parameters(), "adaptive", 0.01)
        >>> bool(norm > 0)
        True
        >>> ratio = model.weight.grad.norm(dim=1) / model.weight.norm(dim=1)
        >>> bool((ratio <= 0.01 + 1e-6).all())
        True
    """
    if not isinstance(clipping_type, str):
        raise TypeError(f"clipping_type must be a str, got {type(clipping_type).__name__}")
    check_one_of(clipping_type, "clipping_type", CLIPPING_TYPES)
    threshold = _check_threshold(clipping_threshold)
    params = _as_parameter_list(parameters)
    if clipping_type == "norm":
        with torch.no_grad():
            return _clip_by_norm_(params, threshold)
    if clipping_type == "value":
        with torch.no_grad():
            _clip_by_value_(params, threshold)
        return None
    weights, grads = [], []
    for p in params:
        if p.grad is not None:
            if p.grad.is_sparse:
                raise TypeError(
                    "apply_gradient_clipping('adaptive') does not support sparse gradients (an "
                    "nn.Embedding(sparse=True), for example): a row's unit norm needs the whole "
                    "row; clip them with 'norm' or 'value', or make the embedding dense"
                )
            weights.append(p.detach())
            grads.append(p.grad)
    with torch.no_grad():
        return _adaptive_clip_(weights, grads, threshold)
