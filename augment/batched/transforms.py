"""The public batched transforms: :func:`batch_augment_and_mix` and :func:`batch_randaugment`,
their modules :class:`BatchAugMix` and :class:`BatchRandAugment`, and the checks of their
arguments; the chains run in :mod:`augment.batched.paths`. The package's docstring
(:mod:`augment.batched`) says how the draws are balanced and how the two paths run."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from augment import primitives as _P
from augment._args import RANDAUGMENT_MIN_SEVERITY, check_alpha, check_depth, check_severity
from augment._base import resolve_set, set_repr
from augment.batched.grouped import Workspace
from augment.batched.ops import KINDS, check_batch
from augment.batched.paths import augmix_run, randaugment_run

__all__ = ["BatchAugMix", "BatchRandAugment", "batch_augment_and_mix", "batch_randaugment"]

_KIND_OF = {getattr(_P, kind): kind for kind in KINDS}


def _kinds(augmentation_set: object) -> tuple[str, ...]:
    """The names of the operations of ``augmentation_set`` (a set name or our primitives)."""
    ops = resolve_set(augmentation_set, _P.augmentation_sets)
    unknown = [op for op in ops if op not in _KIND_OF]
    if unknown:
        names = ", ".join(getattr(op, "__name__", repr(op)) for op in unknown)
        raise TypeError(
            "augmentation_set of a batched transform must be a set name or a sequence of "
            f"augment's own operations (they have batched kernels), got {names}"
        )
    return tuple(_KIND_OF[op] for op in ops)


def _check_width(width: object) -> int:
    if isinstance(width, bool) or not isinstance(width, numbers.Integral):
        raise TypeError(f"width must be an int, got {type(width).__name__}")
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    return int(width)


def _check_generator_type(generator: object) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return generator


def _check_generator(generator: object, x: Tensor) -> torch.Generator | None:
    generator = _check_generator_type(generator)
    if generator is None:
        return None
    if generator.device.type != x.device.type:
        raise ValueError(
            f"generator must be on the batch's device ({x.device.type}), got a generator on "
            f"{generator.device.type}; create it with torch.Generator(device=x.device)"
        )
    return generator


def batch_augment_and_mix(
    x: Tensor,
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[Callable[..., Any]] = "all",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""AugMix on a batch: every sample mixes ``width`` chains of its own.

    .. math::

        x^{(i)}_{\mathrm{aug}} = (1 - m_i)\, x^{(i)} + m_i \sum_{j=1}^{\mathrm{width}}
        w_{ij}\, \mathrm{chain}_{ij}(x^{(i)}), \quad w_i \sim \mathrm{Dirichlet}(\alpha
        \mathbf{1}), \quad m_i \sim \mathrm{Beta}(\alpha, \alpha)

    drawn independently for each sample :math:`i`, as :func:`augment.augment_and_mix` draws
    them per image: each chain applies ``depth`` operations (``-1``: a uniform depth in
    {1, 2, 3} per chain) drawn uniformly with replacement from the set, each at a level uniform
    in :math:`[\min(0.1, s), s]` and a fair random direction. The mix is computed in float32
    over the 8-bit results of the operations.

    Across the batch the operations and chain depths are drawn balanced (see
    :mod:`augment.batched`): each chain's draws have the distribution above, but an operation
    is drawn by at most ``ceil(width N / K)`` chains of a layer (``K`` operations in the set).

    Cost and memory: ``depth`` layers over the ``width N`` chains (``depth = -1``: 3 layers,
    the second and third over the chains still running only). On accelerators and under
    ``torch.compile`` each layer applies each operation to the chains that drew it only (one
    gather and one write back of the chains per layer; 281 kernel launches and 2.5 GB of
    traffic at 64 x 3 x 224 x 224 uint8, width 3); peak extra memory, measured (process peak
    resident size, 32 x 3 x 224 x 224, on the CPU): about 4 float32 copies of the batch (the
    uint8 chains, a layer's gathered rows and its temporaries, the float32 mix). On CPU
    (eager) each sample pays for its own operations only and the batch is processed in groups
    of samples: the output and a working set of about 55 MiB for a group's chains and
    temporaries at 224 x 224, whatever the batch size (measured: 64 MiB extra for
    64 x 3 x 224 x 224 uint8, 1.7 float32 copies of it; 93 MiB for 256 samples, 0.6).

    Shape:
        ``x``: :math:`(N, C, H, W)`, :math:`C \in \{1, 3\}`; output: the same shape, dtype and
        device.

    Args:
        x: the batch, ``torch.uint8`` (0..255) or floating point (0..1, processed at 8-bit
            precision: ``round(255 x)``); CPU or CUDA.
        severity, depth, width, alpha, augmentation_set: as in :func:`augment.augment_and_mix`
            (``augmentation_set``: a set name or a sequence of augment's own operations).
        generator: a ``torch.Generator`` on ``x``'s device, or ``None`` for torch's global
            generator (the only choice inside ``torch.compile``).

    Returns:
        The mixed batch: uint8 rounded half up; float not rounded (``mix / 255``).

    Raises:
        ValueError: bad shape (an (N, H, W, C) batch: the message says how to permute; an
            image of height or width 0, in the PIL path's words), a float batch outside
            [0, 1], severity outside [0, 10], width < 1, depth neither -1 nor >= 1,
            alpha <= 0, an unknown set name, a generator on another device.
        TypeError: a non-tensor, an integer dtype other than uint8, a set member without a
            batched kernel, a bad generator.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8, generator=g)
        >>> out = batch_augment_and_mix(x, severity=3, width=3, generator=g)
        >>> out.shape, out.dtype
        (torch.Size([8, 3, 32, 32]), torch.uint8)

    Reference:
        Hendrycks et al., "AugMix: A Simple Data Processing Method to Improve Robustness and
        Uncertainty", ICLR 2020.
    """
    kinds = _kinds(augmentation_set)
    sev = check_severity(severity)
    d = check_depth(depth, allow_random=True)
    wd = _check_width(width)
    a = check_alpha(alpha)
    return _augmix(x, kinds, sev, d, wd, a, generator)


