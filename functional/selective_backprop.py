"""Selective backprop: train only on the high-loss part of each batch (Jiang et al. 2019).

Paper: `Accelerating Deep Learning by Focusing on the Biggest Losers
<https://arxiv.org/abs/1910.00762>`_.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from torch.nn import functional as nnf
from torch.nn.modules.loss import _Loss

from functional._args import (
    check_generator,
    check_in_range,
    check_int,
    check_module,
    check_probability,
    check_same_batch,
    check_tensor,
)
from functional._batch import random_device
from functional._numeric import sym_floor
from functional.stochastic_depth.layers import restore_stream_positions, stream_positions

__all__ = ["select_using_loss", "should_selective_backprop"]

_INTERPOLATION = {3: "linear", 4: "bilinear", 5: "trilinear"}


def should_selective_backprop(
    current_duration: float,
    batch_idx: int,
    start: float = 0.5,
    end: float = 0.9,
    interrupt: int = 2,
) -> bool:
    r"""Whether to apply selective backprop to this batch.

    True when ``start <= current_duration < end`` and, unless ``interrupt == 0``, the batch is
    not one of every ``interrupt``-th batches (``(batch_idx + 1) % interrupt != 0``), which
    train on the full batch.

    Args:
        current_duration: fraction of training done, in ``[0, 1]``.
        batch_idx: index of the batch in the epoch (``>= 0``).
        start: fraction of training at which selection starts, in ``[0, 1]``.
        end: fraction of training at which it stops, in ``[start, 1]``.
        interrupt: every ``interrupt``-th batch trains on the full batch; 0 disables this.

    Returns:
        Whether to select.

    Example:
        >>> import functional as F
        >>> [F.should_selective_backprop(0.6, i, start=0.5, end=0.9, interrupt=2) for i in range(4)]
        [True, False, True, False]
    """
    current_duration = check_in_range(current_duration, "current_duration", 0.0, 1.0)
    batch_idx = check_int(batch_idx, "batch_idx", minimum=0)
    start = check_in_range(start, "start", 0.0, 1.0)
    end = check_in_range(end, "end", 0.0, 1.0)
    if end < start:
        raise ValueError(f"end must be >= start, got start={start}, end={end}")
    interrupt = check_int(interrupt, "interrupt", minimum=0)
    in_window = start <= current_duration < end
    return in_window and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)


def _unreduced(module: _Loss, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``module(output, y)`` with its ``reduction`` set to ``'none'`` for the call only.

    Set and restored on the module itself (a copy cannot be made under ``torch.compile``).
    """
    saved = module.reduction
    module.reduction = "none"
    try:
        return module(output, y)
    finally:
        module.reduction = saved


