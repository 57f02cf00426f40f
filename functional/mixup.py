"""MixUp: train on convex combinations of pairs of examples and their labels (Zhang et al. 2018).

Paper: `mixup: Beyond Empirical Risk Minimization <https://arxiv.org/abs/1710.09412>`_.
"""

from __future__ import annotations

import torch

from functional._args import (
    check_generator,
    check_int,
    check_positive,
    check_probability,
    check_same_batch,
    check_tensor,
)
from functional._batch import dense_labels, random_device, random_permutation, sample_beta
from functional._numeric import cast_result, compute_dtype, scalar_tensor
from functional._values import check_indices, check_values

__all__ = ["gen_interpolation_lambda", "mixup_batch"]


def gen_interpolation_lambda(
    alpha: float,
    *,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
) -> float | torch.Tensor:
    r"""Draw a MixUp interpolation coefficient :math:`\lambda \sim \mathrm{Beta}(\alpha, \alpha)`.

    Small ``alpha`` puts most mass near 0 and 1 (little mixing); large ``alpha`` concentrates
    :math:`\lambda` around 0.5. ``alpha = 0`` means no mixing and always returns 0. Any
    ``alpha > 0``, down to subnormal values, gives a number in ``[0, 1]`` (never NaN).

    The draw is made on the generator's device (the CPU for torch's global RNG). The single
    coefficient is returned as a Python float, which reads it on the host: free for a CPU
    generator, a synchronisation for a CUDA one. Draw it outside a compiled step and pass it in
    (or pass ``batch_size``, which returns a tensor and reads nothing).

    Args:
        alpha: concentration of the Beta distribution, ``>= 0`` and finite.
        batch_size: if given, draw one coefficient per sample and return them as a float32
            tensor of shape ``(batch_size,)`` (per-sample MixUp); by default draw a single float.
        generator: source of randomness (``None``: torch's global RNG).

    Returns:
        A float in ``[0, 1]``, or a ``(batch_size,)`` tensor of them.

    Example:
        >>> import torch, functional as F
        >>> lam = F.gen_interpolation_lambda(0.2, generator=torch.Generator().manual_seed(0))
        >>> 0.0 <= lam <= 1.0
        True
        >>> F.gen_interpolation_lambda(1.0, batch_size=4).shape
        torch.Size([4])
    """
    alpha = check_positive(alpha, "alpha", allow_zero=True)
    check_generator(generator)
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", minimum=0)
    size = () if batch_size is None else (batch_size,)
    if alpha == 0.0:
        lam = torch.zeros(size, dtype=torch.float64, device=random_device(generator))
    else:
        lam = sample_beta(alpha, size, generator)
    return float(lam) if batch_size is None else lam.float()


def _check_lambda(lam: object, batch: int) -> float | torch.Tensor:
    """A float in [0, 1] (checked at once), or a 0-d / ``(B,)`` floating tensor (content check
    through ``check_values``: eager on the CPU, a device assert elsewhere, no host read)."""
    if not isinstance(lam, torch.Tensor):
        return check_probability(lam, "interpolation_lambda")
    if lam.ndim != 0 and lam.shape != (batch,):
        raise ValueError(
            "interpolation_lambda must be a float, a 0-d tensor or a per-sample tensor of shape "
            f"(B,) = ({batch},), got shape {tuple(lam.shape)}"
        )
    if not lam.is_floating_point():
        raise TypeError(f"interpolation_lambda must be a floating tensor, got dtype {lam.dtype}")
    if lam.numel():
        check_values(
            ((lam >= 0) & (lam <= 1)).all(),
            "interpolation_lambda must be in [0, 1]",
            lambda: f"values in [{float(lam.min())}, {float(lam.max())}]",
        )
    return lam


def _weight(lam: float | torch.Tensor, like: torch.Tensor) -> float | torch.Tensor:
    """``1 - λ`` as a tensor of ``like``'s dtype and device, shaped to broadcast over dim 0.

    A tensor for a Python float under ``torch.compile`` (a float weight of ``lerp`` is
    specialised there: a recompile per λ; a tensor is a graph input). Eagerly a Python float
    stays a float: ``lerp`` with a scalar weight is about 1.6x faster on the CPU than with a
    0-d tensor (benchmarks/ops.py).
    """
    if not isinstance(lam, torch.Tensor) and not torch.compiler.is_compiling():
        return 1.0 - lam
    weight = 1 - scalar_tensor(lam, dtype=like.dtype, device=like.device)
    return weight.view(-1, *([1] * (like.ndim - 1))) if weight.ndim else weight


