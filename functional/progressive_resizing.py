"""Progressive resizing: train on smaller images early, growing to full size (fast.ai).

Popularised by fast.ai's DAWNBench ImageNet entries (Howard 2018); see also Touvron et al.,
`Fixing the train-test resolution discrepancy <https://arxiv.org/abs/1906.06423>`_ (2019).
"""

from __future__ import annotations

import torch
from torch.nn import functional as nnf

from functional._args import (
    check_bool,
    check_generator,
    check_in_range,
    check_int,
    check_ndim,
    check_one_of,
    check_positive,
    check_same_batch,
)
from functional._batch import gather_rows_cols, memory_format_of, random_device
from functional._numeric import cast_result, compute_dtype, int64_range, scalar_tensor, sym_floor

__all__ = ["progressive_resizing_scale", "resize_inputs"]


def progressive_resizing_scale(
    progress: float,
    initial_scale: float = 0.5,
    finetune_fraction: float = 0.2,
    *,
    delay_fraction: float = 0.0,
    size_increment: int | None = None,
    width: int | None = None,
) -> float:
    r"""The image scale at a point of training for progressive resizing.

    Stays at ``initial_scale`` for the first ``delay_fraction`` of training, grows linearly to
    1 at ``progress = 1 - finetune_fraction`` and stays at 1 for the final
    ``finetune_fraction`` (with :math:`d` = ``delay_fraction``, :math:`f` =
    ``finetune_fraction``):

    .. math::
        s(t) = s_0 + (1 - s_0)\,\operatorname{clamp}\!\Bigl(\frac{t - d}{1 - f - d}, 0, 1\Bigr)

    With ``size_increment`` and the images' ``width`` (Composer's schedule), the scale is then
    pinned so that the new width is a multiple of ``size_increment``:
    ``round(width · s / size_increment) · size_increment / width``, at least one increment and
    at most 1.

    Args:
        progress: fraction of training done, in ``[0, 1]``.
        initial_scale: scale at the start, in ``(0, 1]``.
        finetune_fraction: final fraction of training at full scale, in ``[0, 1]``.
        delay_fraction: first fraction of training at ``initial_scale``, in ``[0, 1]``, with
            ``delay_fraction + finetune_fraction <= 1`` (Composer's default is 0.5; 0 here keeps
            the schedule of this function before the option existed).
        size_increment: round the width to a multiple of this many pixels (``>= 1``); needs
            ``width``.
        width: the full-size image width in pixels (``>= 1``), with ``size_increment``.

    Returns:
        The scale factor, in ``[initial_scale, 1]`` (pinned: in ``(0, 1]``), non-decreasing in
        ``progress``.

    Example:
        >>> import functional as F
        >>> [F.progressive_resizing_scale(t) for t in (0.0, 0.4, 0.8, 1.0)]
        [0.5, 0.75, 1.0, 1.0]
        >>> [F.progressive_resizing_scale(t, delay_fraction=0.5, size_increment=8, width=224)
        ...  for t in (0.0, 0.6, 0.8)]  # Composer's schedule: widths 112, 152, 224
        [0.5, 0.6785714285714286, 1.0]
    """
    progress = check_in_range(progress, "progress", 0.0, 1.0)
    initial_scale = check_in_range(initial_scale, "initial_scale", 0.0, 1.0, low_inclusive=False)
    finetune_fraction = check_in_range(finetune_fraction, "finetune_fraction", 0.0, 1.0)
    delay_fraction = check_in_range(delay_fraction, "delay_fraction", 0.0, 1.0)
    if delay_fraction + finetune_fraction > 1.0:
        raise ValueError(
            "delay_fraction + finetune_fraction must be <= 1 (the ramp lies between them), got "
            f"delay_fraction={delay_fraction} and finetune_fraction={finetune_fraction}"
        )
    ramp_end = 1.0 - finetune_fraction
    if progress >= ramp_end:
        scale = 1.0
    elif progress <= delay_fraction:
        scale = initial_scale
    else:
        ramp = (progress - delay_fraction) / (ramp_end - delay_fraction)
        scale = initial_scale + (1.0 - initial_scale) * ramp
    return _pin_to_increment(scale, size_increment, width)


def _pin_to_increment(scale: float, size_increment: object, width: object) -> float:
    """Composer's pinning: the scale whose width is the nearest multiple of ``size_increment``
    (at least one increment, at most the full width); ``scale`` itself without an increment."""
    if size_increment is None and width is None:
        return scale
    if size_increment is None or width is None:
        raise ValueError(
            "size_increment and width go together (the width is what gets rounded to a "
            f"multiple of size_increment), got size_increment={size_increment!r}, width={width!r}"
        )
    step = check_int(size_increment, "size_increment", minimum=1)
    full = check_int(width, "width", minimum=1)
    pinned = max(step, round(full * scale / step) * step)
    return min(1.0, pinned / full)


# The largest output plane resize_inputs makes: torch's 32-bit-indexed interpolation kernels
# (and any sane training image) stay below it; beyond it a typo such as scale_factor=1e6 would
# otherwise end in an allocator failure or an int64 overflow deep inside torch.
MAX_PLANE = 2**31 - 1