def _per_sample_loss(loss_fun: object) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``loss_fun`` as a function of ``(output, y)`` that returns one loss per sample.

    A loss module (``torch.nn.modules.loss._Loss``, e.g. ``nn.CrossEntropyLoss(weight=w)``) is
    used with every setting it was built with except its reduction, which is ``'none'`` for
    the scoring call (and restored right after): selection needs per-sample losses,
    and a module built with ``reduction='mean'`` (the default) is what users naturally pass.
    Any other callable (another ``nn.Module`` included: its ``forward`` is checked) is called
    as ``loss_fun(output, y, reduction='none')`` and must accept that keyword (checked here,
    before the scoring pass).
    """
    if not callable(loss_fun):
        raise TypeError(f"loss_fun must be callable, got {type(loss_fun).__name__}")
    if isinstance(loss_fun, _Loss):
        return functools.partial(_unreduced, loss_fun)
    if not torch.compiler.is_compiling():  # dynamo cannot trace inspect; eager calls check it
        _check_takes_reduction(loss_fun)
    return functools.partial(loss_fun, reduction="none")


def _check_takes_reduction(loss_fun: Callable[..., object]) -> None:
    """Refuse a ``loss_fun`` whose signature has no ``reduction`` keyword (nor ``**kwargs``)."""
    is_module = isinstance(loss_fun, torch.nn.Module)
    target = loss_fun.forward if isinstance(loss_fun, torch.nn.Module) else loss_fun
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # builtins without a signature: trust the caller
        return
    if "reduction" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    what = (
        f"a {type(loss_fun).__name__} module whose forward has no `reduction` argument"
        if is_module
        else "a callable without a `reduction` argument"
    )
    raise TypeError(  # its first sentence is Composer's, which its own tests match
        "loss_fun must take a keyword argument `reduction`. It is called as "
        f"loss_fun(output, y, reduction='none') to score each sample; got {what}. Pass a "
        "torch.nn loss module (nn.CrossEntropyLoss(...)), a function such as "
        "torch.nn.functional.cross_entropy, or a wrapper that returns one loss per sample, "
        "e.g. loss_fun=lambda output, y, reduction='none': "
        "-(y * output.log_softmax(-1)).sum(-1) for soft targets"
    )


def _log_selection_weights(n: int, keep: float, device: torch.device) -> torch.Tensor:
    """Log selection weight of the sample of loss rank ``r`` (0 = lowest): ``(1/keep - 1)·log((r + ½)/n)``.

    Jiang et al. select with probability rising as a power of the loss percentile; the exponent
    ``1/keep - 1`` makes the selection sharper as ``keep`` shrinks (uniform at ``keep = 1``).
    ``keep`` enters as a multiplier of a tensor, so a symbolic float under compile stays one.
    """
    percentile = (torch.arange(n, dtype=torch.float64, device=device) + 0.5) / n
    return percentile.log() * (1.0 / keep - 1.0)


def _choose(
    losses: torch.Tensor, keep: float, n_select: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Indices of ``n_select`` samples, without replacement, weighted by loss rank, sorted.

    Everything runs on the losses' device (the uniforms are drawn on the generator's device
    and moved there without a host read); the output size ``n_select`` is a Python int.
    """
    n = losses.shape[0]
    device = losses.device
    ranked = torch.argsort(losses.detach().float(), stable=True)  # rank r -> sample
    # Drawing one by one in proportion to the weights, without replacement, is the same as
    # taking the top-k of log-weight + Gumbel noise (Efraimidis and Spirakis 2006).
    uniform = torch.rand(
        n, dtype=torch.float64, generator=generator, device=random_device(generator)
    )
    uniform = uniform.to(device, non_blocking=True)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
    keys = _log_selection_weights(n, keep, device) + gumbel
    picked_ranks = torch.topk(keys, n_select).indices
    return ranked[picked_ranks].sort().values


def _score(
    model: torch.nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fun: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scale_factor: float,
) -> torch.Tensor:
    """Per-sample losses from a gradient-free forward pass that leaves the model as it was.

    The pass runs in the model's current mode; every buffer (BatchNorm running statistics,
    counters) and stochastic depth's host draw counts are restored afterwards, so the model's
    state is untouched.
    """
    if scale_factor < 1.0 and X.numel():  # nnf.interpolate refuses empty (B, 0, ...) input
        X = nnf.interpolate(
            X,
            scale_factor=scale_factor,
            mode=_INTERPOLATION[X.ndim],
            align_corners=False,
            recompute_scale_factor=False,
        )
    buffers = [b for b in model.buffers() if b is not None]
    saved = [b.clone() for b in buffers]
    positions = stream_positions(model)
    try:
        with torch.no_grad():
            output = model(X)
            losses = loss_fun(output, y)
    finally:
        with torch.no_grad():
            for buffer, value in zip(buffers, saved, strict=True):
                buffer.copy_(value)
        restore_stream_positions(positions)
    return losses


