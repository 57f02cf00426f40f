"""CutMix: paste a box from a partner image and mix the labels by its area (Yun et al. 2019).

Paper: `CutMix: Regularization Strategy to Train Strong Classifiers with Localizable Features
<https://arxiv.org/abs/1905.04899>`_.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from functional._checks import (
    check_generator,
    check_indices,
    check_int,
    check_positive,
    check_same_batch,
    check_tensor,
    dense_labels,
    random_device,
    random_permutation,
    sample_beta,
)

__all__ = ["cutmix_batch"]

BBox = tuple[int, int, int, int]


def _draw_bbox(height: int, width: int, alpha: float, generator: torch.Generator | None) -> BBox:
    """A box of area about ``(1 - λ)·H·W``, ``λ ~ Beta(alpha, alpha)``, centred uniformly, clipped."""
    lam = float(sample_beta(alpha, (), generator))
    ratio = math.sqrt(1.0 - lam)
    cut_h, cut_w = int(height * ratio), int(width * ratio)
    device = random_device(generator)
    cy = int(torch.randint(0, height, (), generator=generator, device=device))
    cx = int(torch.randint(0, width, (), generator=generator, device=device))
    y1, x1 = cy - cut_h // 2, cx - cut_w // 2
    return (
        min(max(x1, 0), width),
        min(max(y1, 0), height),
        min(max(x1 + cut_w, 0), width),
        min(max(y1 + cut_h, 0), height),
    )


def _check_bbox(bbox: object, height: int, width: int) -> BBox:
    ok = isinstance(bbox, Sequence) and len(bbox) == 4
    if ok:
        items = []
        for v in bbox:  # type: ignore[union-attr]
            if isinstance(v, torch.Tensor) and v.ndim == 0 and not v.is_floating_point():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                ok = False
                break
            items.append(int(v))
    if not ok:
        raise TypeError(f"bbox must be a tuple of 4 ints (x1, y1, x2, y2), got {bbox!r}")
    x1, y1, x2, y2 = items
    if x2 < x1 or y2 < y1:
        raise ValueError(
            f"bbox must be (left, top, right, bottom) with x1 <= x2 and y1 <= y2, got {bbox!r}"
        )
    clip_x = lambda v: min(max(v, 0), width)  # noqa: E731
    clip_y = lambda v: min(max(v, 0), height)  # noqa: E731
    return clip_x(x1), clip_y(y1), clip_x(x2), clip_y(y2)


def _paste(x: torch.Tensor, perm: torch.Tensor, bbox: BBox, *, bijective: bool) -> torch.Tensor:
    """Deterministic core: ``x`` with the box ``bbox`` of every sample taken from ``x[perm]``.

    ``bijective`` says ``perm`` is a permutation: the box is then scattered straight from ``x``
    to the partners' positions (``index_copy_`` with the inverse permutation) instead of being
    gathered into a temporary first.
    """
    x1, y1, x2, y2 = bbox
    out = x.clone()
    if x2 <= x1 or y2 <= y1 or x.shape[0] == 0:
        return out
    perm = perm.to(x.device)
    box = out[..., y1:y2, x1:x2]
    if bijective:
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(len(perm), device=perm.device)
        box.index_copy_(0, inverse, x[..., y1:y2, x1:x2])
    else:
        box.copy_(x[perm, ..., y1:y2, x1:x2])
    return out


def _is_permutation(indices: torch.Tensor) -> bool:
    """Whether ``indices`` (checked to lie in ``[0, B)``) is a permutation; eager on the CPU only."""
    if indices.device.type != "cpu":
        return False  # answering would synchronise with the device; the gather path is exact
    return bool((torch.bincount(indices, minlength=len(indices)) == 1).all())


def _area_fraction(bbox: BBox, height: int, width: int) -> float:
    x1, y1, x2, y2 = bbox
    return (x2 - x1) * (y2 - y1) / (height * width)


def cutmix_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    n_classes: int,
    *,
    alpha: float = 1.0,
    indices: torch.Tensor | None = None,
    bbox: tuple[int, int, int, int] | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Replace a box of every image with the same box of a partner image (CutMix).

    A box is drawn once for the batch: :math:`\lambda \sim \mathrm{Beta}(\alpha, \alpha)`, sides
    :math:`\lfloor H\sqrt{1-\lambda}\rfloor \times \lfloor W\sqrt{1-\lambda}\rfloor`, centre
    uniform over the image, clipped at the border. The labels are mixed by the area actually
    pasted, :math:`a = |\text{box} \cap \text{image}| / (HW)`:

    .. math::
        \tilde x_i = M \odot x_{\pi(i)} + (1 - M) \odot x_i, \qquad
        \tilde y_i = (1 - a)\, e_{y_i} + a\, e_{y_{\pi(i)}}

    with :math:`M` the box mask and :math:`e_c` the one-hot vector of class :math:`c`. (Labels
    are weighted by the clipped box, unlike Composer's ``length`` option, which weights them by
    the nominal box.)

    Args:
        x: images ``(B, ..., H, W)``, any dtype.
        y: class indices ``(B,)`` or dense labels ``(B, n_classes)``.
        n_classes: number of classes (``>= 1``).
        alpha: Beta concentration for the box area (``> 0``); ignored when ``bbox`` is given.
        indices: the partner of each sample, ``(B,)`` integers in ``[0, B)``; a random
            permutation from ``generator`` when ``None``.
        bbox: a fixed box ``(x1, y1, x2, y2)`` = (left, top, right, bottom) in pixels,
            half-open, ``x`` along the width; clipped to the image.
        generator: source of randomness for the permutation and the box.

    Returns:
        ``(x_mix, y_mix, perm)``: mixed images (dtype, device and memory format of ``x``),
        float labels ``(B, n_classes)`` and the partner indices used.

    Shape:
        - x: :math:`(B, *, H, W)`, y: :math:`(B)` or :math:`(B, K)`
        - x_mix: :math:`(B, *, H, W)`, y_mix: :math:`(B, K)`, perm: :math:`(B)`

    Example:
        >>> import torch, functional as F
        >>> x, y = torch.rand(4, 3, 10, 10), torch.tensor([0, 1, 2, 3])
        >>> x_mix, y_mix, perm = F.cutmix_batch(x, y, 4, bbox=(0, 0, 5, 10))
        >>> y_mix[0, y[0]].item() + y_mix[0, y[perm[0]]].item()
        1.0
        >>> bool((x_mix[:, :, :, :5] == x[perm][:, :, :, :5]).all())
        True

    Reference: Yun et al., *CutMix: Regularization Strategy to Train Strong Classifiers with
    Localizable Features*, ICCV 2019.
    """
    check_tensor(x, "x")
    check_tensor(y, "y")
    if x.ndim < 3:
        raise ValueError(f"x must have shape (B, ..., H, W), got shape {tuple(x.shape)}")
    check_same_batch(x, y, "x", "y")
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    alpha = check_positive(alpha, "alpha")
    check_generator(generator)
    batch, height, width = x.shape[0], x.shape[-2], x.shape[-1]
    if height == 0 or width == 0:
        raise ValueError(f"x must have non-empty images, got shape {tuple(x.shape)}")
    y_dense = dense_labels(y, n_classes)
    if indices is None:
        perm = random_permutation(batch, generator, x.device)
        bijective = True
    else:
        perm = check_indices(indices, batch)
        bijective = _is_permutation(perm)
        perm = perm.to(x.device)
    if bbox is None:
        box = _draw_bbox(height, width, alpha, generator)
    else:
        box = _check_bbox(bbox, height, width)
    x_mix = _paste(x, perm, box, bijective=bijective)
    area = _area_fraction(box, height, width)
    partner = y_dense[perm.to(y_dense.device)]
    y_mix = partner.lerp_(y_dense, 1.0 - area)
    return x_mix, y_mix, perm
