"""ColOut: drop a random subset of the rows and columns of images.

Dropping a modest fraction of rows and columns barely changes what an image shows, makes it
smaller (cheaper to process) and adds variety. Introduced by MosaicML Composer.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from functional._args import check_generator, check_in_range, check_ndim
from functional._batch import array_as_pil, gather_rows_cols, random_device
from functional._numeric import sym_floor

__all__ = ["colout", "colout_batch"]


def _draw_kept(size: int, p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Sorted indices of the ``size - int(p·size)`` positions kept, chosen uniformly."""
    keep = size - sym_floor(p * size)
    order = torch.randperm(size, generator=generator, device=random_device(generator))
    return order[:keep].sort().values


def _check_fractions(p_row: object, p_col: object) -> tuple[float, float]:
    p_row = check_in_range(p_row, "p_row", 0.0, 1.0, high_inclusive=False)
    p_col = check_in_range(p_col, "p_col", 0.0, 1.0, high_inclusive=False)
    return p_row, p_col


def _select(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Deterministic core: keep ``rows`` (of dim -2) and ``cols`` (of dim -1) of ``x``, in order.

    One gather over both dims; a channels_last input gives a channels_last output.
    """
    return gather_rows_cols(x, rows, cols)


def _select_pil(img: Image.Image, rows: torch.Tensor, cols: torch.Tensor) -> Image.Image:
    """Deterministic core for PIL images: the same selection, in the image's own mode."""
    array = np.asarray(img)
    return array_as_pil(array[rows.numpy()][:, cols.numpy()], img)


def colout(
    img: torch.Tensor | Image.Image,
    p_row: float,
    p_col: float,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor | Image.Image:
    r"""Drop random rows and columns of one image (ColOut).

    Keeps :math:`H - \lfloor p_\text{row} H \rfloor` rows and
    :math:`W - \lfloor p_\text{col} W \rfloor` columns, chosen uniformly without replacement,
    in their original order.

    Args:
        img: a ``(C, H, W)`` (or ``(H, W)``) tensor, or a PIL image of any mode.
        p_row: fraction of rows to drop, in ``[0, 1)``.
        p_col: fraction of columns to drop, in ``[0, 1)``.
        generator: source of randomness for the rows and columns kept.

    Returns:
        The smaller image, of the type of ``img`` (tensor: same dtype and device; PIL image:
        same mode).

    Shape:
        - img: :math:`(C, H, W)`
        - output: :math:`(C, H - \lfloor p_\text{row} H \rfloor, W - \lfloor p_\text{col} W \rfloor)`

    Example:
        >>> import torch, functional as F
        >>> F.colout(torch.rand(3, 20, 10), 0.15, 0.5).shape
        torch.Size([3, 17, 5])
    """
    p_row, p_col = _check_fractions(p_row, p_col)
    check_generator(generator)
    if isinstance(img, Image.Image):
        rows = _draw_kept(img.height, p_row, generator)
        cols = _draw_kept(img.width, p_col, generator)
        return _select_pil(img, rows, cols)
    check_ndim(img, "img", (2, 3), "(C, H, W) or (H, W)")
    rows = _draw_kept(img.shape[-2], p_row, generator)
    cols = _draw_kept(img.shape[-1], p_col, generator)
    return _select(img, rows, cols)


def colout_batch(
    X: torch.Tensor,
    p_row: float,
    p_col: float,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Drop the same random rows and columns from every image of a batch (ColOut).

    Keeps :math:`H - \lfloor p_\text{row} H \rfloor` rows and
    :math:`W - \lfloor p_\text{col} W \rfloor` columns, chosen uniformly without replacement
    once for the whole batch, in their original order.

    Per-step friendly: the kept rows and columns are a random permutation cut to size and
    sorted on the generator's device, then gathered on the data's device; no value is read on
    the host. The output shape depends on ``p_row`` and ``p_col``, so under ``torch.compile``
    a change of the number of rows or columns kept recompiles (by design); new random rows,
    and new fractions that keep the same counts, do not. ``generator`` cannot be traced by
    dynamo: inside a compiled step pass ``generator=None``.

    Args:
        X: images ``(B, C, H, W)`` (any leading dimensions ``(*, H, W)`` work), any dtype.
        p_row: fraction of rows to drop, in ``[0, 1)``.
        p_col: fraction of columns to drop, in ``[0, 1)``.
        generator: source of randomness for the rows and columns kept.

    Returns:
        The smaller batch (dtype, device and memory format of ``X``).

    Shape:
        - X: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H - \lfloor p_\text{row} H \rfloor, W - \lfloor p_\text{col} W \rfloor)`

    Example:
        >>> import torch, functional as F
        >>> F.colout_batch(torch.rand(8, 3, 32, 32), 0.25, 0.25).shape
        torch.Size([8, 3, 24, 24])
    """
    check_ndim(X, "X", tuple(range(2, 9)), "(B, C, H, W)")
    p_row, p_col = _check_fractions(p_row, p_col)
    check_generator(generator)
    rows = _draw_kept(X.shape[-2], p_row, generator)
    cols = _draw_kept(X.shape[-1], p_col, generator)
    return _select(X, rows, cols)