def _mix_inputs(x: torch.Tensor, perm: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """Deterministic core: ``(1 - λ)·x + λ·x[perm]`` with ``λ`` a float or a 0-d/(B,) tensor.

    Integer inputs are mixed in float32 (float64 for 32/64-bit integers) and rounded back,
    clamped to the dtype's range (a convex combination never wraps round); int64 results are
    clamped to each pair, since float64 rounds values beyond 2**53.
    """
    dtype = compute_dtype(x.dtype)
    partner = x[perm.to(x.device, non_blocking=True)]  # advanced indexing: fast on the CPU
    if dtype == x.dtype:
        # partner + (1 - λ)(x - partner): one fused pass, written over the gathered copy we own.
        return partner.lerp_(x, _weight(lam, partner))
    mixed = partner.to(dtype)
    mixed = cast_result(mixed.lerp_(x.to(dtype), _weight(lam, mixed)), x.dtype)
    if x.dtype == torch.int64:
        # float64 rounds int64 beyond 2**53: clamp to the pair, so the result stays between them.
        mixed = torch.minimum(
            torch.maximum(mixed, torch.minimum(x, partner)), torch.maximum(x, partner)
        )
    return mixed


def _mix_labels(
    y: torch.Tensor, perm: torch.Tensor, lam: float | torch.Tensor, n_classes: int
) -> torch.Tensor:
    """Deterministic core: ``(1 - λ)·onehot(y) + λ·onehot(y[perm])`` as float labels."""
    dense = dense_labels(y, n_classes)
    partner = dense[perm.to(dense.device, non_blocking=True)]
    return partner.lerp_(dense, _weight(lam, partner))


def _draw_folded_lambda(alpha: object, generator: torch.Generator | None) -> torch.Tensor:
    """Composer's draw: ``min(z, 1 - z)``, ``z ~ Beta(alpha, alpha)`` (0 for ``alpha = 0``),
    a float64 0-d tensor on the generator's device; nothing is read on the host."""
    alpha = check_positive(alpha, "alpha", allow_zero=True)
    if alpha == 0.0:
        return torch.zeros((), dtype=torch.float64, device=random_device(generator))
    z = sample_beta(alpha, (), generator)
    return torch.minimum(z, 1.0 - z)


def _resolve_lambda(
    interpolation_lambda: object, alpha: object, generator: torch.Generator | None, batch: int
) -> float | torch.Tensor:
    """The λ to mix with: exactly one of ``interpolation_lambda`` (given) and ``alpha`` (draw)."""
    if interpolation_lambda is not None and alpha is not None:
        raise ValueError(
            "mixup_batch takes either interpolation_lambda (a fixed λ) or alpha (draw λ from "
            f"Beta(alpha, alpha)), not both; got interpolation_lambda={interpolation_lambda!r} "
            f"and alpha={alpha!r}"
        )
    if interpolation_lambda is None and alpha is None:
        raise ValueError(
            "mixup_batch needs interpolation_lambda (a fixed λ in [0, 1]) or alpha (draw λ "
            "from Beta(alpha, alpha), as Composer's mixup_batch(..., alpha=0.2) does); got neither"
        )
    if alpha is not None:
        return _draw_folded_lambda(alpha, generator)
    return _check_lambda(interpolation_lambda, batch)


def mixup_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    interpolation_lambda: float | torch.Tensor | None = None,
    n_classes: int | None = None,
    indices: torch.Tensor | None = None,
    *,
    alpha: float | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Mix every sample with a partner from the same batch (MixUp).

    With the partner permutation :math:`\pi` and coefficient :math:`\lambda`,

    .. math::
        \tilde x_i = (1 - \lambda_i)\, x_i + \lambda_i\, x_{\pi(i)}, \qquad
        \tilde y_i = (1 - \lambda_i)\, e_{y_i} + \lambda_i\, e_{y_{\pi(i)}}

    where :math:`e_c` is the one-hot vector of class :math:`c` (dense labels are used as they
    are). :math:`\lambda` is one float for the batch or a ``(B,)`` tensor with one coefficient
    per sample, e.g. from ``gen_interpolation_lambda(alpha, batch_size=B)``.

    Give either ``interpolation_lambda`` or ``alpha``, exactly one (both, or neither, is a
    ``ValueError``). With ``alpha`` (Composer's form) λ is drawn here, as Composer draws it:
    :math:`\lambda = \min(z, 1 - z)`, :math:`z \sim \mathrm{Beta}(\alpha, \alpha)` (0 for
    ``alpha = 0``), so λ lies in ``[0, 0.5]`` and each sample stays the main part of its mix.
    The draw is a tensor on the generator's device: nothing is read on the host, and a new
    ``alpha`` does not recompile.

    Per-step friendly: no value is read on the host (label and λ range checks run eagerly on
    CPU tensors, as device asserts on accelerators, and are skipped under ``torch.compile``);
    under ``torch.compile(fullgraph=True)`` nothing recompiles when λ (a Python float, a 0-d
    or a ``(B,)`` tensor) or the permutation changes. Only the shapes of ``x`` and ``y`` and
    ``n_classes`` are part of the graph. ``generator`` cannot be traced by dynamo: inside a
    compiled step pass ``generator=None`` (torch's global RNG) or ``indices``.

    Args:
        x: inputs ``(B, ...)``; floating, or integer (mixed in float32, or float64 for 32/64-bit
            integers, rounded back and clamped to the dtype's range).
        y: class indices ``(B,)`` or dense labels ``(B, n_classes)``.
        interpolation_lambda: :math:`\lambda` in ``[0, 1]``, a float, a 0-d tensor or a
            ``(B,)`` tensor; ``None`` when ``alpha`` is given.
        n_classes: number of classes (``>= 1``); required.
        indices: the partner of each sample, ``(B,)`` integers in ``[0, B)``; a random
            permutation from ``generator`` when ``None``.
        alpha: draw λ from ``Beta(alpha, alpha)`` folded to ``[0, 0.5]`` (``>= 0``) instead of
            passing ``interpolation_lambda``.
        generator: source of randomness for the permutation (and λ with ``alpha``).

    Returns:
        ``(x_mix, y_mix, perm)``: mixed inputs (dtype and device of ``x``), mixed float labels
        ``(B, n_classes)`` and the partner indices used.

    Shape:
        - x: :math:`(B, *)`, y: :math:`(B)` or :math:`(B, K)`
        - x_mix: :math:`(B, *)`, y_mix: :math:`(B, K)`, perm: :math:`(B)`

    Example:
        >>> import torch, functional as F
        >>> x, y = torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
        >>> g = torch.Generator().manual_seed(0)
        >>> lam = F.gen_interpolation_lambda(0.2, generator=g)
        >>> x_mix, y_mix, perm = F.mixup_batch(x, y, lam, n_classes=4, generator=g)
        >>> x_mix.shape, y_mix.shape, torch.allclose(y_mix.sum(1), torch.ones(4))
        (torch.Size([4, 3, 8, 8]), torch.Size([4, 4]), True)
        >>> _, y_mix, perm = F.mixup_batch(x, y, n_classes=4, alpha=0.2, generator=g)  # Composer's form
        >>> bool((y_mix.max(1).values >= 0.5).all())
        True

    Reference: Zhang et al., *mixup: Beyond Empirical Risk Minimization*, ICLR 2018.
    """
    check_tensor(x, "x")
    check_tensor(y, "y")
    if x.ndim < 1:
        raise ValueError(f"x must have a batch dimension (B, ...), got shape {tuple(x.shape)}")
    check_same_batch(x, y, "x", "y")
    if n_classes is None:
        raise TypeError("mixup_batch needs n_classes, the number of classes of y (an int >= 1)")
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    check_generator(generator)
    batch = x.shape[0]
    lam = _resolve_lambda(interpolation_lambda, alpha, generator, batch)
    y_dense = dense_labels(y, n_classes)  # validates the labels before any work
    if indices is None:
        perm = random_permutation(batch, generator, x.device)
    else:
        perm = check_indices(indices, batch).to(x.device, non_blocking=True)
    x_mix = _mix_inputs(x, perm, lam)
    y_mix = _mix_labels(y_dense, perm, lam, n_classes)
    return x_mix, y_mix, perm