def _augmix(
    x: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    generator: object,
    workspace: Workspace | None = None,
) -> Tensor:
    """:func:`batch_augment_and_mix` after its parameters are checked (the module's forward)."""
    check_batch(x)
    g = _check_generator(generator, x)
    if x.shape[0] == 0:
        return x.clone()
    return augmix_run(x, kinds, severity, depth, width, alpha, g, workspace)


def batch_randaugment(
    x: Tensor,
    severity: float = 9,
    depth: int = 2,
    augmentation_set: str | Sequence[Callable[..., Any]] = "all",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""RandAugment on a batch: every sample applies ``depth`` operations of its own choice.

    Each sample draws, independently, ``depth`` operations uniformly with replacement from the
    set and applies them at level ``severity`` in a fair random direction, as
    :func:`augment.randaugment` does per image.

    Across the batch the operations are drawn balanced (see :mod:`augment.batched`): an
    operation is drawn by at most ``ceil(N / K)`` samples of a layer.

    Cost and memory: ``depth`` layers, each applying only the drawn operation to each sample,
    on accelerators and under ``torch.compile`` (each operation on its own slots: 96 kernel
    launches and 0.68 GB of traffic at 64 x 3 x 224 x 224 uint8, depth 2) as on CPU (eager,
    grouped: see :func:`batch_augment_and_mix`); peak extra memory, measured as for
    :func:`batch_augment_and_mix`: about 1.3 float32 copies of the batch on the device path;
    on CPU (eager) the output and about 50 MiB of a group's temporaries (measured: 60 MiB
    extra for 64 x 3 x 224 x 224 uint8, 1.6 float32 copies; 88 MiB for 256 samples, 0.6).

    Shape:
        ``x``: :math:`(N, C, H, W)`, :math:`C \in \{1, 3\}`; output: the same shape, dtype and
        device.

    Args:
        x: the batch, ``torch.uint8`` or floating point in [0, 1] (processed at 8-bit precision).
        severity, depth, augmentation_set: as in :func:`augment.randaugment`.
        generator: a ``torch.Generator`` on ``x``'s device, or ``None`` (torch's global one).

    Returns:
        The augmented batch (float input: multiples of 1/255).

    Raises:
        ValueError, TypeError: as :func:`batch_augment_and_mix`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.rand(4, 3, 16, 16, generator=g)
        >>> batch_randaugment(x, severity=9, depth=2, generator=g).shape
        torch.Size([4, 3, 16, 16])

    Reference:
        Cubuk et al., "RandAugment: Practical automated data augmentation with a reduced search
        space", NeurIPS 2020.
    """
    kinds = _kinds(augmentation_set)
    sev = check_severity(severity, minimum=RANDAUGMENT_MIN_SEVERITY)
    d = check_depth(depth, allow_random=False)
    return _randaugment(x, kinds, sev, d, generator)


def _randaugment(
    x: Tensor,
    kinds: tuple[str, ...],
    severity: float,
    depth: int,
    generator: object,
    workspace: Workspace | None = None,
) -> Tensor:
    """:func:`batch_randaugment` after its parameters are checked (the module's forward)."""
    check_batch(x)
    g = _check_generator(generator, x)
    if x.shape[0] == 0 or depth == 0:
        return x.clone()
    return randaugment_run(x, kinds, severity, depth, g, workspace)


def _eager(workspace: Workspace) -> Workspace | None:
    """The module's workspace, kept out of compiled code (which never takes the CPU path)."""
    return None if torch.compiler.is_compiling() else workspace


class BatchAugMix(nn.Module):
    """:func:`batch_augment_and_mix` as a module, to sit after the data loader.

    See :func:`batch_augment_and_mix` for the arguments; it has no parameters or buffers, and
    the generator is not part of its ``state_dict``. On CPU in eager mode it keeps the
    grouped path's working buffers from one batch to the next (two of a group's size, about
    16 MiB at 224 x 224; fresh pages on every batch cost page faults): one caller at a time
    uses them, a concurrent call takes fresh ones, and copies and pickles start without them.

    Example:
        >>> import torch
        >>> aug = BatchAugMix(severity=3, width=3)
        >>> aug
        BatchAugMix(severity=3, depth=-1, width=3, alpha=1.0, augmentation_set='all')
        >>> aug(torch.zeros(2, 1, 8, 8, dtype=torch.uint8)).shape
        torch.Size([2, 1, 8, 8])
        >>> compiled = torch.compile(aug, backend="aot_eager")  # generator=None inside compile
    """

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[Callable[..., Any]] = "all",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self._kinds = _kinds(augmentation_set)
        check_severity(severity)
        self.severity = severity
        self.depth = check_depth(depth, allow_random=True)
        self.width = _check_width(width)
        check_alpha(alpha)
        self.alpha = alpha
        self.augmentation_set = augmentation_set
        self.generator = _check_generator_type(generator)
        self._workspace = Workspace()

    def forward(self, x: Tensor) -> Tensor:
        return _augmix(
            x,
            self._kinds,
            float(self.severity),
            self.depth,
            self.width,
            float(self.alpha),
            self.generator,
            _eager(self._workspace),
        )

    def extra_repr(self) -> str:
        return (
            f"severity={self.severity}, depth={self.depth}, width={self.width}, "
            f"alpha={self.alpha}, augmentation_set={set_repr(self.augmentation_set)}"
        )


class BatchRandAugment(nn.Module):
    """:func:`batch_randaugment` as a module, to sit after the data loader.

    See :func:`batch_randaugment` for the arguments; its working buffers on CPU are kept as
    :class:`BatchAugMix`'s.

    Example:
        >>> import torch
        >>> ra = BatchRandAugment(severity=9, depth=2, augmentation_set="safe")
        >>> ra
        BatchRandAugment(severity=9, depth=2, augmentation_set='safe')
        >>> ra(torch.zeros(2, 3, 8, 8)).dtype
        torch.float32
    """

    def __init__(
        self,
        severity: float = 9,
        depth: int = 2,
        augmentation_set: str | Sequence[Callable[..., Any]] = "all",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self._kinds = _kinds(augmentation_set)
        check_severity(severity, minimum=RANDAUGMENT_MIN_SEVERITY)
        self.severity = severity
        self.depth = check_depth(depth, allow_random=False)
        self.augmentation_set = augmentation_set
        self.generator = _check_generator_type(generator)
        self._workspace = Workspace()

    def forward(self, x: Tensor) -> Tensor:
        return _randaugment(
            x,
            self._kinds,
            float(self.severity),
            self.depth,
            self.generator,
            _eager(self._workspace),
        )

    def extra_repr(self) -> str:
        return (
            f"severity={self.severity}, depth={self.depth}, "
            f"augmentation_set={set_repr(self.augmentation_set)}"
        )
