"""BlurPool: anti-aliased downsampling (Zhang 2019).

The ops section (``blur_2d``, ``blurmax_pool2d``) holds the stateless kernels; the layers and the
``apply_blurpool`` transform follow below it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from functional._checks import cast_result, check_ndim, check_pair, check_tensor, compute_dtype

__all__ = ["blur_2d", "blurmax_pool2d"]

# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------

Taps = tuple[float, ...]

# The default low-pass filter [1 2 1]ᵀ[1 2 1] / 16 as a pair of 1-D taps.
_DEFAULT_TAPS: Taps = (0.25, 0.5, 0.25)

# Bytes of input planes processed per step of the CPU kernel: small enough that the column
# pass's result is still in cache (L3) when the row pass reads it, large enough to keep the
# number of multi-threaded ops low (each one waits for all its threads, which costs dearly on
# a machine whose cores are shared with other busy processes).
_CHUNK_BYTES = 16 << 20


def _check_filter(filter: object, channels: int) -> torch.Tensor:
    """The filter as ``(1 or C, 1, kH, kW)``."""
    filt = check_tensor(filter, "filter")
    if filt.is_complex() or filt.dtype == torch.bool:
        raise TypeError(f"filter must be a real tensor, got dtype {filt.dtype}")
    if filt.ndim == 2:
        filt = filt.view(1, 1, *filt.shape)
    elif filt.ndim != 4 or filt.shape[1] != 1 or filt.shape[0] not in (1, channels):
        raise ValueError(
            f"filter must have shape (kH, kW) or (C, 1, kH, kW) with C = {channels} input "
            f"channels, got shape {tuple(filt.shape)}"
        )
    if filt.shape[-1] == 0 or filt.shape[-2] == 0:
        raise ValueError(f"filter must not be empty, got shape {tuple(filt.shape)}")
    return filt


def _separable_taps(filt: torch.Tensor) -> tuple[Taps, Taps] | None:
    """``(column taps, row taps)`` when ``filt`` is the same rank-1 kernel for every channel.

    Only used for CPU filters that do not require grad: reading the values is then cheap.
    """
    if filt.shape[0] > 1 and not bool((filt == filt[:1]).all()):
        return None
    kernel = filt[0, 0].detach().to(torch.float64)
    flat = int(kernel.abs().argmax())
    i, j = divmod(flat, kernel.shape[1])
    pivot = float(kernel[i, j])
    if pivot == 0.0:
        return (0.0,) * kernel.shape[0], (0.0,) * kernel.shape[1]
    col, row = kernel[:, j], kernel[i, :] / pivot
    eps = torch.finfo(filt.dtype).eps if filt.is_floating_point() else 0.0
    if float((torch.outer(col, row) - kernel).abs().max()) > 8 * eps * abs(pivot):
        return None
    return tuple(col.tolist()), tuple(row.tolist())


def _shift_add(src: torch.Tensor, dim: int, taps: Taps, pad: int, stride: int, out: torch.Tensor):
    """``out[i] = Σ_j taps[j] · src[i·stride + j - pad]`` along ``dim`` (zeros outside ``src``).

    ``out`` must have ``(n_in - 1) // stride + 1`` entries along ``dim``, so the tap ``j = pad``
    reads a valid entry for every output and initialises it; the others add where in range.
    """
    n_in, n_out = src.shape[dim], out.shape[dim]

    def along(t: torch.Tensor, index: slice) -> torch.Tensor:
        key = [slice(None)] * t.ndim
        key[dim] = index
        return t[tuple(key)]

    torch.mul(along(src, slice(0, (n_out - 1) * stride + 1, stride)), taps[pad], out=out)
    for j, tap in enumerate(taps):
        offset = j - pad
        if offset == 0 or tap == 0.0:
            continue
        first = max(0, -(offset // stride))  # ceil(-offset / stride)
        last = min(n_out - 1, (n_in - 1 - offset) // stride)
        if last < first:
            continue
        start = first * stride + offset
        source = along(src, slice(start, last * stride + offset + 1, stride))
        along(out, slice(first, last + 1)).add_(source, alpha=tap)


def _blur_planes_cpu(
    x: torch.Tensor, col: Taps, row: Taps, pads: tuple[int, int], stride: tuple[int, int]
) -> torch.Tensor:
    """The separable blur of a 4-D CPU tensor, cache-blocked; no autograd.

    Works through the input a few planes at a time so that the column pass's result is still in
    cache when the row pass reads it. Contiguous float32/float64 planes are read in place and
    written straight into the output; other layouts and dtypes are staged through a small
    contiguous float buffer.
    """
    batch, channels, height, width = x.shape
    out_h, out_w = (height - 1) // stride[0] + 1, (width - 1) // stride[1] + 1
    channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    out = torch.empty((batch, channels, out_h, out_w), dtype=x.dtype, memory_format=fmt)
    if out.numel() == 0:
        return out
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    if x.is_contiguous():  # chunks of planes
        source = x.view(batch * channels, height, width)
        target = out.view(batch * channels, out_h, out_w)
        per_item = 1
    else:  # chunks of whole samples
        source, target, per_item = x, out, channels
    direct = x.is_contiguous() and work == x.dtype
    plane_bytes = height * width * torch.empty((), dtype=work).element_size()
    step = min(source.shape[0], max(1, _CHUNK_BYTES // (plane_bytes * per_item)))
    planes = step * per_item
    staged = None if direct else torch.empty((planes, height, width), dtype=work)
    middle = torch.empty((planes, out_h, width), dtype=work)
    final = None if direct else torch.empty((planes, out_h, out_w), dtype=work)
    for begin in range(0, source.shape[0], step):
        chunk, dst = source[begin : begin + step], target[begin : begin + step]
        n = chunk.shape[0] * per_item
        if staged is not None:
            staged[:n].view(chunk.shape).copy_(chunk)
            chunk = staged[:n]
        _shift_add(chunk, 1, col, pads[0], stride[0], middle[:n])
        if final is None:
            _shift_add(middle[:n], 2, row, pads[1], stride[1], dst)
        else:
            _shift_add(middle[:n], 2, row, pads[1], stride[1], final[:n])
            dst.copy_(cast_result(final[:n], x.dtype).view(dst.shape))
    return out


class _SeparableBlur(torch.autograd.Function):
    """Autograd for the CPU kernel: the gradient of a strided correlation is a stride-1
    correlation, with the flipped taps, of the zero-upsampled output gradient."""

    @staticmethod
    def forward(ctx, x, col, row, pads, stride):  # type: ignore[override]
        ctx.geometry = (col, row, pads, stride, x.shape[-2:])
        return _blur_planes_cpu(x, col, row, pads, stride)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        col, row, pads, stride, (height, width) = ctx.geometry
        if stride != (1, 1):
            spread = grad.new_zeros((*grad.shape[:2], height, width))
            spread[..., :: stride[0], :: stride[1]] = grad
            grad = spread
        flipped = (
            col[::-1],
            row[::-1],
            (len(col) - 1 - pads[0], len(row) - 1 - pads[1]),
            (1, 1),
        )
        return _SeparableBlur.apply(grad, *flipped), None, None, None, None


def _blur_conv(input: torch.Tensor, filt: torch.Tensor | None, strides: tuple[int, int]):
    """Depthwise-convolution formulation (any device, any filter, differentiable in both)."""
    dtype = compute_dtype(input.dtype)
    channels = input.shape[1]
    if filt is None:
        taps = torch.tensor(_DEFAULT_TAPS, device=input.device, dtype=dtype)
        filt = torch.outer(taps, taps).view(1, 1, 3, 3)
    weight = filt.to(device=input.device, dtype=dtype).expand(channels, 1, *filt.shape[-2:])
    k_h, k_w = filt.shape[-2:]
    x = input.to(dtype)
    pad_h, pad_w = (k_h - 1) // 2, (k_w - 1) // 2
    if k_h % 2 == 0 or k_w % 2 == 0:  # even sizes: the extra row/column of padding goes last
        x = F.pad(x, (pad_w, k_w - 1 - pad_w, pad_h, k_h - 1 - pad_h))
        pad_h = pad_w = 0
    if x.shape[0] == 0 or channels == 0:
        out_h = (input.shape[2] - 1) // strides[0] + 1
        out_w = (input.shape[3] - 1) // strides[1] + 1
        return input.new_empty((input.shape[0], channels, out_h, out_w))
    out = F.conv2d(x, weight, None, strides, (pad_h, pad_w), 1, channels)
    return cast_result(out, input.dtype)


def _pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool):
    """The output size of ``max_pool2d`` along one dimension (PyTorch's formula)."""
    numerator = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (-(-numerator // stride) if ceil else numerator // stride) + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def blur_2d(
    input: torch.Tensor,
    stride: int | tuple[int, int] = 1,
    filter: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Low-pass filter every channel of an image batch, optionally downsampling (BlurPool's blur).

    Cross-correlates each channel with a small filter :math:`k` (zero padding), keeping every
    ``stride``-th output:

    .. math::
        y_{b,c,i,j} = \sum_{u,v} k_{c,u,v}\, x_{b,c,\,s_h i + u - p_h,\, s_w j + v - p_w},
        \qquad p = \lfloor (k - 1) / 2 \rfloor

    The default filter is :math:`\tfrac{1}{16}[1\,2\,1]^\top[1\,2\,1]`. The padding keeps the
    size at stride 1 (``kH - 1`` rows in total, the extra one at the bottom for even sizes).
    Separable filters (like the default) run as two cache-blocked shift-and-add passes on the
    CPU, several times faster than a depthwise convolution; other filters, filters that need a
    gradient, and accelerators use a depthwise convolution. Integer inputs are filtered in
    float32 and rounded back.

    Args:
        input: images ``(B, C, H, W)``.
        stride: an int or ``(stride_h, stride_w)``, each ``>= 1``.
        filter: ``(kH, kW)`` for every channel, or ``(C, 1, kH, kW)`` per channel; the default
            filter when ``None``.

    Returns:
        The filtered images, dtype, device and memory format of ``input``.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, \lfloor (H - 1)/s_h \rfloor + 1, \lfloor (W - 1)/s_w \rfloor + 1)`

    Example:
        >>> import torch, functional as F
        >>> x = torch.ones(1, 1, 4, 4)
        >>> F.blur_2d(x)[0, 0]
        tensor([[0.5625, 0.7500, 0.7500, 0.5625],
                [0.7500, 1.0000, 1.0000, 0.7500],
                [0.7500, 1.0000, 1.0000, 0.7500],
                [0.5625, 0.7500, 0.7500, 0.5625]])
        >>> F.blur_2d(torch.rand(2, 3, 9, 9), stride=2).shape
        torch.Size([2, 3, 5, 5])

    Reference: Zhang, *Making Convolutional Networks Shift-Invariant Again*, ICML 2019.
    """
    check_ndim(input, "input", 4, "(B, C, H, W)")
    if input.is_complex():
        raise TypeError(f"input must be a real tensor, got dtype {input.dtype}")
    strides = check_pair(stride, "stride", minimum=1)
    channels = input.shape[1]
    filt = None if filter is None else _check_filter(filter, channels)
    if input.device.type == "cpu":
        taps = (_DEFAULT_TAPS, _DEFAULT_TAPS) if filt is None else None
        if filt is not None and not (filt.requires_grad and torch.is_grad_enabled()):
            taps = _separable_taps(filt)
        if taps is not None:
            col, row = taps
            pads = ((len(col) - 1) // 2, (len(row) - 1) // 2)
            if input.requires_grad and torch.is_grad_enabled():
                return _SeparableBlur.apply(input, col, row, pads, strides)
            with torch.no_grad():
                return _blur_planes_cpu(input, col, row, pads, strides)
    return _blur_conv(input, filt, strides)


def blurmax_pool2d(
    input: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    ceil_mode: bool = False,
    filter: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Anti-aliased max pooling: a dense (stride 1) max, then a blur with the pool's stride.

    A drop-in replacement for :func:`torch.nn.functional.max_pool2d` (without
    ``return_indices``): the output has exactly the size ``max_pool2d`` would give for the same
    arguments, ``ceil_mode`` included.

    .. math::
        y = \operatorname{blur}_{s}\bigl(\operatorname{maxpool}_{k,\,1}(x)\bigr)

    Args:
        input: images ``(B, C, H, W)``.
        kernel_size: max-pooling window, an int or ``(kH, kW)``.
        stride: stride of the pooling (applied by the blur); ``kernel_size`` when ``None``.
        padding: implicit ``-inf`` padding of the max, at most half the window.
        dilation: spacing of the window's elements.
        ceil_mode: round the output size up, as in ``max_pool2d``.
        filter: the blur filter, as in :func:`blur_2d` (default ``[1 2 1]ᵀ[1 2 1]/16``).

    Returns:
        The pooled images, dtype and device of ``input``.

    Shape:
        - input: :math:`(B, C, H, W)`
        - output: :math:`(B, C, H_{out}, W_{out})`, as for :func:`torch.nn.functional.max_pool2d`

    Example:
        >>> import torch, functional as F
        >>> x = torch.rand(2, 3, 8, 8)
        >>> F.blurmax_pool2d(x, 2).shape == torch.nn.functional.max_pool2d(x, 2).shape
        True

    Reference: Zhang, *Making Convolutional Networks Shift-Invariant Again*, ICML 2019.
    """
    check_ndim(input, "input", 4, "(B, C, H, W)")
    kernel = check_pair(kernel_size, "kernel_size", minimum=1)
    strides = kernel if stride is None else check_pair(stride, "stride", minimum=1)
    pads = check_pair(padding, "padding", minimum=0)
    dilations = check_pair(dilation, "dilation", minimum=1)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"ceil_mode must be a bool, got {type(ceil_mode).__name__}")
    if pads[0] > kernel[0] // 2 or pads[1] > kernel[1] // 2:
        raise ValueError(
            f"padding must be at most half of kernel_size, got padding={padding} for "
            f"kernel_size={kernel_size}"
        )
    extra = []
    for dim in range(2):
        size = input.shape[2 + dim]
        out = _pool_output_size(
            size, kernel[dim], strides[dim], pads[dim], dilations[dim], ceil_mode
        )
        if out < 1:
            raise ValueError(
                f"input of size {tuple(input.shape[2:])} is too small for kernel_size="
                f"{kernel_size}, dilation={dilation}, padding={padding}"
            )
        dense = size + 2 * pads[dim] - dilations[dim] * (kernel[dim] - 1)  # stride-1 max size
        # ceil_mode's last window may hang over the padded input: extend the dense max map.
        extra.append((out - 1) * strides[dim] + 1 - dense)
    x = input
    if extra[0] > 0 or extra[1] > 0:
        low = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
        x = F.pad(x, (0, max(extra[1], 0), 0, max(extra[0], 0)), value=low)
    dense_max = F.max_pool2d(x, kernel, stride=1, padding=pads, dilation=dilations)
    return blur_2d(dense_max, stride=strides, filter=filter)
