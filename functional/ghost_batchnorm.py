"""Ghost batch normalization (Hoffer, Hubara and Soudry 2017).

Batch normalization that normalizes each of several "ghost" sub-batches with its own statistics,
simulating a smaller batch size, while the running statistics (what evaluation uses) are updated
exactly as one plain ``BatchNorm`` update over the whole batch would update them.

The layers subclass ``nn.BatchNorm1d/2d/3d``: parameters, buffers and state_dict keys are those
of the batch norm they replace, and evaluation runs the very same ``BatchNorm`` code.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.batchnorm import _BatchNorm

from functional._checks import check_int, check_module, clone_module_as, warn_no_effect
from surgery import replace_module_classes
from surgery._types import OptimizerArg

__all__ = [
    "GhostBatchNorm1d",
    "GhostBatchNorm2d",
    "GhostBatchNorm3d",
    "apply_ghost_batchnorm",
]

# One contiguous run of ``count`` ghost batches of ``size`` samples, starting at sample ``start``.
_Block = tuple[int, int, int]


def _plan(batch: int, ghost_batch_size: int) -> list[_Block]:
    """Split ``batch`` samples into ceil(batch / g) ghost batches whose sizes differ by at most 1.

    The first ``batch mod n`` ghost batches get one extra sample. At most two runs come back,
    each of equal-size ghost batches, so every computation is a reshape, never a loop over
    samples or ghost batches.
    """
    n = -(-batch // ghost_batch_size)
    q, r = divmod(batch, n)
    blocks: list[_Block] = []
    if r:
        blocks.append((0, r, q + 1))
    if n - r:
        blocks.append((r * (q + 1), n - r, q))
    return blocks


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _per_sample_sum(t: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """Sum over every dimension after the channel one: (B, C, *S) -> (B, C), in ``acc``."""
    if t.ndim == 2:
        return t.to(acc)
    return t.sum(dim=tuple(range(2, t.ndim)), dtype=acc)


def _group_sum(v: torch.Tensor, blocks: list[_Block]) -> torch.Tensor:
    """Per-sample rows (B, C) summed within each ghost batch: (n, C)."""
    channels = v.shape[1]
    parts = [v[s : s + c * k].view(c, k, channels).sum(1) for s, c, k in blocks]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _expand(v: torch.Tensor, blocks: list[_Block], ndim: int) -> torch.Tensor:
    """Per-ghost-batch rows (n, C) repeated for each sample: (B, C, 1, ...) for broadcasting."""
    channels = v.shape[1]
    parts = []
    row = 0
    for _s, c, k in blocks:
        parts.append(v[row : row + c, None, :].expand(c, k, channels).reshape(c * k, channels))
        row += c
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out.view(out.shape + (1,) * (ndim - 2))


def _group_counts(blocks: list[_Block], per_sample: int, like: torch.Tensor) -> torch.Tensor:
    """Number of values each ghost batch normalizes per channel, as an (n, 1) tensor."""
    parts = [
        torch.full((c, 1), float(k * per_sample), device=like.device, dtype=like.dtype)
        for _s, c, k in blocks
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _ghost_stats(
    x: torch.Tensor, blocks: list[_Block], acc: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and biased variance of every ghost batch and channel: two (n, C) tensors in ``acc``."""
    batch, channels = x.shape[:2]
    x3 = x.reshape(batch, channels, -1)
    means, variances = [], []
    for s, c, k in blocks:
        xb = x3[s : s + c * k].view(c, k, channels, -1)
        var, mean = torch.var_mean(xb.to(acc), dim=(1, 3), correction=0)
        means.append(mean)
        variances.append(var)
    if len(blocks) == 1:
        return means[0], variances[0]
    return torch.cat(means), torch.cat(variances)


