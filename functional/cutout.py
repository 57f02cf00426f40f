"""Cutout: zero out square holes of the input images (DeVries and Taylor 2017).

Paper: `Improved Regularization of Convolutional Neural Networks with Cutout
<https://arxiv.org/abs/1708.04552>`_.
"""

from __future__ import annotations

import numbers

import torch

from functional._args import check_bool, check_generator, check_int, check_ndim
from functional._batch import random_device
from functional._numeric import sym_floor

__all__ = ["cutout"]


def _hole_side(length: object, height: int, width: int) -> int:
    if isinstance(length, bool) or not isinstance(length, numbers.Real):
        raise TypeError(f"length must be an int (pixels) or a float in (0, 1), got {length!r}")
    if isinstance(length, numbers.Integral):
        side = int(length)
        if side < 1:
            raise ValueError(f"length in pixels must be >= 1, got {length}")
        if height > 0 and width > 0 and side > max(height, width):
            # Such a hole covers most of every image, or all of it from 2·max(H, W): almost
            # always a side meant for larger images (or pixels meant as a fraction).
            raise ValueError(
                f"length={length} pixels is larger than the {height}x{width} images, so every "
                "hole would blank most or all of its image; pass a side of at most "
                f"max(H, W)={max(height, width)} pixels, or a float in (0, 1) for a fraction "
                "of min(H, W) that follows the image size"
            )
        return side
    fraction = float(length)
    if not 0.0 < fraction < 1.0:
        raise ValueError(
            "length as a float is a fraction of min(H, W) and must be in (0, 1) (pass an int "
            f"for a side in pixels), got {length}"
        )
    return sym_floor(fraction * min(height, width))


def _draw_boxes(
    shape: tuple[int, ...], side: int, height: int, width: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Holes ``(..., 4)`` as clipped ``(x1, y1, x2, y2)``, centres uniform over the pixels.

    Drawn on the generator's device; nothing is read on the host.
    """
    device = random_device(generator)
    cy = torch.randint(0, height, shape, generator=generator, device=device)
    cx = torch.randint(0, width, shape, generator=generator, device=device)
    y1, x1 = cy - side // 2, cx - side // 2
    boxes = torch.stack([x1, y1, x1 + side, y1 + side], dim=-1)
    # built on the CPU and moved without waiting: torch.tensor(..., device=cuda) would sync
    limit = torch.tensor([width, height, width, height]).to(device, non_blocking=True)
    return torch.minimum(boxes.clamp_(min=0), limit)


def _hole_mask(boxes: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
    """``(..., H, W)`` bool mask of the union of the holes ``boxes`` (``(..., n_holes, 4)``).

    Row and column membership come from comparisons with ``arange``; their outer product,
    summed over the holes (a small matmul), is the union. No host read, no data-dependent
    shape.
    """
    boxes = boxes.to(device, non_blocking=True)
    rows = torch.arange(height, device=device)
    cols = torch.arange(width, device=device)
    in_rows = (rows >= boxes[..., 1, None]) & (rows < boxes[..., 3, None])  # (..., n, H)
    in_cols = (cols >= boxes[..., 0, None]) & (cols < boxes[..., 2, None])  # (..., n, W)
    return torch.matmul(in_rows.transpose(-1, -2).float(), in_cols.float()) > 0


def _apply_holes(x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Deterministic core: zero the holes ``boxes`` of ``x`` (``(B, C, H, W)``) on every channel.

    ``boxes`` holds clipped ``(x1, y1, x2, y2)`` rows: ``(n_holes, 4)`` for one set of holes
    shared by the batch, or ``(B, n_holes, 4)`` for one set per sample. The memory format of
    ``x`` is kept.
    """
    mask = _hole_mask(boxes, x.shape[-2], x.shape[-1], x.device)
    if boxes.ndim == 3:
        mask = mask.unsqueeze(1)  # (B, 1, H, W): the same holes on every channel
    return torch.where(mask, torch.zeros((), dtype=x.dtype, device=x.device), x)


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

    Per-step friendly: the holes are drawn as tensors and applied as a mask from comparisons
    with ``arange`` (no value read on the host, no data-dependent shape); under
    ``torch.compile(fullgraph=True)`` new holes and a new fractional ``length`` with the same
    side in pixels do not recompile. ``n_holes``, an int ``length`` and the input's shape are
    part of the graph. ``generator`` cannot be traced by dynamo: inside a compiled step pass
    ``generator=None`` (torch's global RNG).

    .. math::
        \tilde X_{b,c,h,w} = X_{b,c,h,w}\,\bigl(1 - M_{h,w}\bigr), \qquad
        M = \mathbb 1\bigl[(h, w) \in \textstyle\bigcup_k \text{hole}_k\bigr]

    Args:
        X: images ``(B, C, H, W)`` or a single image ``(C, H, W)``, any dtype.
        n_holes: number of holes (``>= 1``).
        length: hole side, in pixels (an int from 1 to ``max(H, W)``) or as a fraction of
            ``min(H, W)`` (a float in ``(0, 1)``).
        per_sample: draw independent holes for every image of the batch.
        generator: source of randomness for the hole centres.

    Returns:
        A new tensor like ``X`` (dtype, device, memory format) with the holes set to 0.

    Raises:
        ValueError: when ``length`` in pixels exceeds ``max(H, W)``: such holes blank most or
            all of every image (from ``2 · max(H, W)`` on, all of it), which is almost always a
            side meant for larger images; the message says how to pass a fraction instead.

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