def select_using_loss(
    X: torch.Tensor,
    y: torch.Tensor,
    model: torch.nn.Module,
    loss_fun: Callable[..., torch.Tensor],
    keep: float = 0.5,
    scale_factor: float = 1.0,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Keep the part of a batch that the model finds hardest (selective backprop).

    Scores every sample with a forward pass (no gradients; train/eval mode and all buffers,
    e.g. BatchNorm running statistics, left as they were), ranks the losses, and draws exactly
    ``int(B·keep)`` samples without replacement, the sample of rank :math:`r` (0 = lowest loss)
    with weight

    .. math::
        w_r = \Bigl(\frac{r + 1/2}{B}\Bigr)^{1/\text{keep} - 1}

    so the probability of being kept rises with the loss (uniform when ``keep = 1``). With
    ``scale_factor < 1`` the scoring pass runs on a bilinearly downsampled copy of ``X``, which
    is cheaper; the rows returned are always the original ones, in batch order.

    Per-step friendly: ranking and drawing run on the data's device (no value is read on the
    host). Under ``torch.compile`` the output size ``int(B·keep)`` is part of the graph: a
    ``keep`` that changes it recompiles (by design), a new ``keep`` with the same count does
    not. ``scale_factor`` is a constant of the graph (``torch.nn.functional.interpolate``
    specialises on it). ``generator`` cannot be traced by dynamo: inside a compiled step pass
    ``generator=None``.

    Args:
        X: inputs ``(B, ...)``; ``(B, C, *spatial)`` with 1 to 3 spatial dims if
            ``scale_factor < 1``.
        y: targets ``(B, ...)``.
        model: the model being trained.
        loss_fun: a function called as ``loss_fun(model(X), y, reduction='none')`` that returns
            one loss per sample, shape ``(B,)`` (like :func:`torch.nn.functional.cross_entropy`),
            or a torch loss module (``nn.CrossEntropyLoss(...)``), used with its settings but
            ``reduction='none'`` whatever reduction it was built with.
        keep: fraction of the batch to keep, in ``[0, 1]``; default 0.5, Composer's.
        scale_factor: downsampling of the scoring pass, in ``(0, 1]``; every spatial side must
            keep at least one pixel (checked at entry).
        generator: source of randomness for the draw.

    Returns:
        ``(X_selected, y_selected)``, the same ``int(B·keep)`` rows of each.

    Shape:
        - X: :math:`(B, *)`, y: :math:`(B, *)`
        - output: :math:`(\lfloor B\,\text{keep} \rfloor, *)` each

    Example:
        >>> import torch, functional as F
        >>> model = torch.nn.Linear(5, 3)
        >>> X, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
        >>> Xs, ys = F.select_using_loss(X, y, model, torch.nn.functional.cross_entropy, keep=0.5)
        >>> Xs.shape, ys.shape
        (torch.Size([4, 5]), torch.Size([4]))

    Reference: Jiang et al., *Accelerating Deep Learning by Focusing on the Biggest Losers*, 2019.
    """
    check_tensor(X, "X")
    check_tensor(y, "y")
    if X.ndim < 1:
        raise ValueError(f"X must have a batch dimension (B, ...), got shape {tuple(X.shape)}")
    check_same_batch(X, y, "X", "y")
    check_module(model)
    per_sample_loss = _per_sample_loss(loss_fun)
    keep = check_probability(keep, "keep")
    scale_factor = check_in_range(scale_factor, "scale_factor", 0.0, 1.0, low_inclusive=False)
    if scale_factor < 1.0:
        if X.ndim not in _INTERPOLATION:
            raise ValueError(
                "X must have 1 to 3 spatial dims, (B, C, L), (B, C, H, W) or (B, C, D, H, W), "
                f"to be scored at scale_factor={scale_factor} < 1, got shape {tuple(X.shape)}"
            )
        spatial = tuple(X.shape[2:])
        if any(sym_floor(side * scale_factor) < 1 for side in spatial):
            raise ValueError(
                f"scale_factor={scale_factor} shrinks the spatial size {spatial} of X to nothing "
                f"for the scoring pass; use a scale_factor >= {1 / min(spatial)} (or 1.0)"
            )
    check_generator(generator)
    batch = X.shape[0]
    n_select = sym_floor(batch * keep)
    if n_select == 0:
        index = torch.zeros(0, dtype=torch.long, device=X.device)
        return X[index], y[index.to(y.device)]
    losses = _score(model, X, y, per_sample_loss, scale_factor)
    if not isinstance(losses, torch.Tensor) or losses.shape != (batch,):
        shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
        raise ValueError(
            f"loss_fun(output, y, reduction='none') must return one loss per sample, shape "
            f"({batch},), got {shape}"
        )
    chosen = _choose(losses, keep, n_select, generator)
    return X[chosen.to(X.device, non_blocking=True)], y[chosen.to(y.device, non_blocking=True)]