class _GhostNormalize(torch.autograd.Function):
    """y = (x - mean_k) * invstd_k * weight + bias per ghost batch k, with the exact BN gradient.

    ``mean``/``invstd`` come in as constants computed from ``x``; ``backward`` accounts for their
    dependence on ``x`` analytically (the standard batch-norm backward, per ghost batch):

    .. math::
        \\partial x = w\\sigma^{-1}\\big(g - \\overline{g} - \\hat{x}\\,\\overline{g\\hat{x}}\\big)

    where the bars average over the ghost batch's samples and positions. Only ``x`` is saved,
    like the native kernel, and every reduction accumulates in float32 or better.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, mean, invstd, blocks):  # type: ignore[override]
        acc = mean.dtype
        scale = invstd if weight is None else invstd * weight.to(acc)
        shift = -mean * scale
        if bias is not None:
            shift = shift + bias.to(acc)
        y = torch.addcmul(_expand(shift, blocks, x.ndim), x, _expand(scale, blocks, x.ndim))
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.blocks = blocks
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        x, weight, mean, invstd = ctx.saved_tensors
        blocks = ctx.blocks
        acc = mean.dtype
        per_sample = x[0, 0].numel()
        sum_g = _group_sum(_per_sample_sum(grad, acc), blocks)
        if x.dtype == acc:
            gx = grad * x
        else:
            gx = grad.to(acc) * x.to(acc)
        sum_gx = _group_sum(_per_sample_sum(gx, acc), blocks)
        del gx
        sum_g_xhat = invstd * (sum_gx - mean * sum_g)
        grad_x = grad_weight = grad_bias = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_g_xhat.sum(0).to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
            grad_bias = sum_g.sum(0).to(ctx.bias_dtype)
        if ctx.needs_input_grad[0]:
            count = _group_counts(blocks, per_sample, mean)
            a = invstd if weight is None else invstd * weight.to(acc)
            coef_x = -a * invstd * sum_g_xhat / count
            coef_c = a * (mean * invstd * sum_g_xhat - sum_g) / count
            ndim = x.ndim
            grad_x = torch.addcmul(_expand(coef_c, blocks, ndim), x, _expand(coef_x, blocks, ndim))
            grad_x.addcmul_(grad, _expand(a, blocks, ndim))
            grad_x = grad_x.to(x.dtype)
        return grad_x, grad_weight, grad_bias, None, None, None


class _GhostBatchNorm(_BatchNorm):
    """Shared implementation of :class:`GhostBatchNorm1d`/``2d``/``3d``."""

    ghost_batch_size: int
    _plain: type[_BatchNorm] = _BatchNorm

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        ghost_batch_size: int = 32,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.ghost_batch_size = check_int(ghost_batch_size, "ghost_batch_size", minimum=1)

    @classmethod
    def from_batchnorm(cls, bn: _BatchNorm, *, ghost_batch_size: int = 32) -> _GhostBatchNorm:
        """A ghost batch norm sharing ``bn``'s Parameters and buffers (no copy)."""
        if not isinstance(bn, cls._plain):
            raise TypeError(f"bn must be an nn.{cls._plain.__name__}, got {type(bn).__name__}")
        ghost_batch_size = check_int(ghost_batch_size, "ghost_batch_size", minimum=1)
        new = clone_module_as(bn, cls)
        new.ghost_batch_size = ghost_batch_size
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        batch = input.shape[0]
        if not self.training or batch <= self.ghost_batch_size:
            return super().forward(input)  # one ghost batch (or eval): exactly BatchNorm
        blocks = _plan(batch, self.ghost_batch_size)
        per_sample = input[0, 0].numel()
        smallest = min(k for _s, _c, k in blocks)
        if smallest * per_sample < 2:
            raise ValueError(
                f"every ghost batch needs more than 1 value per channel when training; "
                f"ghost_batch_size={self.ghost_batch_size} gives ghost batches of {smallest} "
                f"sample(s) of {per_sample} value(s) for input shape {tuple(input.shape)}"
            )
        acc = _accumulation_dtype(input.dtype)
        with torch.no_grad():
            mean, var = _ghost_stats(input, blocks, acc)
            if self.track_running_stats and self.running_mean is not None:
                self._update_running_stats(mean, var, blocks, batch, per_sample)
            invstd = torch.rsqrt(var + self.eps)
        return _GhostNormalize.apply(input, self.weight, self.bias, mean, invstd, blocks)

    def _update_running_stats(
        self,
        mean: torch.Tensor,
        var: torch.Tensor,
        blocks: list[_Block],
        batch: int,
        per_sample: int,
    ) -> None:
        """The update plain BatchNorm makes for the whole batch, from the ghost statistics.

        Whole-batch mean and biased variance follow from the ghost ones exactly (the parallel
        variance formula); the running variance takes the unbiased value, ``N/(N-1)`` times the
        biased one with ``N = batch * per_sample``; momentum (or the cumulative average when
        ``momentum is None``) is applied once and ``num_batches_tracked`` grows by one.
        """
        assert self.running_mean is not None and self.running_var is not None
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        if self.momentum is None:
            assert self.num_batches_tracked is not None
            factor = 1.0 / float(self.num_batches_tracked)
        else:
            factor = self.momentum
        weights = [k / batch for _s, _c, k in blocks]
        row_slices = []
        row = 0
        for _s, c, _k in blocks:
            row_slices.append(slice(row, row + c))
            row += c
        total_mean = sum(w * mean[rows].sum(0) for w, rows in zip(weights, row_slices, strict=True))
        total_var = sum(
            w * (var[rows] + (mean[rows] - total_mean).square()).sum(0)
            for w, rows in zip(weights, row_slices, strict=True)
        )
        n = batch * per_sample
        unbiased = total_var * (n / (n - 1))
        for buffer, value in ((self.running_mean, total_mean), (self.running_var, unbiased)):
            updated = buffer.to(value.dtype) * (1 - factor) + value * factor
            buffer.copy_(updated)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", ghost_batch_size={self.ghost_batch_size}"


