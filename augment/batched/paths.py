"""The two ways of running the batched chains (:mod:`augment.batched`) and their draws.

* Slots (:func:`augment.batched.slots.run_slots`, uint8 levels): for accelerators and
  ``torch.compile``; each operation runs on the rows of its slots, group sizes known on the
  host (no host reads, fixed shapes).
* Grouped (:func:`augment.batched.ops.apply_grouped`, uint8 levels): eager CPU, where the op
  indices are host values; each operation runs on the samples that chose it.

The draws (balanced across the batch: :mod:`augment.batched.slots`) are made once for the
whole batch, before either path runs, so both give the same values (tested), whatever the
groups of samples.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from augment.batched.grouped import NOT_LUT, Workspace, apply_layers
from augment.batched.ops import from_levels8, to_levels8
from augment.batched.plan import plan_ops
from augment.batched.slots import Slots, block_order, draw_slots, row_draws, run_slots

GROUPED_CHUNK = 2**23  # values per group on the grouped path, AugMix's chains counted
MIX_CHUNK = 2**17  # values per slice of samples mixed at a time (float32 in the L2 cache)
GROUPED = True  # eager CPU batches run each family on the samples that chose it (see _grouped)
_GAMMA_TRIES = 8  # Marsaglia-Tsang candidates per draw; all rejected: < 1e-10 for alpha >= 1


def _grouped(x: Tensor) -> bool:
    """Whether ``x`` takes the grouped path: eager CPU (the op indices are host values there)."""
    return GROUPED and x.device.type == "cpu" and not torch.compiler.is_compiling()


def _chunks(v: Tensor, chunk: int) -> list[slice]:
    """Slices of the batch processed together: on eager CPU, groups of samples that stay in
    the cache (about ``chunk`` values); elsewhere the whole batch."""
    n = v.shape[0]
    if v.device.type != "cpu" or torch.compiler.is_compiling():
        return [slice(0, n)]
    size = max(1, chunk // max(1, v[0].numel()))
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


def _signs(m: int, g: torch.Generator | None, dev: torch.device) -> Tensor:
    """``m`` fair directions, True for +1."""
    return torch.empty(m, dtype=torch.bool, device=dev).bernoulli_(0.5, generator=g)


def _augmix_slots(
    n: int,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    generator: torch.Generator | None,
    device: torch.device | str,
) -> tuple[Tensor, Tensor, Slots]:
    """The draws of :func:`batch_augment_and_mix`: the Dirichlet chain weights ``(n, width)``,
    the Beta skip weights ``(n,)`` and the slots of the ``width n`` chains (row ``j n + i``:
    chain ``j`` of sample ``i``; see :mod:`augment.batched.slots`)."""
    dev = torch.device(device)
    log_g = _log_gamma(alpha, (n, width + 2), generator, dev)  # independent Gamma(alpha)
    weights = log_g[:, :width].softmax(-1)  # Dirichlet(alpha)
    m = torch.sigmoid(log_g[:, width] - log_g[:, width + 1])  # Beta(alpha, alpha)
    layers = depth if depth > 0 else 3
    per_op, held, spares = draw_slots(width * n, len(kinds), layers, depth < 0, generator, dev)
    count = len(kinds) * sum(per_op)
    low = min(0.1, severity)
    u = torch.rand(count, generator=generator, device=dev, dtype=torch.float64)
    level = u.mul_(severity - low).add_(low)
    sign = _signs(count, generator, dev)
    order = block_order(kinds)
    return weights, m, Slots(width * n, per_op, order, held, spares, level, sign)


def augmix_draws(
    n: int,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    r"""The random draws of :func:`batch_augment_and_mix` for ``n`` samples, per sample, with
    the operations ``kinds`` (as :func:`augment.batched.transforms._kinds` names a set).

    Returns ``(weights, m, ops, levels, signs)``: the Dirichlet chain weights ``(n, width)``,
    the Beta skip weights ``(n,)``, and per sample, chain and layer (``(n, width, layers)``,
    ``layers = depth``, or 3 for ``depth = -1``) the operation's index in the set (-1: past
    the chain's depth, nothing), its level and its direction (:math:`\pm 1`). The operations
    and depths are drawn balanced across the batch (:mod:`augment.batched.slots`).
    """
    weights, m, slots = _augmix_slots(n, kinds, severity, depth, width, alpha, generator, device)
    ops, levels, signs = (t.view(-1, width, n).permute(2, 1, 0) for t in row_draws(slots))
    return weights, m, ops, levels, signs


def randaugment_draws(
    n: int,
    kinds: tuple[str, ...],
    depth: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """The random draws of :func:`batch_randaugment`: ``(ops, signs)``, each ``(n, depth)``
    (the operations drawn balanced across the batch: :mod:`augment.batched.slots`)."""
    slots = _randaugment_slots(n, tuple(kinds), depth, 0.0, generator, torch.device(device))
    op, _, sign = row_draws(slots)
    return op.t(), sign.t()


def _randaugment_slots(
    n: int,
    kinds: tuple[str, ...],
    depth: int,
    severity: float,
    g: torch.Generator | None,
    dev: torch.device,
) -> Slots:
    """The slots of :func:`batch_randaugment`: every slot at level ``severity``."""
    per_op, held, spares = draw_slots(n, len(kinds), depth, False, g, dev)
    sign = _signs(len(kinds) * sum(per_op), g, dev)
    return Slots(n, per_op, block_order(kinds), held, spares, float(severity), sign)


def _augmix_grouped(
    x: Tensor,
    kinds: tuple[str, ...],
    width: int,
    draws: tuple[Tensor, Tensor, Slots],
    workspace: Workspace | None,
) -> Tensor:
    """AugMix operation by operation on uint8 (eager CPU), group of samples by group, from the
    draws of :func:`_augmix_slots`, returned in ``x``'s dtype."""
    n = x.shape[0]
    weights, m, slots = draws
    mix = (m.view(n, 1) * weights).view(n, width, 1, 1, 1)
    keep = (1.0 - m).view(n, 1, 1, 1)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    # every layer of every chain, layer first: (layers, width, n)
    op_t, lv_t, sg_t = (t.view(-1, width, n) for t in row_draws(slots))
    plan = plan_ops(op_t, lv_t, sg_t, kinds, x.shape[2], x.shape[3], only=NOT_LUT)
    for s in _chunks(x, max(1, GROUPED_CHUNK // width)):  # width chains a sample
        u = _levels8(x[s])
        k = u.shape[0]
        # every chain of the group at once: chain j of sample i at row j k + i
        draws_s = (
            op_t[:, :, s].flatten(1, 2),
            lv_t[:, :, s].flatten(1, 2),
            sg_t[:, :, s].flatten(1, 2),
        )
        p = {key: t[:, :, s].flatten(1, 2) for key, t in plan.items()}
        chains = apply_layers(u, draws_s, p, kinds, copies=width, workspace=workspace)
        _mix(out[s], u, chains.view(width, k, *u.shape[1:]), keep[s], mix[s])
    return _like(out, x)


def _augmix_slotted(
    x: Tensor, kinds: tuple[str, ...], width: int, draws: tuple[Tensor, Tensor, Slots]
) -> Tensor:
    """AugMix on the device path: each chain's operations on their slots
    (:func:`augment.batched.slots.run_slots`), then the mix; fixed shapes, no host reads."""
    n = x.shape[0]
    weights, m, slots = draws
    mix = (m.view(n, 1) * weights).view(n, width, 1, 1, 1)
    keep = (1.0 - m).view(n, 1, 1, 1)
    u = _levels8(x)
    chains = run_slots(u, width, slots, kinds)[: width * n]
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    return _like(_mix(out, u, chains.view(width, n, *u.shape[1:]), keep, mix, fused=True), x)


def _like(out: Tensor, x: Tensor) -> Tensor:
    """``out`` (contiguous) in ``x``'s memory format: channels_last stays channels_last."""
    if (
        x.dim() == 4
        and not x.is_contiguous()
        and x.is_contiguous(memory_format=torch.channels_last)
    ):
        return out.contiguous(memory_format=torch.channels_last)
    return out


def _levels8(x: Tensor) -> Tensor:
    """:func:`to_levels8` without its copy of uint8 input (the paths only read it)."""
    return x.contiguous() if x.dtype == torch.uint8 else to_levels8(x)


def _mix(
    out: Tensor, u: Tensor, chains: Tensor, keep: Tensor, mix: Tensor, fused: bool = False
) -> Tensor:
    """``out`` (written in place) = ``keep u + sum_i mix[:, i] chains[i]`` in float32, rounded
    half up for uint8 (divided by 255 for floats); on CPU a few samples at a time, so the
    float32 temporaries stay in the cache (fresh large ones cost page faults). ``fused``: the
    uint8 levels enter the float32 arithmetic directly (the same values; on CPU slower, on a
    GPU no float32 copy of every chain)."""
    for s in _chunks(u, MIX_CHUNK):
        if fused:
            acc = torch.mul(u[s], keep[s])
        else:
            acc = u[s].to(torch.float32).mul_(keep[s])
        for i in range(chains.shape[0]):
            chain = chains[i, s]
            acc.addcmul_(chain if fused else chain.to(torch.float32), mix[s, i])
        # uint8: rounded half up (the conversion truncates; the weights sum to 1, so the mix of
        # levels 0..255 stays in [0, 255] up to float rounding); float: divided by 255
        if out.dtype == torch.uint8:  # on CPU through int16: see to_uint8
            out[s].copy_(acc.add_(0.5) if fused else acc.add_(0.5).to(torch.int16))
        else:
            out[s] = acc.clamp_(max=255.0).div_(255.0)  # the weights sum to 1, up to rounding
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
    n = x.shape[0]
    draws = _augmix_slots(n, kinds, severity, depth, width, alpha, g, x.device)
    if _grouped(x):
        with _held(workspace) as ws:
            return _augmix_grouped(x, kinds, width, draws, ws)
    return _augmix_slotted(x, kinds, width, draws)


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
    slots = _randaugment_slots(x.shape[0], kinds, depth, severity, g, x.device)
    if not _grouped(x):
        out = run_slots(_levels8(x), 1, slots, kinds)[: x.shape[0]]
        return _like(from_levels8(out, x), x)
    # every layer planned at once, layer first: (depth, n, ...)
    op_t, lv_t, sg_t = row_draws(slots)
    plan = plan_ops(op_t, lv_t, sg_t, kinds, x.shape[2], x.shape[3], only=NOT_LUT)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    with _held(workspace) as ws:
        for s in _chunks(x, GROUPED_CHUNK):
            draws = (op_t[:, s], lv_t[:, s], sg_t[:, s])
            p = {key: t[:, s] for key, t in plan.items()}
            u = apply_layers(_levels8(x[s]), draws, p, kinds, workspace=ws)
            out[s] = from_levels8(u, x)  # a copy: u may be in the workspace
    return _like(out, x)
