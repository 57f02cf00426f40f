"""Ghost batch normalization (Hoffer, Hubara and Soudry 2017).

Batch normalization that normalizes each of several "ghost" sub-batches with its own statistics,
simulating a smaller batch size, while the running statistics (what evaluation uses) are updated
exactly as one plain ``BatchNorm`` update over the whole batch would update them.

The layers subclass ``nn.BatchNorm1d/2d/3d``: parameters, buffers and state_dict keys are those
of the batch norm they replace, and evaluation runs the very same ``BatchNorm`` code.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from functional._args import check_int, check_module
from functional._deploy import NotScriptable
from functional._policies import ModelT, clone_module_as, warn_no_effect
from surgery import OptimizerArg, replace_module_classes

__all__ = [
    "GhostBatchNorm1d",
    "GhostBatchNorm2d",
    "GhostBatchNorm3d",
    "GhostBatchNormAct2d",
    "apply_ghost_batchnorm",
]

# One contiguous run of ``count`` ghost batches of ``size`` samples, starting at sample ``start``.
_Block = tuple[int, int, int]


def _plan(batch: int, ghost_batch_size: int) -> list[_Block]:
    """Split ``batch`` samples into ceil(batch / g) ghost batches whose sizes differ by at most 1.

    The first ``batch mod n`` ghost batches get one extra sample. Returned as at most two runs
    of equal-size ghost batches, so the statistics combine with scalar weights.
    """
    n = -(-batch // ghost_batch_size)
    q, r = divmod(batch, n)
    blocks: list[_Block] = []
    if r:
        blocks.append((0, r, q + 1))
    if n - r:
        blocks.append((r * (q + 1), n - r, q))
    return blocks


class _GhostBatchNorm(NotScriptable, _BatchNorm):
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
    def from_batchnorm(cls, bn: _BatchNorm, ghost_batch_size: int = 32) -> _GhostBatchNorm:
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
        sizes = [k for _s, c, k in blocks for _ in range(c)]
        outputs, means, inv_stds = [], [], []
        # The native kernel per ghost batch (forward and backward), without its running-stat
        # update; it hands back each ghost batch's mean and 1/sqrt(var + eps).
        for chunk in input.split(sizes):
            out, mean, inv_std = torch.native_batch_norm(
                chunk, self.weight, self.bias, None, None, True, 0.0, self.eps
            )
            outputs.append(out)
            means.append(mean)
            inv_stds.append(inv_std)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                self._update_running_stats(means, inv_stds, blocks, batch, per_sample)
        return torch.cat(outputs)

    def _update_running_stats(
        self,
        means: list[torch.Tensor],
        inv_stds: list[torch.Tensor],
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
        mean = torch.stack(means)
        var = torch.stack(inv_stds).pow_(-2).sub_(self.eps).clamp_min_(0)
        if len(blocks) == 1:  # equal ghost batches
            between, total_mean = torch.var_mean(mean, dim=0, correction=0)
            total_var = var.mean(0).add_(between)
        else:
            weights = torch.cat(
                [mean.new_full((c, 1), k / batch) for _s, c, k in blocks]
            )  # built on the device: no host-to-device copy
            total_mean = (mean * weights).sum(0)
            total_var = ((var + (mean - total_mean).square()) * weights).sum(0)
        n = batch * per_sample
        total_var.mul_(n / (n - 1))
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        factor: float | torch.Tensor
        if self.momentum is None:  # cumulative average, 1/num_batches_tracked, kept on the device
            assert self.num_batches_tracked is not None
            factor = self.num_batches_tracked.to(self.running_mean.dtype).reciprocal()
        else:
            factor = self.momentum
        self.running_mean.lerp_(total_mean.to(self.running_mean.dtype), factor)
        self.running_var.lerp_(total_var.to(self.running_var.dtype), factor)

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


class GhostBatchNormAct2d(GhostBatchNorm2d):
    """Ghost batch norm followed by a dropout and an activation: timm's ``BatchNormAct2d``.

    timm fuses a ``BatchNorm2d`` with what follows it (``BatchNormAct2d``: the batch norm, then
    its ``drop`` and ``act`` submodules) in EfficientNet, MobileNetV3, RegNet and others.
    :func:`apply_ghost_batchnorm` converts it to this class, which keeps the ``drop`` and
    ``act`` submodules (shared, not copied) and applies them after the ghost batch norm, so the
    activation is kept; parameters, buffers and state_dict keys are those of the layer it
    replaces, and evaluation computes exactly what it computed.

    Shape:
        - Input: (B, C, H, W)
        - Output: same as the input

    Example:
        >>> bn = GhostBatchNormAct2d(3, ghost_batch_size=2, act=nn.ReLU())
        >>> bool((bn(torch.randn(5, 3, 4, 4)) >= 0).all())
        True
    """

    drop: nn.Module
    act: nn.Module

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
        act: nn.Module | None = None,
        drop: nn.Module | None = None,
    ) -> None:
        super().__init__(
            num_features,
            eps,
            momentum,
            affine,
            track_running_stats,
            device,
            dtype,
            ghost_batch_size=ghost_batch_size,
        )
        self.drop = nn.Identity() if drop is None else drop
        self.act = nn.Identity() if act is None else act

    @classmethod
    def from_batchnorm(cls, bn: _BatchNorm, ghost_batch_size: int = 32) -> GhostBatchNormAct2d:
        """A ghost batch norm sharing ``bn``'s Parameters, buffers, ``drop`` and ``act``."""
        for name in ("drop", "act"):
            if not isinstance(getattr(bn, name, None), nn.Module):
                raise TypeError(
                    f"bn must be a batch norm with `drop` and `act` submodules (timm's "
                    f"BatchNormAct2d), got {type(bn).__name__} without `{name}`"
                )
        return super().from_batchnorm(bn, ghost_batch_size)  # type: ignore[return-value]

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(super().forward(input)))


