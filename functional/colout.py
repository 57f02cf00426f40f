"""ColOut: drop a random subset of the rows and columns of images.

Dropping a modest fraction of rows and columns barely changes what an image shows, makes it
smaller (cheaper to process) and adds variety. Introduced by MosaicML Composer.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from functional._args import check_generator, check_in_range, check_ndim, check_tensor
from functional._batch import array_as_pil, gather_rows_cols, random_device
from functional._numeric import sym_floor

__all__ = ["colout", "colout_batch"]

AnyImage = torch.Tensor | Image.Image
Sample = AnyImage | tuple[AnyImage, AnyImage]


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


def _size(img: AnyImage, name: str, ndims: tuple[int, ...], layout: str) -> tuple[int, int]:
    """``(H, W)`` of a PIL image or of a tensor ``(..., H, W)`` with an allowed rank."""
    if isinstance(img, Image.Image):
        return img.height, img.width
    check_tensor(img, name)
    check_ndim(img, name, ndims, layout)
    return img.shape[-2], img.shape[-1]


def _drop(img: AnyImage, rows: torch.Tensor, cols: torch.Tensor) -> AnyImage:
    return (
        _select_pil(img, rows, cols) if isinstance(img, Image.Image) else _select(img, rows, cols)
    )


def _resizes_target(
    resize_target: bool | str, size: tuple[int, int], target_size: tuple[int, int] | None
) -> bool:
    """Composer's rule: ``'auto'`` resizes a target of the input's spatial size; ``True``
    requires that size (other rows and columns would not correspond); ``False`` never."""
    if resize_target == "auto":
        return target_size == size
    if resize_target and target_size != size:
        raise ValueError(
            f"resize_target=True drops the input's rows and columns from the target, so the "
            f"target must have the input's spatial size {size}, got "
            f"{target_size or 'a tensor of fewer than 2 dimensions'}; pass "
            "resize_target=False (or 'auto') to leave a target of another size as it is"
        )
    return bool(resize_target)


def _colout_sample(
    sample: object,
    p_row: object,
    p_col: object,
    resize_target: object,
    generator: torch.Generator | None,
    *,
    name: str,
    ndims: tuple[int, ...],
    layout: str,
) -> Sample:
    """ColOut of one image or batch, or of an ``(input, target)`` pair with the same rows and
    columns dropped from both (the target as ``resize_target`` says)."""
    p_row, p_col = _check_fractions(p_row, p_col)
    check_generator(generator)
    if resize_target != "auto" and not isinstance(resize_target, bool):
        raise TypeError(f"resize_target must be True, False or 'auto', got {resize_target!r}")
    if not isinstance(sample, (tuple, list)):
        size = _size(sample, name, ndims, layout)  # type: ignore[arg-type]
        rows = _draw_kept(size[0], p_row, generator)
        return _drop(sample, rows, _draw_kept(size[1], p_col, generator))  # type: ignore[arg-type]
    if len(sample) != 2:
        raise ValueError(
            f"{name} must be an image or an (input, target) pair, got a sequence of "
            f"{len(sample)} items"
        )
    inp, target = sample
    size = _size(inp, name, ndims, layout)
    # class labels (B,) have no spatial size: 'auto' passes them through, True refuses them
    flat = isinstance(target, torch.Tensor) and target.ndim < 2
    target_size = None if flat else _size(target, "target", tuple(range(2, 9)), "(..., H, W)")
    resize = _resizes_target(resize_target, size, target_size)
    rows = _draw_kept(size[0], p_row, generator)
    cols = _draw_kept(size[1], p_col, generator)
    out = _drop(inp, rows, cols)
    return out, (_drop(target, rows, cols) if resize else target)


def colout(
    img: Sample,
    p_row: float = 0.15,
    p_col: float = 0.15,
    *,
    resize_target: bool | str = "auto",
    generator: torch.Generator | None = None,
) -> Sample:
    r"""Drop random rows and columns of one image (ColOut).

    Keeps :math:`H - \lfloor p_\text{row} H \rfloor` rows and
    :math:`W - \lfloor p_\text{col} W \rfloor` columns, chosen uniformly without replacement,
    in their original order.

    ``img`` may also be an ``(input, target)`` pair (Composer's form, e.g. an image and its
    segmentation mask): the same rows and columns are dropped from both when
    ``resize_target`` says so, and the pair comes back as a tuple. ``resize_target='auto'``
    (the default) drops them from a target of the input's spatial size and returns another
    target as it is; ``True`` requires that size (``ValueError`` otherwise: its rows and
    columns would not correspond); ``False`` leaves the target alone. A target is a PIL image
    or a tensor ``(..., H, W)`` (a mask ``(H, W)`` or ``(B, H, W)`` included).

    Args:
        img: a ``(C, H, W)`` (or ``(H, W)``) tensor, or a PIL image of any mode; or an
            ``(input, target)`` pair of them.
        p_row: fraction of rows to drop, in ``[0, 1)`` (Composer's default 0.15).
        p_col: fraction of columns to drop, in ``[0, 1)`` (Composer's default 0.15).
        resize_target: for a pair, ``'auto'``, ``True`` or ``False`` (see above).
        generator: source of randomness for the rows and columns kept.

    Returns:
        The smaller image, of the type of ``img`` (tensor: same dtype and device; PIL image:
        same mode); for a pair, the tuple ``(input, target)``.

    Shape:
        - img: :math:`(C, H, W)`
        - output: :math:`(C, H - \lfloor p_\text{row} H \rfloor, W - \lfloor p_\text{col} W \rfloor)`

    Example:
        >>> import torch, functional as F
        >>> F.colout(torch.rand(3, 20, 10), 0.15, 0.5).shape
        torch.Size([3, 17, 5])
        >>> image, mask = torch.rand(3, 20, 10), torch.randint(0, 4, (20, 10))
        >>> [t.shape for t in F.colout((image, mask), 0.15, 0.5)]
        [torch.Size([3, 17, 5]), torch.Size([17, 5])]
    """
    return _colout_sample(
        img,
        p_row,
        p_col,
        resize_target,
        generator,
        name="img",
        ndims=(2, 3),
        layout="(C, H, W) or (H, W)",
    )


def colout_batch(
    X: Sample,
    p_row: float = 0.15,
    p_col: float = 0.15,
    *,
    resize_target: bool | str = "auto",
    generator: torch.Generator | None = None,
) -> Sample:
    r"""Drop the same random rows and columns from every image of a batch (ColOut).

    Keeps :math:`H - \lfloor p_\text{row} H \rfloor` rows and
    :math:`W - \lfloor p_\text{col} W \rfloor` columns, chosen uniformly without replacement
    once for the whole batch, in their original order. ``X`` may also be an
    ``(input, target)`` pair, e.g. images and their segmentation masks, as in :func:`colout`:
    the same rows and columns are dropped from both as ``resize_target`` says.

    Per-step friendly: the kept rows and columns are a random permutation cut to size and
    sorted on the generator's device, then gathered on the data's device; no value is read on
    the host. The output shape depends on ``p_row`` and ``p_col``, so under ``torch.compile``
    a change of the number of rows or columns kept recompiles (by design); new random rows,
    and new fractions that keep the same counts, do not. ``generator`` cannot be traced by
    dynamo: inside a compiled step pass ``generator=None``.

    Args:
        X: images ``(B, C, H, W)`` (any leading dimensions ``(*, H, W)`` work), any dtype, or a
            PIL image; or an ``(input, target)`` pair of them, e.g. images and masks
            ``(B, H, W)``.
        p_row: fraction of rows to drop, in ``[0, 1)`` (Composer's default 0.15).
        p_col: fraction of columns to drop, in ``[0, 1)`` (Composer's default 0.15).
        resize_target: for a pair, ``'auto'``, ``True`` or ``False`` (see above).
        generator: source of randomness for the rows and columns kept.

    Returns:
        The smaller batch (dtype, device and memory format of ``X``); for a pair, the tuple
        ``(input, target)``.

    Shape:
        - X: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H - \lfloor p_\text{row} H \rfloor, W - \lfloor p_\text{col} W \rfloor)`

    Example:
        >>> import torch, functional as F
        >>> F.colout_batch(torch.rand(8, 3, 32, 32), 0.25, 0.25).shape
        torch.Size([8, 3, 24, 24])
        >>> images, masks = torch.rand(8, 3, 32, 32), torch.randint(0, 4, (8, 32, 32))
        >>> [t.shape for t in F.colout_batch((images, masks), 0.25, 0.25)]
        [torch.Size([8, 3, 24, 24]), torch.Size([8, 24, 24])]
    """
    return _colout_sample(
        X,
        p_row,
        p_col,
        resize_target,
        generator,
        name="X",
        ndims=tuple(range(2, 9)),
        layout="(B, C, H, W)",
    )