class GhostBatchNorm1d(_GhostBatchNorm, nn.BatchNorm1d):
    """Ghost :class:`torch.nn.BatchNorm1d`. See :func:`apply_ghost_batchnorm`.

    Shape:
        - Input: (B, C) or (B, C, L)
        - Output: same as the input

    Example:
        >>> bn = GhostBatchNorm1d(8, ghost_batch_size=4)
        >>> bn(torch.randn(10, 8)).shape
        torch.Size([10, 8])
    """

    _plain = nn.BatchNorm1d


class GhostBatchNorm2d(_GhostBatchNorm, nn.BatchNorm2d):
    """Ghost :class:`torch.nn.BatchNorm2d`. See :func:`apply_ghost_batchnorm`.

    Shape:
        - Input: (B, C, H, W)
        - Output: same as the input

    Example:
        >>> bn = GhostBatchNorm2d(3, ghost_batch_size=2)
        >>> bn(torch.randn(5, 3, 4, 4)).shape
        torch.Size([5, 3, 4, 4])
    """

    _plain = nn.BatchNorm2d


class GhostBatchNorm3d(_GhostBatchNorm, nn.BatchNorm3d):
    """Ghost :class:`torch.nn.BatchNorm3d`. See :func:`apply_ghost_batchnorm`.

    Shape:
        - Input: (B, C, D, H, W)
        - Output: same as the input

    Example:
        >>> bn = GhostBatchNorm3d(2, ghost_batch_size=2)
        >>> bn(torch.randn(4, 2, 3, 3, 3)).shape
        torch.Size([4, 2, 3, 3, 3])
    """

    _plain = nn.BatchNorm3d


_GHOST_OF: dict[type[nn.Module], type[_GhostBatchNorm]] = {
    nn.BatchNorm1d: GhostBatchNorm1d,
    nn.BatchNorm2d: GhostBatchNorm2d,
    nn.BatchNorm3d: GhostBatchNorm3d,
}


def apply_ghost_batchnorm(
    model: nn.Module, ghost_batch_size: int = 32, optimizers: OptimizerArg = None
) -> nn.Module:
    """Replace the batch norms of ``model`` by ghost batch norms, in place.

    While training, a batch of ``B`` samples is split into ``n = ceil(B / ghost_batch_size)``
    consecutive ghost batches whose sizes differ by at most one (the first ``B mod n`` get the
    extra sample), and each is normalized with its own mean and biased variance, exactly as a
    ``BatchNorm`` given only that ghost batch would. A batch no larger than
    ``ghost_batch_size`` is one ghost batch: plain batch norm.

    The running statistics are updated as one ``BatchNorm`` update over the whole batch: with
    :math:`N = B\\cdot\\prod S` values per channel,

    .. math::
        \\mu = \\sum_k \\tfrac{B_k}{B}\\,\\mu_k, \\qquad
        \\sigma^2 = \\sum_k \\tfrac{B_k}{B}\\big(\\sigma_k^2 + (\\mu_k - \\mu)^2\\big),

        \\hat\\mu \\leftarrow (1 - m)\\,\\hat\\mu + m\\,\\mu, \\qquad
        \\hat\\sigma^2 \\leftarrow (1 - m)\\,\\hat\\sigma^2 + m\\,\\tfrac{N}{N-1}\\sigma^2,

    with momentum ``m`` applied once per forward pass (``1 / num_batches_tracked`` when
    ``momentum is None``) and ``num_batches_tracked`` incremented once. So a model trained with
    ghost batch norm has the running statistics plain batch norm would have on the same
    activations, and evaluation (which runs the unmodified ``BatchNorm`` code) computes exactly
    what the original model computes.

    Only exact ``nn.BatchNorm1d/2d/3d`` instances are replaced (``SyncBatchNorm`` and
    subclasses with their own ``forward`` are left alone); parameters and buffers are shared,
    not copied, so optimizer state, pretrained statistics and state_dict keys are kept.

    Args:
        model: the model to change in place.
        ghost_batch_size: the number of samples per ghost batch (at least 1).
        optimizers: optimizers holding ``model``'s parameters (kept consistent).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no ``nn.BatchNorm1d/2d/3d``.

    Example:
        >>> from torchvision.models import resnet18
        >>> model = apply_ghost_batchnorm(resnet18(), ghost_batch_size=16)
        >>> type(model.bn1).__name__
        'GhostBatchNorm2d'

    Reference:
        Hoffer, Hubara and Soudry, "Train longer, generalize better: closing the generalization
        gap in large batch training of neural networks", NeurIPS 2017.
    """
    check_module(model)
    ghost_batch_size = check_int(ghost_batch_size, "ghost_batch_size", minimum=1)

    def convert(bn: nn.Module, _index: int) -> nn.Module:
        return _GHOST_OF[type(bn)].from_batchnorm(bn, ghost_batch_size=ghost_batch_size)  # type: ignore[arg-type]

    replaced = replace_module_classes(
        model, dict.fromkeys(_GHOST_OF, convert), optimizers=optimizers, exact_type=True
    )
    if not replaced:
        warn_no_effect("apply_ghost_batchnorm", "nn.BatchNorm1d, nn.BatchNorm2d or nn.BatchNorm3d")
    return model
