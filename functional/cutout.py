"""Cutout: zero out square holes of the input images (DeVries and Taylor 2017).

Paper: `Improved Regularization of Convolutional Neural Networks with Cutout
<https://arxiv.org/abs/1708.04552>`_.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from PIL import Image

from functional._args import check_bool, check_generator, check_int, check_ndim
from functional._batch import array_as_pil, random_device
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
    shape: tuple[int, ...],
    side: int,
    height: int,
    width: int,
    generator: torch.Generator | None,
    *,
    uniform: bool = False,
) -> torch.Tensor:
    """Holes ``(..., 4)`` as clipped ``(x1, y1, x2, y2)``, centres uniform over the pixels.

    ``uniform=True`` draws the top-left corner uniformly from ``[1 - side, H - 1]`` (and
    likewise along the width) instead: every pixel is then covered by exactly ``side`` of the
    ``H + side - 1`` positions, so all pixels are equally likely to be cut, and no hole falls
    wholly outside. Drawn on the generator's device; nothing is read on the host.
    """
    device = random_device(generator)
    if uniform:
        y1 = torch.randint(1 - side, height, shape, generator=generator, device=device)
        x1 = torch.randint(1 - side, width, shape, generator=generator, device=device)
    else:
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


def _cutout_pil(
    img: Image.Image, n_holes: int, length: object, uniform: bool, generator: torch.Generator | None
) -> Image.Image:
    """Cutout of one PIL image, in its own mode (holes set to 0 in every band)."""
    side = _hole_side(length, img.height, img.width)
    if img.height == 0 or img.width == 0:
        return img.copy()
    boxes = _draw_boxes((n_holes,), side, img.height, img.width, generator, uniform=uniform)
    mask = _hole_mask(boxes.cpu(), img.height, img.width, torch.device("cpu")).numpy()
    array = np.array(img)
    array[mask] = 0
    return array_as_pil(array, img)


def cutout(
    X: torch.Tensor | Image.Image,
    n_holes: int = 1,
    length: int | float = 0.5,
    *,
    per_sample: bool = False,
    uniform_sampling: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor | Image.Image:
    r"""Zero ``n_holes`` square holes in every channel of the images (Cutout).

    Each hole has side ``length`` pixels (an int) or ``int(length · min(H, W))`` pixels (a float
    in ``(0, 1)``); its centre is uniform over the pixels and the part outside the image is
    clipped, so holes near the border are smaller. Holes may overlap. By default one set of
    holes is drawn for the whole batch; ``per_sample=True`` draws a set for every image.

    ``uniform_sampling=True`` (Composer's option) draws each hole so that every pixel is
    equally likely to be covered: the hole's top-left corner is uniform over the
    ``H + side - 1`` rows (and ``W + side - 1`` columns) from which it still overlaps the
    image, and the hole is clipped at the border. The default, a centre uniform over the
    pixels, covers the border less often (the paper's sampling).

    ``X`` may also be a PIL image (any mode): the holes are set to 0 in every band and a PIL
    image of the same mode and size comes back, as Composer's ``cutout_batch`` does.

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
        X: images ``(B, C, H, W)``, a single image ``(C, H, W)``, any dtype, or a PIL image.
        n_holes: number of holes (``>= 1``).
        length: hole side, in pixels (an int from 1 to ``max(H, W)``) or as a fraction of
            ``min(H, W)`` (a float in ``(0, 1)``; Composer's default 0.5).
        per_sample: draw independent holes for every image of the batch.
        uniform_sampling: draw the holes so that every pixel is equally likely to be covered.
        generator: source of randomness for the hole centres.

    Returns:
        A new tensor like ``X`` (dtype, device, memory format) with the holes set to 0, or a
        new PIL image of ``X``'s mode and size.

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
        >>> from PIL import Image
        >>> F.cutout(Image.new("RGB", (8, 6), (9, 9, 9)), 1, 4, uniform_sampling=True).size
        (8, 6)

    Reference: DeVries and Taylor, *Improved Regularization of Convolutional Neural Networks
    with Cutout*, 2017.
    """
    n_holes = check_int(n_holes, "n_holes", minimum=1)
    check_bool(per_sample, "per_sample")
    uniform = bool(check_bool(uniform_sampling, "uniform_sampling"))
    check_generator(generator)
    if isinstance(X, Image.Image):
        return _cutout_pil(X, n_holes, length, uniform, generator)
    check_ndim(X, "X", (3, 4), "(B, C, H, W) or (C, H, W), or a PIL image")
    height, width = X.shape[-2:]
    side = _hole_side(length, height, width)
    if height == 0 or width == 0:
        return X.clone()
    if per_sample and X.ndim == 4:
        boxes = _draw_boxes((X.shape[0], n_holes), side, height, width, generator, uniform=uniform)
        if X.shape[0] == 0:
            return X.clone()
    else:
        boxes = _draw_boxes((n_holes,), side, height, width, generator, uniform=uniform)
    return _apply_holes(X, boxes)