_GHOST_OF: dict[type[nn.Module], type[_GhostBatchNorm]] = {
    nn.BatchNorm1d: GhostBatchNorm1d,
    nn.BatchNorm2d: GhostBatchNorm2d,
    nn.BatchNorm3d: GhostBatchNorm3d,
}
# timm's fused batch norms (exact type), looked up only once timm has been imported by someone.
_TIMM_NORM_ACT = "timm.layers.norm_act"
_TIMM_GHOST_OF = {"BatchNormAct2d": GhostBatchNormAct2d}


def _ghost_classes() -> dict[type[nn.Module], type[_GhostBatchNorm]]:
    """The exact classes converted, and their ghost classes (timm's when timm is loaded)."""
    classes = dict(_GHOST_OF)
    module = sys.modules.get(_TIMM_NORM_ACT)
    for name, ghost in _TIMM_GHOST_OF.items():
        cls = getattr(module, name, None) if module is not None else None
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            classes[cls] = ghost
    return classes


def _no_effect_message(model: nn.Module) -> str:
    """What the no-effect warning says: the exact types converted, the subclasses seen."""
    seen = sorted(
        {
            type(m).__name__
            for m in model.modules()
            if isinstance(m, _BatchNorm) and not isinstance(m, _GhostBatchNorm)
        }
    )
    message = (
        "nn.BatchNorm1d, nn.BatchNorm2d or nn.BatchNorm3d (exact type) nor timm BatchNormAct2d"
    )
    if seen:
        message += (
            "; it converts exact types only (a subclass's own forward cannot be assumed) and "
            f"left alone the batch norm subclasses it saw: {', '.join(seen)}"
        )
    return message


def apply_ghost_batchnorm(
    model: ModelT, ghost_batch_size: int = 32, optimizers: OptimizerArg = None
) -> ModelT:
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

    Autocast and compile: like ``nn.BatchNorm``, the layers are not cast by autocast; each ghost
    batch is normalized in the input's dtype with the float32 affine parameters and statistics
    (a bf16 activation from an autocast convolution gives a bf16 output), and the running
    statistics stay float32. The forward pass reads no device value on the host (the
    cumulative-average weight ``1/num_batches_tracked`` stays on the device) and compiles to one
    graph per batch size; the ghost split depends only on the batch size.

    Only exact ``nn.BatchNorm1d/2d/3d`` instances are replaced (``SyncBatchNorm`` and
    subclasses with their own ``forward`` are left alone, and the no-effect warning names the
    subclasses it saw), and timm's ``BatchNormAct2d`` (a ``BatchNorm2d`` fused with a dropout
    and an activation, in EfficientNet, MobileNetV3, RegNet, ...), which becomes a
    :class:`GhostBatchNormAct2d` that keeps its activation. Parameters and buffers are shared,
    not copied, so optimizer state, pretrained statistics and state_dict keys are kept.

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager); ``torch.jit.script`` cannot compile
    its new layers and raises a ``TypeError`` naming ``torch.export``.

    Args:
        model: the model to change in place.
        ghost_batch_size: the number of samples per ghost batch (at least 1).
        optimizers: optimizers holding ``model``'s parameters (kept consistent).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no ``nn.BatchNorm1d/2d/3d`` of exact type
            (nor timm ``BatchNormAct2d``); the message names the batch norm subclasses it saw.

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

    classes = _ghost_classes()

    def convert(bn: nn.Module, _index: int) -> nn.Module:
        return classes[type(bn)].from_batchnorm(bn, ghost_batch_size=ghost_batch_size)  # type: ignore[arg-type]

    replaced = replace_module_classes(
        model, dict.fromkeys(classes, convert), optimizers=optimizers, exact_type=True
    )
    if not replaced:
        warn_no_effect("apply_ghost_batchnorm", _no_effect_message(model))
    return model