def _source_index(
    n_in: int, n_out: int, scale: torch.Tensor, *, nearest: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source rows (``i0``, ``i1``) and the weight of ``i1`` for each of ``n_out`` outputs.

    The sampling of ``torch.nn.functional.interpolate(..., scale_factor=s,
    recompute_scale_factor=False)``: bilinear ``src = (i + 1/2)/s - 1/2`` clamped at 0
    (align_corners=False), nearest ``floor(i/s)``; both clipped to the input.
    """
    i = torch.arange(n_out, device=scale.device, dtype=scale.dtype)
    if nearest:
        i0 = torch.floor(i / scale).long().clamp_max(n_in - 1)
        return i0, i0, torch.zeros_like(i)
    src = ((i + 0.5) / scale - 0.5).clamp_min(0)
    i0 = torch.floor(src).long().clamp_max(n_in - 1)
    i1 = (i0 + 1).clamp_max(n_in - 1)
    return i0, i1, src - i0.to(scale.dtype)


def _resize_by_index(
    data: torch.Tensor, scale: float, size: tuple[int, int], *, nearest: bool
) -> torch.Tensor:
    """Bilinear (or nearest) resize as gathers and lerps with ``scale`` a tensor.

    The compiled path of :func:`_resize`: ``torch.nn.functional.interpolate`` specialises the
    graph on the value of the scale (a recompile per value), this does not. ``data`` is floating
    ``(B, C, H, W)``.
    """
    compute = torch.float64 if data.dtype == torch.float64 else torch.float32
    scale_t = scalar_tensor(scale, dtype=compute, device=data.device)
    r0, r1, rw = _source_index(data.shape[-2], size[0], scale_t, nearest=nearest)
    c0, c1, cw = _source_index(data.shape[-1], size[1], scale_t, nearest=nearest)
    if nearest:
        return gather_rows_cols(data, r0, c0)
    x = data.to(compute)
    rows = x.index_select(-2, r0).lerp_(x.index_select(-2, r1), rw[:, None])
    out = rows.index_select(-1, c0).lerp_(rows.index_select(-1, c1), cw)
    return out.to(data.dtype).contiguous(memory_format=memory_format_of(data))


def _resize(
    t: torch.Tensor, scale: float, size: tuple[int, int], *, labels: bool = False
) -> torch.Tensor:
    """Bilinear resize (integer images in float32/float64, rounded back); nearest for integer
    labels.

    Eagerly ``torch.nn.functional.interpolate`` (the fastest kernel); under ``torch.compile`` the
    same sampling written as gathers (see :func:`_resize_by_index`), so a new scale with the same
    output size does not recompile.
    """
    squeeze = t.ndim == 3
    data = t.unsqueeze(1) if squeeze else t
    nearest = labels and not t.is_floating_point()  # class maps: never invent in-between classes
    if data.numel() == 0:  # nnf.interpolate refuses a batch with no samples and no channels
        out = data.new_empty((*data.shape[:-2], *size))
        return out.squeeze(1) if squeeze else out
    if torch.compiler.is_compiling():
        source = data if nearest else data.to(compute_dtype(t.dtype))
        out = _resize_by_index(source, scale, size, nearest=nearest)
    elif nearest:
        out = nnf.interpolate(
            data.float(), scale_factor=(scale, scale), mode="nearest", recompute_scale_factor=False
        )
    else:
        out = nnf.interpolate(
            data.to(compute_dtype(t.dtype)),
            scale_factor=(scale, scale),
            mode="bilinear",
            align_corners=False,
            recompute_scale_factor=False,
        )
    out = out.to(t.dtype) if nearest else cast_result(out, t.dtype, within=int64_range(t))
    return out.squeeze(1) if squeeze else out


def _crop(
    t: torch.Tensor, top: torch.Tensor, left: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    """Deterministic core of 'crop': a copy of the window at ``(top, left)`` (0-d int tensors).

    ``unfold`` views every ``h x w`` window of the image (no copy); indexing that view with the
    offsets as 1-element tensors copies exactly the chosen window, so the offsets never reach
    the host and the output shape is fixed by ``size``. (A gather of ``offset + arange`` over
    both dims is 3x slower on the CPU.) A channels_last input gives a channels_last output.
    """
    h, w = size
    top = top.to(t.device, non_blocking=True).view(1)
    left = left.to(t.device, non_blocking=True).view(1)
    if memory_format_of(t) == torch.channels_last:
        windows = t.permute(0, 2, 3, 1).unfold(1, h, 1).unfold(2, w, 1)  # (B, H', W', C, h, w)
        window = windows.permute(0, 1, 2, 4, 5, 3)[:, top, left]  # (B, 1, h, w, C)
        return window.squeeze(1).permute(0, 3, 1, 2)
    windows = t.unfold(-2, h, 1).unfold(-2, w, 1)  # (..., H', W', h, w)
    return windows[..., top, left, :, :].squeeze(-3)


def _target_size(
    X: torch.Tensor, y: torch.Tensor, scale: float, scale_factor: object
) -> tuple[int, int]:
    """The resized size ``(floor(H_y·s), floor(W_y·s))`` of targets ``(B, [C',] H_y, W_y)``,
    which may have another spatial size than the inputs (a mask at half resolution)."""
    check_ndim(y, "y", (3, 4), "(B, H, W) or (B, C, H, W)")
    check_same_batch(X, y, "X", "y")
    y_size = (sym_floor(y.shape[-2] * scale), sym_floor(y.shape[-1] * scale))
    if min(y_size) < 1:
        raise ValueError(
            f"scale_factor={scale_factor} shrinks the {y.shape[-2]}x{y.shape[-1]} targets y "
            f"to nothing ({y_size[0]}x{y_size[1]})"
        )
    return y_size


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

    Targets may have another spatial size than the images (a 16x16 mask for 32x32 images):
    they are resized by the same factor, to :math:`\lfloor H_y s \rfloor \times
    \lfloor W_y s \rfloor`, and ``'crop'`` takes the corresponding window of them, its corner
    at :math:`\lfloor \text{top} \cdot H_y / H \rfloor` (kept inside the target), as
    Composer does.

    Per-step friendly: the crop offsets are drawn as tensors and applied as a gather of
    ``offset + arange`` (no value read on the host). The output shape is part of a compiled
    graph, so under ``torch.compile`` a scale that changes :math:`\lfloor Hs \rfloor` or
    :math:`\lfloor Ws \rfloor` recompiles (by design); a new scale with the same output size
    and new crop offsets do not (the compiled 'resize' samples with gathers, equal to the eager
    ``torch.nn.functional.interpolate`` within rounding). ``generator`` cannot be traced by
    dynamo: inside a compiled step pass ``generator=None``.

    Args:
        X: images ``(B, C, H, W)``.
        y: targets, returned as they are unless ``resize_targets`` is true; then a tensor
            ``(B, H_y, W_y)`` or ``(B, C', H_y, W_y)``, of the spatial size of ``X`` or another.
        scale_factor: :math:`s` in ``(0, 1]``; for ``'resize'`` larger values upsample, up to
            an output plane :math:`\lfloor Hs \rfloor \lfloor Ws \rfloor` of at most
            ``2**31 - 1`` pixels (larger is refused at entry: it would not fit torch's
            interpolation kernels, nor, for any batch, memory).
        mode: ``'resize'`` or ``'crop'``.
        resize_targets: also resize (or crop) ``y``.
        generator: source of randomness for the crop position.

    Returns:
        ``(X_sized, y_sized)``, dtype, device and memory format kept.

    Shape:
        - X: :math:`(B, C, H, W)` → :math:`(B, C, \lfloor Hs \rfloor, \lfloor Ws \rfloor)`
        - y (``resize_targets``): :math:`(B, [C',] H_y, W_y)` →
          :math:`(B, [C',] \lfloor H_y s \rfloor, \lfloor W_y s \rfloor)`

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
    if mode == "resize" and X.is_complex():
        raise TypeError(f"X must be a real tensor for mode='resize' (bilinear), got {X.dtype}")
    height, width = X.shape[-2:]
    if mode == "resize" and height * width and (height * scale) * (width * scale) > 2 * MAX_PLANE:
        raise ValueError(  # checked on the floats first: floor() of 1e300 would be a huge int
            f"scale_factor={scale_factor} makes an output plane of more than {MAX_PLANE} pixels "
            f"from {height}x{width} images"
        )
    size = (sym_floor(height * scale), sym_floor(width * scale))
    if min(size) < 1:
        raise ValueError(
            f"scale_factor={scale_factor} shrinks the {height}x{width} images to nothing "
            f"({size[0]}x{size[1]})"
        )
    if size[0] * size[1] > MAX_PLANE:
        raise ValueError(
            f"scale_factor={scale_factor} makes {size[0]}x{size[1]} output planes from "
            f"{height}x{width} images; at most {MAX_PLANE} pixels per plane are supported"
        )
    y_size = _target_size(X, y, scale, scale_factor) if resize_targets else size
    if size == (height, width):
        return X, y
    if mode == "resize":
        X_sized = _resize(X, scale, size)
        return X_sized, (_resize(y, scale, y_size, labels=True) if resize_targets else y)
    device = random_device(generator)
    top = torch.randint(0, height - size[0] + 1, (), generator=generator, device=device)
    left = torch.randint(0, width - size[1] + 1, (), generator=generator, device=device)
    X_sized = _crop(X, top, left, size)
    if not resize_targets:
        return X_sized, y
    # the same region of a target of another size: the window scaled, kept inside the target
    y_top = torch.clamp_max(top * y.shape[-2] // height, y.shape[-2] - y_size[0])
    y_left = torch.clamp_max(left * y.shape[-1] // width, y.shape[-1] - y_size[1])
    return X_sized, _crop(y, y_top, y_left, y_size)
