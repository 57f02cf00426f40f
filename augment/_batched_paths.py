"""The two ways of running the batched chains (:mod:`augment.batched`) and their draws.

* All families on every sample (:func:`augment.batched_ops.apply_plan`, float32 levels): for
  accelerators and ``torch.compile`` (no host reads, fixed shapes).
* Grouped (:func:`augment.batched_ops.apply_grouped`, uint8 levels): eager CPU, where the op
  indices are host values; each operation runs on the samples that chose it.

The draws are made once for the whole batch, before either path runs, so both give the same
values (tested), whatever the groups of samples.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from augment._batched_grouped import NOT_LUT, Workspace, apply_layers
from augment.batched_ops import (
    apply_plan,
    from_levels,
    from_levels8,
    plan_ops,
    to_levels,
    to_levels8,
)

CPU_CHUNK = 2**18  # values per group of samples, all-families path on CPU (1 MiB of float32)
GROUPED_CHUNK = 2**23  # values per group on the grouped path, AugMix's chains counted
MIX_CHUNK = 2**17  # values per slice of samples mixed at a time (float32 in the L2 cache)
GROUPED = True  # eager CPU batches run each family on the samples that chose it (see _grouped)
_GAMMA_TRIES = 8  # Marsaglia-Tsang candidates per draw; all rejected: < 1e-10 for alpha >= 1


def _grouped(x: Tensor) -> bool:
    """Whether ``x`` takes the grouped path: eager CPU (the op indices are host values there)."""
    return GROUPED and x.device.type == "cpu" and not torch.compiler.is_compiling()


def _layer(plan: dict[str, Tensor], *index: int | slice) -> dict[str, Tensor]:
    return {key: t[index] for key, t in plan.items()}


def _chunks(v: Tensor, chunk: int | None = None) -> list[slice]:
    """Slices of the batch processed together: on CPU, groups of samples that stay in the
    cache through a whole chain (about ``chunk`` values, default :data:`CPU_CHUNK`);
    elsewhere, and under ``torch.compile``, the whole batch."""
    n = v.shape[0]
    if v.device.type != "cpu" or torch.compiler.is_compiling():
        return [slice(0, n)]
    size = max(1, (CPU_CHUNK if chunk is None else chunk) // max(1, v[0].numel()))
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _log_gamma(alpha: float, shape: tuple[int, ...], g: torch.Generator | None, dev) -> Tensor:
    """Logarithms of Gamma(alpha, 1) draws (Marsaglia-Tsang, boosted below alpha = 1).

    A fixed number of candidates per draw keeps the shapes static; the log form keeps tiny
    ``alpha`` exact (a draw that underflows to 0 is still ordered against the others).
    """
    a = alpha if alpha >= 1.0 else alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    z = torch.randn((*shape, _GAMMA_TRIES), generator=g, device=dev)
    u = torch.rand((*shape, _GAMMA_TRIES), generator=g, device=dev)
    v = (1.0 + c * z) ** 3
    log_v = v.clamp(min=1e-30).log()
    ok = (v > 0) & (u.log() < 0.5 * z * z + d - d * v + d * log_v)
    first = ok.to(torch.uint8).argmax(-1, keepdim=True)
    # no accepted candidate (vanishingly rare): v = 1, the mode
    out = torch.where(ok.any(-1), log_v.gather(-1, first).squeeze(-1), 0.0) + math.log(d)
    if alpha < 1.0:
        boost = torch.rand(shape, generator=g, device=dev).clamp(min=1e-38).log() / alpha
        out = out + boost
    return out


def _signs(shape: tuple[int, ...], g: torch.Generator | None, dev) -> Tensor:
    return torch.where(torch.rand(shape, generator=g, device=dev) < 0.5, -1.0, 1.0)


def augmix_draws(
    n: int,
    n_ops: int,
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    r"""The random draws of :func:`batch_augment_and_mix` for ``n`` samples, in its order.

    Returns ``(weights, m, ops, levels, signs)``: the Dirichlet chain weights ``(n, width)``,
    the Beta skip weights ``(n,)``, and per sample, chain and layer (``(n, width, layers)``,
    ``layers = depth``, or 3 for ``depth = -1``) the operation's index in the set (-1: past
    the chain's depth, nothing), its level and its direction (:math:`\pm 1`).
    """
    log_g = _log_gamma(alpha, (n, width + 2), generator, device)  # independent Gamma(alpha)
    weights = log_g[:, :width].softmax(-1)  # Dirichlet(alpha)
    m = torch.sigmoid(log_g[:, width] - log_g[:, width + 1])  # Beta(alpha, alpha)
    layers = depth if depth > 0 else 3
    ops = torch.randint(0, n_ops, (n, width, layers), generator=generator, device=device)
    if depth < 0:  # a uniform depth in {1, 2, 3} per chain; deeper layers do nothing
        chain_depth = torch.randint(1, 4, (n, width, 1), generator=generator, device=device)
        ops = torch.where(torch.arange(layers, device=device) < chain_depth, ops, -1)
    low = min(0.1, severity)
    u = torch.rand((n, width, layers), generator=generator, device=device)
    levels = low + (severity - low) * u
    signs = _signs((n, width, layers), generator, device)
    return weights, m, ops, levels, signs


def randaugment_draws(
    n: int,
    n_ops: int,
    depth: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """The random draws of :func:`batch_randaugment`: ``(ops, signs)``, each ``(n, depth)``."""
    ops = torch.randint(0, n_ops, (n, depth), generator=generator, device=device)
    return ops, _signs((n, depth), generator, device)


def _augmix_levels(
    v: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    g: torch.Generator | None,
) -> Tensor:
    """AugMix of the float32 grey levels ``v`` (see :func:`batch_augment_and_mix`)."""
    n = v.shape[0]
    weights, m, ops, levels, signs = augmix_draws(
        n, len(kinds), severity, depth, width, alpha, g, v.device
    )
    layers = ops.shape[-1]
    mix = (m.view(n, 1) * weights).view(n, width, 1, 1, 1)
    plan = plan_ops(ops, levels, signs, kinds, v.shape[2], v.shape[3])  # every layer at once
    parts = []
    for s in _chunks(v):  # the draws above do not depend on the chunking
        acc = v[s] * (1.0 - m[s]).view(-1, 1, 1, 1)
        for i in range(width):
            chain = v[s]
            for k in range(layers):
                chain = apply_plan(chain, _layer(plan, s, i, k), kinds)
            acc.addcmul_(chain, mix[s, i])
        parts.append(acc)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _augmix_grouped(
    x: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    g: torch.Generator | None,
    workspace: Workspace | None,
) -> Tensor:
    """:func:`_augmix_levels` operation by operation on uint8 (eager CPU), group of samples by
    group: the same draws and values, returned in ``x``'s dtype."""
    n = x.shape[0]
    weights, m, ops, levels, signs = augmix_draws(
        n, len(kinds), severity, depth, width, alpha, g, x.device
    )
    mix = (m.view(n, 1) * weights).view(n, width, 1, 1, 1)
    keep = (1.0 - m).view(n, 1, 1, 1)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    # every layer of every chain planned at once, layer first: (layers, width, n, ...)
    op_t, lv_t, sg_t = (t.permute(2, 1, 0).contiguous() for t in (ops, levels, signs))
    plan = plan_ops(op_t, lv_t, sg_t, kinds, x.shape[2], x.shape[3], only=NOT_LUT)
    for s in _chunks(x, max(1, GROUPED_CHUNK // width)):  # width chains a sample
        u = _levels8(x[s])
        k = u.shape[0]
        # every chain of the group at once: chain j of sample i at row j k + i
        draws = (
            op_t[:, :, s].flatten(1, 2),
            lv_t[:, :, s].flatten(1, 2),
            sg_t[:, :, s].flatten(1, 2),
        )
        p = {key: t[:, :, s].flatten(1, 2) for key, t in plan.items()}
        chains = apply_layers(u, draws, p, kinds, copies=width, workspace=workspace)
        _mix(out[s], u, chains.view(width, k, *u.shape[1:]), keep[s], mix[s])
    return out


def _levels8(x: Tensor) -> Tensor:
    """:func:`to_levels8` without its copy of uint8 input (the grouped path only reads it)."""
    return x.contiguous() if x.dtype == torch.uint8 else to_levels8(x)


def _mix(out: Tensor, u: Tensor, chains: Tensor, keep: Tensor, mix: Tensor) -> Tensor:
    """``out`` (written in place) = ``keep u + sum_i mix[:, i] chains[i]`` in float32, as
    :func:`_augmix_levels` adds them, converted as :func:`from_levels`; a few samples at a
    time, so the float32 temporaries stay in the cache (fresh large ones cost page faults)."""
    for s in _chunks(u, MIX_CHUNK):
        acc = u[s].to(torch.float32).mul_(keep[s])
        for i in range(chains.shape[0]):
            acc.addcmul_(chains[i, s].to(torch.float32), mix[s, i])
        # uint8: rounded half up (the conversion truncates; the weights sum to 1, so the mix of
        # levels 0..255 stays in [0, 255] up to float rounding); float: divided by 255
        if out.dtype == torch.uint8:  # through int16: see to_uint8
            out[s].copy_(acc.add_(0.5).to(torch.int16))
        else:
            out[s] = acc.div_(255.0)
    return out


@contextlib.contextmanager
def _held(workspace: Workspace | None) -> Iterator[Workspace | None]:
    if workspace is None:
        yield None
    else:
        with workspace.hold() as held:
            yield held


def augmix_run(
    x: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    g: torch.Generator | None,
    workspace: Workspace | None = None,
) -> Tensor:
    """AugMix of the checked, non-empty batch ``x`` on the path that suits it (the grouped
    path keeps its buffers in ``workspace``, if given and free)."""
    if _grouped(x):
        with _held(workspace) as ws:
            return _augmix_grouped(x, kinds, severity, depth, width, alpha, g, ws)
    return from_levels(_augmix_levels(to_levels(x), kinds, severity, depth, width, alpha, g), x)


def randaugment_run(
    x: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    g: torch.Generator | None,
    workspace: Workspace | None = None,
) -> Tensor:
    """RandAugment of the checked, non-empty batch ``x`` (``depth >= 1``) on its path (the
    grouped path keeps its buffers in ``workspace``, if given and free)."""
    n, dev = x.shape[0], x.device
    ops, signs = randaugment_draws(n, len(kinds), depth, g, dev)
    level = torch.full((n, depth), float(severity), dtype=torch.float64, device=dev)
    if _grouped(x):
        # every layer planned at once, layer first: (depth, n, ...)
        op_t, lv_t, sg_t = (t.t().contiguous() for t in (ops, level, signs))
        plan = plan_ops(op_t, lv_t, sg_t, kinds, x.shape[2], x.shape[3], only=NOT_LUT)
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        with _held(workspace) as ws:
            for s in _chunks(x, GROUPED_CHUNK):
                draws = (op_t[:, s], lv_t[:, s], sg_t[:, s])
                p = {key: t[:, s] for key, t in plan.items()}
                u = apply_layers(_levels8(x[s]), draws, p, kinds, workspace=ws)
                out[s] = from_levels8(u, x)  # a copy: u may be in the workspace
        return out
    plan = plan_ops(ops, level, signs, kinds, x.shape[2], x.shape[3])
    v = to_levels(x)
    parts = []
    for s in _chunks(v):
        part = v[s]
        for k in range(depth):
            part = apply_plan(part, _layer(plan, s, k), kinds)
        parts.append(part)
    return from_levels(parts[0] if len(parts) == 1 else torch.cat(parts), x)
