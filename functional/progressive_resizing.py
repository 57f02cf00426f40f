"""Progressive resizing: train on smaller images early, growing to full size (fast.ai).

Popularised by fast.ai's DAWNBench ImageNet entries (Howard 2018); see also Touvron et al.,
`Fixing the train-test resolution discrepancy <https://arxiv.org/abs/1906.06423>`_ (2019).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from functional._checks import (
    cast_result,
    check_bool,
    check_generator,
    check_in_range,
    check_ndim,
    check_one_of,
    check_positive,
    check_same_batch,
    compute_dtype,
    random_device,
)

__all__ = ["progressive_resizing_scale", "resize_inputs"]


def progressive_resizing_scale(
    progress: float, initial_scale: float = 0.5, finetune_fraction: float = 0.2
) -> float:
    r"""The image scale at a point of training for progressive resizing.

    Starts at ``initial_scale``, grows linearly to 1 at ``progress = 1 - finetune_fraction`` and
    stays at 1 for the final ``finetune_fraction`` of training:

    .. math::
        s(t) = s_0 + (1 - s_0)\,\min\!\Bigl(1, \frac{t}{1 - f}\Bigr)

    Args:
        progress: fraction of training done, in ``[0, 1]``.
        initial_scale: scale at the start, in ``(0, 1]``.
        finetune_fraction: final fraction of training at full scale, in ``[0, 1]``.

    Returns:
        The scale factor, in ``[initial_scale, 1]``, non-decreasing in ``progress``.

    Example:
        >>> import functional as F
        >>> [F.progressive_resizing_scale(t) for t in (0.0, 0.4, 0.8, 1.0)]
        [0.5, 0.75, 1.0, 1.0]
    """
    progress = check_in_range(progress, "progress", 0.0, 1.0)
    initial_scale = check_in_range(initial_scale, "initial_scale", 0.0, 1.0, low_inclusive=False)
    finetune_fraction = check_in_range(finetune_fraction, "finetune_fraction", 0.0, 1.0)
    ramp_end = 1.0 - finetune_fraction
    if progress >= ramp_end:
        return 1.0
    return initial_scale + (1.0 - initial_scale) * (progress / ramp_end)


def _resize(t: torch.Tensor, scale: float, *, labels: bool = False) -> torch.Tensor:
    """Bilinear resize (integer images in float32, rounded back); nearest for integer labels.

    ``F.interpolate`` sizes its output ``floor(H·s)`` with the same float arithmetic as
    :func:`resize_inputs`, and samples at the requested scale, as the peers do.
    """
    squeeze = t.ndim == 3
    data = t.unsqueeze(1) if squeeze else t
    if labels and not t.is_floating_point():  # class maps: never invent in-between classes
        out = F.interpolate(
            data.float(), scale_factor=(scale, scale), mode="nearest", recompute_scale_factor=False
        ).to(t.dtype)
    else:
        out = F.interpolate(
            data.to(compute_dtype(t.dtype)),
            scale_factor=(scale, scale),
            mode="bilinear",
            align_corners=False,
            recompute_scale_factor=False,
        )
        out = cast_result(out, t.dtype)
    return out.squeeze(1) if squeeze else out


def _crop(t: torch.Tensor, top: int, left: int, size: tuple[int, int]) -> torch.Tensor:
    """Deterministic core of 'crop': a copy of the window at ``(top, left)``."""
    return t[..., top : top + size[0], left : left + size[1]].clone()


def resize_inputs(
    X: torch.Tensor,
    y: torch.Tensor,
    scale_factor: float,
    mode: str = "resize",
    resize_targets: bool = False,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Shrink a batch of images (and optionally dense targets) for progressive resizing.

    The output is :math:`\lfloor H s \rfloor \times \lfloor W s \rfloor`. ``'resize'``
    interpolates bilinearly (integer images in float32, rounded back; integer targets, e.g.
    segmentation masks, with nearest neighbour);
    ``'crop'`` takes one random window, uniform over the valid positions, for the whole batch,
    and the same window of the targets when ``resize_targets=True``. When the size does not
    change, ``X`` and ``y`` are returned as they are.

    Args:
        X: images ``(B, C, H, W)``.
        y: targets, returned as they are unless ``resize_targets`` is true; then a tensor
            ``(B, H, W)`` or ``(B, C', H, W)`` with the spatial size of ``X``.
        scale_factor: :math:`s` in ``(0, 1]``; for ``'resize'`` larger values upsample.
        mode: ``'resize'`` or ``'crop'``.
        resize_targets: also resize (or crop) ``y``.
        generator: source of randomness for the crop position.

    Returns:
        ``(X_sized, y_sized)``, dtype, device and memory format kept.

    Shape:
        - X: :math:`(B, C, H, W)` → :math:`(B, C, \lfloor Hs \rfloor, \lfloor Ws \rfloor)`
        - y (``resize_targets``): :math:`(B, [C',] H, W)` →
          :math:`(B, [C',] \lfloor Hs \rfloor, \lfloor Ws \rfloor)`

    Example:
        >>> import torch, functional as F
        >>> X, y = torch.rand(2, 3, 32, 30), torch.randint(0, 5, (2, 32, 30))
        >>> Xs, ys = F.resize_inputs(X, y, 0.5, mode="crop", resize_targets=True)
        >>> Xs.shape, ys.shape
        (torch.Size([2, 3, 16, 15]), torch.Size([2, 16, 15]))
    """
    check_ndim(X, "X", 4, "(B, C, H, W)")
    check_one_of(mode, "mode", ("resize", "crop"))
    check_bool(resize_targets, "resize_targets")
    check_generator(generator)
    if mode == "crop":
        scale = check_in_range(scale_factor, "scale_factor", 0.0, 1.0, low_inclusive=False)
    else:
        scale = check_positive(scale_factor, "scale_factor")
    height, width = X.shape[-2:]
    size = (math.floor(height * scale), math.floor(width * scale))
    if min(size) < 1:
        raise ValueError(
            f"scale_factor={scale_factor} shrinks the {height}x{width} images to nothing "
            f"({size[0]}x{size[1]})"
        )
    if resize_targets:
        check_ndim(y, "y", (3, 4), "(B, H, W) or (B, C, H, W)")
        check_same_batch(X, y, "X", "y")
        if tuple(y.shape[-2:]) != (height, width):
            raise ValueError(
                f"y must have the spatial size of X ({height}, {width}) to be resized with it, "
                f"got shape {tuple(y.shape)}"
            )
    if size == (height, width):
        return X, y
    if mode == "resize":
        X_sized = _resize(X, scale)
        return X_sized, (_resize(y, scale, labels=True) if resize_targets else y)
    device = random_device(generator)
    top = int(torch.randint(0, height - size[0] + 1, (), generator=generator, device=device))
    left = int(torch.randint(0, width - size[1] + 1, (), generator=generator, device=device))
    X_sized = _crop(X, top, left, size)
    return X_sized, (_crop(y, top, left, size) if resize_targets else y)
