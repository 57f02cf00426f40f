"""Cutout: zero out square holes of the input images (DeVries and Taylor 2017).

Paper: `Improved Regularization of Convolutional Neural Networks with Cutout
<https://arxiv.org/abs/1708.04552>`_.
"""

from __future__ import annotations

import numbers

import torch

from functional._checks import (
    check_bool,
    check_generator,
    check_int,
    check_ndim,
    random_device,
)

__all__ = ["cutout"]


def _hole_side(length: object, height: int, width: int) -> int:
    if isinstance(length, bool) or not isinstance(length, numbers.Real):
        raise TypeError(f"length must be an int (pixels) or a float in (0, 1), got {length!r}")
    if isinstance(length, numbers.Integral):
        side = int(length)
        if side < 1:
            raise ValueError(f"length in pixels must be >= 1, got {length}")
        return side
    fraction = float(length)
    if not 0.0 < fraction < 1.0:
        raise ValueError(
            "length as a float is a fraction of min(H, W) and must be in (0, 1) (pass an int "
            f"for a side in pixels), got {length}"
        )
    return int(fraction * min(height, width))


def _draw_boxes(
    shape: tuple[int, ...], side: int, height: int, width: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Holes ``(..., 4)`` as clipped ``(x1, y1, x2, y2)``, centres uniform over the pixels."""
    device = random_device(generator)
    cy = torch.randint(0, height, shape, generator=generator, device=device)
    cx = torch.randint(0, width, shape, generator=generator, device=device)
    y1, x1 = cy - side // 2, cx - side // 2
    boxes = torch.stack([x1, y1, x1 + side, y1 + side], dim=-1)
    limit = torch.tensor([width, height, width, height], device=device)
    return torch.minimum(boxes.clamp_(min=0), limit)


def _apply_holes(x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Deterministic core: zero the holes ``boxes`` of ``x`` (``(B, C, H, W)``) on every channel.

    ``boxes`` holds clipped ``(x1, y1, x2, y2)`` rows: ``(n_holes, 4)`` for one set of holes
    shared by the batch, or ``(B, n_holes, 4)`` for one set per sample.
    """
    if boxes.ndim == 2:
        out = x.clone()
        for x1, y1, x2, y2 in boxes.tolist():
            out[..., y1:y2, x1:x2] = 0
        return out
    height, width = x.shape[-2:]
    boxes = boxes.to(x.device)
    rows = torch.arange(height, device=x.device)
    cols = torch.arange(width, device=x.device)
    # (B, n, H) and (B, n, W) membership; their "outer product" summed over holes is the mask.
    in_rows = (rows >= boxes[..., 1, None]) & (rows < boxes[..., 3, None])
    in_cols = (cols >= boxes[..., 0, None]) & (cols < boxes[..., 2, None])
    covered = torch.bmm(in_rows.transpose(1, 2).float(), in_cols.float()) > 0
    return x.masked_fill(covered.unsqueeze(1), 0)


def cutout(
    X: torch.Tensor,
    n_holes: int,
    length: int | float,
    *,
    per_sample: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Zero ``n_holes`` square holes in every channel of the images (Cutout).

    Each hole has side ``length`` pixels (an int) or ``int(length · min(H, W))`` pixels (a float
    in ``(0, 1)``); its centre is uniform over the pixels and the part outside the image is
    clipped, so holes near the border are smaller. Holes may overlap. By default one set of
    holes is drawn for the whole batch; ``per_sample=True`` draws a set for every image.

    .. math::
        \tilde X_{b,c,h,w} = X_{b,c,h,w}\,\bigl(1 - M_{h,w}\bigr), \qquad
        M = \mathbb 1\bigl[(h, w) \in \textstyle\bigcup_k \text{hole}_k\bigr]

    Args:
        X: images ``(B, C, H, W)`` or a single image ``(C, H, W)``, any dtype.
        n_holes: number of holes (``>= 1``).
        length: hole side, in pixels (int ``>= 1``) or as a fraction of ``min(H, W)`` (float).
        per_sample: draw independent holes for every image of the batch.
        generator: source of randomness for the hole centres.

    Returns:
        A new tensor like ``X`` (dtype, device, memory format) with the holes set to 0.

    Shape:
        - X: :math:`(B, C, H, W)` or :math:`(C, H, W)`
        - output: same as ``X``

    Example:
        >>> import torch, functional as F
        >>> x = torch.ones(2, 3, 8, 8)
        >>> out = F.cutout(x, n_holes=1, length=4, generator=torch.Generator().manual_seed(0))
        >>> bool((out == 0).any()), int((out[0, 0] == 0).sum()) <= 16
        (True, True)

    Reference: DeVries and Taylor, *Improved Regularization of Convolutional Neural Networks
    with Cutout*, 2017.
    """
    check_ndim(X, "X", (3, 4), "(B, C, H, W) or (C, H, W)")
    n_holes = check_int(n_holes, "n_holes", minimum=1)
    check_bool(per_sample, "per_sample")
    check_generator(generator)
    height, width = X.shape[-2:]
    side = _hole_side(length, height, width)
    if height == 0 or width == 0:
        return X.clone()
    if per_sample and X.ndim == 4:
        boxes = _draw_boxes((X.shape[0], n_holes), side, height, width, generator)
        if X.shape[0] == 0:
            return X.clone()
    else:
        boxes = _draw_boxes((n_holes,), side, height, width, generator)
    return _apply_holes(X, boxes)
