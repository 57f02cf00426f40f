"""BlurPool: anti-aliased downsampling (Zhang 2019).

The ops section (``blur_2d``, ``blurmax_pool2d``) holds the stateless kernels; the layers and the
``apply_blurpool`` transform follow below it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as nnf

from functional._args import (
    check_bool,
    check_int,
    check_module,
    check_ndim,
    check_pair,
    check_tensor,
)
from functional._numeric import cast_result, int64_range
from functional._policies import clone_module_as, replace_chosen
from surgery import OptimizerArg

__all__ = [
    "BlurConv2d",
    "BlurMaxPool2d",
    "BlurPool2d",
    "apply_blurpool",
    "blur_2d",
    "blurmax_pool2d",
]

# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------

Taps = tuple[float, ...] | tuple[torch.Tensor, ...]
Grid = tuple[tuple[torch.Tensor, ...], ...]

# The default low-pass filter [1 2 1]ᵀ[1 2 1] / 16 as a pair of 1-D taps.
_DEFAULT_TAPS: Taps = (0.25, 0.5, 0.25)

# Bytes of input planes processed per step of the CPU kernel: small enough that the column
# pass's result is still in cache (L3) when the row pass reads it, large enough to keep the
# number of multi-threaded ops low (each one waits for all its threads, which costs dearly on
# a machine whose cores are shared with other busy processes).
_CHUNK_BYTES = 16 << 20
# Below this many pixels per plane the shift-and-add kernel's fixed cost per op outweighs its
# savings over the depthwise convolution (measured on 2-core x86 CPUs, forward and backward).
_MIN_SEPARABLE_PLANE = 256


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


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the blur computes in: float64 for float64 and for 32/64-bit integers (whose
    values float32 cannot hold exactly), float32 for everything else."""
    if dtype in (torch.float64, torch.int32, torch.int64):
        return torch.float64
    return torch.float32


def _conv_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the depthwise-convolution path: the input's own floating dtype, else
    :func:`_work_dtype` (integers and bool)."""
    return dtype if dtype.is_floating_point else _work_dtype(dtype)


def _default_taps(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``[1/4, 1/2, 1/4]`` built on ``device`` (no host-to-device copy)."""
    taps = torch.full((3,), 0.25, device=device, dtype=dtype)
    taps[1] = 0.5
    return taps


def _shift_add(
    src: torch.Tensor,
    dim: int,
    taps: tuple[float | torch.Tensor, ...],
    pad: int,
    stride: int,
    out: torch.Tensor,
) -> None:
    """``out[i] = Σ_j taps[j] · src[i·stride + j - pad]`` along ``dim`` (zeros outside ``src``).

    ``taps`` are Python floats (constants) or 0-d tensors (a layer's buffer, never read on the
    host: ``addcmul_`` takes them as they are).

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
        if offset == 0 or (isinstance(tap, float) and tap == 0.0):
            continue
        first = max(0, -(offset // stride))  # ceil(-offset / stride)
        last = min(n_out - 1, (n_in - 1 - offset) // stride)
        if last < first:
            continue
        start = first * stride + offset
        source = along(src, slice(start, last * stride + offset + 1, stride))
        if isinstance(tap, float):
            along(out, slice(first, last + 1)).add_(source, alpha=tap)
        else:
            along(out, slice(first, last + 1)).addcmul_(source, tap)


def _valid_range(offset: int, stride: int, n_in: int, n_out: int) -> tuple[int, int] | None:
    """Outputs ``[first, last]`` whose input ``i·stride + offset`` lies inside ``[0, n_in)``."""
    first = max(0, -(offset // stride))  # ceil(-offset / stride)
    last = min(n_out - 1, (n_in - 1 - offset) // stride)
    return None if last < first else (first, last)


def _correlate_2d(
    src: torch.Tensor,
    grid: Grid,
    pads: tuple[int, int],
    stride: tuple[int, int],
    out: torch.Tensor,
) -> None:
    """``out[..., i, j] = Σ_{u,v} grid[u][v] · src[..., i·s_h + u - p_h, j·s_w + v - p_w]``
    (zeros outside ``src``): a general (non-separable) filter, one ``addcmul_`` per tap.

    Each tap is a 0-d tensor (one filter for every channel) or a ``(C, 1, 1)`` tensor (one per
    channel, ``src`` then ``(b, C, H, W)``); the values are never read on the host.
    """
    n_h, n_w = src.shape[-2:]
    out.zero_()
    for u, taps in enumerate(grid):
        rows = _valid_range(u - pads[0], stride[0], n_h, out.shape[-2])
        if rows is None:
            continue
        r0, r1 = rows
        src_rows = slice(r0 * stride[0] + u - pads[0], r1 * stride[0] + u - pads[0] + 1, stride[0])
        for v, tap in enumerate(taps):
            cols = _valid_range(v - pads[1], stride[1], n_w, out.shape[-1])
            if cols is None:
                continue
            c0, c1 = cols
            src_cols = slice(
                c0 * stride[1] + v - pads[1], c1 * stride[1] + v - pads[1] + 1, stride[1]
            )
            out[..., r0 : r1 + 1, c0 : c1 + 1].addcmul_(src[..., src_rows, src_cols], tap)


def _blur_planes_cpu(
    x: torch.Tensor,
    col: Taps | None,
    row: Taps | None,
    pads: tuple[int, int],
    stride: tuple[int, int],
    grid: Grid | None = None,
    per_channel: bool = False,
) -> torch.Tensor:
    """The blur of a 4-D CPU tensor, cache-blocked; no autograd.

    With ``col`` and ``row``: the separable filter ``outer(col, row)`` in two shift-and-add
    passes. With ``grid`` (``col``/``row`` ``None``): a general filter, one pass of
    ``kH·kW`` multiply-adds (``per_channel``: the taps are ``(C, 1, 1)``).

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
    work = _work_dtype(x.dtype)
    within = int64_range(x, with_zero=True)  # zero padding: 0 is within the blur's range
    if x.is_contiguous() and not per_channel:  # chunks of planes
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
    middle = None if grid is not None else torch.empty((planes, out_h, width), dtype=work)
    final = None if direct else torch.empty((planes, out_h, out_w), dtype=work)
    for begin in range(0, source.shape[0], step):
        chunk, dst = source[begin : begin + step], target[begin : begin + step]
        n = chunk.shape[0] * per_item
        if staged is not None:
            staged[:n].view(chunk.shape).copy_(chunk)
            chunk = staged[:n] if grid is None else staged[:n].view(chunk.shape)
        if grid is not None:
            into = dst if final is None else final[:n].view(dst.shape)
            _correlate_2d(chunk, grid, pads, stride, into)
            if final is not None:
                dst.copy_(cast_result(into, x.dtype, within=within))
            continue
        assert col is not None and row is not None and middle is not None
        _shift_add(chunk, 1, col, pads[0], stride[0], middle[:n])
        if final is None:
            _shift_add(middle[:n], 2, row, pads[1], stride[1], dst)
        else:
            _shift_add(middle[:n], 2, row, pads[1], stride[1], final[:n])
            dst.copy_(cast_result(final[:n], x.dtype, within=within).view(dst.shape))
    return out


class _SeparableBlur(torch.autograd.Function):
    """Autograd for the CPU kernel: the gradient of a strided correlation is a stride-1
    correlation, with the flipped taps, of the zero-upsampled output gradient."""

    @staticmethod
    def forward(ctx, x, col, row, pads, stride, grid=None, per_channel=False):
        ctx.geometry = (col, row, pads, stride, x.shape[-2:], grid, per_channel)
        return _blur_planes_cpu(x, col, row, pads, stride, grid, per_channel)

    @staticmethod
    def backward(ctx, grad):
        col, row, pads, stride, (height, width), grid, per_channel = ctx.geometry
        if stride != (1, 1):
            spread = grad.new_zeros((*grad.shape[:2], height, width))
            spread[..., :: stride[0], :: stride[1]] = grad
            grad = spread
        flipped: tuple[Taps | None, Taps | None, tuple[Taps, ...] | None]
        if grid is None:
            k_h, k_w = len(col), len(row)
            flipped = (col[::-1], row[::-1], None)
        else:
            k_h, k_w = len(grid), len(grid[0])
            flipped = (None, None, tuple(taps[::-1] for taps in grid[::-1]))
        back_pads = (k_h - 1 - pads[0], k_w - 1 - pads[1])
        col_f, row_f, grid_f = flipped
        out = _SeparableBlur.apply(grad, col_f, row_f, back_pads, (1, 1), grid_f, per_channel)
        return out, None, None, None, None, None, None


def _blur_conv(input: torch.Tensor, filt: torch.Tensor, strides: tuple[int, int]):
    """Depthwise-convolution formulation (any device, any filter, differentiable in both).

    ``filt`` is ``(1 or C, 1, kH, kW)``.
    """
    dtype = _conv_dtype(input.dtype)
    channels = input.shape[1]
    k_h, k_w = filt.shape[-2:]
    if input.shape[0] == 0 or channels == 0:
        out_h = (input.shape[2] - 1) // strides[0] + 1
        out_w = (input.shape[3] - 1) // strides[1] + 1
        return input.new_empty((input.shape[0], channels, out_h, out_w))
    weight = filt.to(device=input.device, dtype=dtype).expand(channels, 1, k_h, k_w)
    x = input.to(dtype)
    pad_h, pad_w = (k_h - 1) // 2, (k_w - 1) // 2
    if k_h % 2 == 0 or k_w % 2 == 0:  # even sizes: the extra row/column of padding goes last
        x = nnf.pad(x, (pad_w, k_w - 1 - pad_w, pad_h, k_h - 1 - pad_h))
        pad_h = pad_w = 0
    out = nnf.conv2d(x, weight, None, strides, (pad_h, pad_w), 1, channels)
    return cast_result(out, input.dtype, within=int64_range(input, with_zero=True))


def _use_cpu_kernel(input: torch.Tensor) -> bool:
    """Whether the shift-and-add kernel runs: eager mode, CPU, planes of at least
    ``_MIN_SEPARABLE_PLANE`` pixels. Decided from the device and shape only (no values)."""
    return (
        input.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and input.shape[-2] * input.shape[-1] >= _MIN_SEPARABLE_PLANE
    )


def _blur_given(input: torch.Tensor, filt: torch.Tensor, strides: tuple[int, int]) -> torch.Tensor:
    """Blur with a checked ``(1 or C, 1, kH, kW)`` filter: the CPU kernel where it runs and the
    filter needs no gradient, else the depthwise convolution."""
    if (
        input.numel()  # empty input (no samples or no channels): the convolution's shape rule
        and _use_cpu_kernel(input)
        and not (filt.requires_grad and torch.is_grad_enabled())
    ):
        return _grid_blur(input, filt, strides)
    return _blur_conv(input, filt, strides)


def _grid_blur(input: torch.Tensor, filt: torch.Tensor, strides: tuple[int, int]) -> torch.Tensor:
    """A given ``(1 or C, 1, kH, kW)`` filter with the CPU kernel, its taps passed as tensors
    (0-d, or ``(C, 1, 1)`` per channel): never read on the host, so never stale."""
    k_h, k_w = filt.shape[-2:]
    per_channel = filt.shape[0] > 1
    taps = filt.detach().to(_work_dtype(input.dtype))
    if per_channel:
        grid = tuple(tuple(taps[:, 0, u, v].view(-1, 1, 1) for v in range(k_w)) for u in range(k_h))
    else:
        grid = tuple(tuple(taps[0, 0, u, v] for v in range(k_w)) for u in range(k_h))
    pads = ((k_h - 1) // 2, (k_w - 1) // 2)
    if input.requires_grad and torch.is_grad_enabled():
        return _SeparableBlur.apply(input, None, None, pads, strides, grid, per_channel)
    with torch.no_grad():
        return _blur_planes_cpu(input, None, None, pads, strides, grid, per_channel)


def _separable_blur(
    input: torch.Tensor,
    col: torch.Tensor | None,
    row: torch.Tensor | None,
    strides: tuple[int, int],
) -> torch.Tensor:
    """Blur with the separable filter ``outer(col, row)`` (both ``None``: the default taps).

    ``col`` and ``row`` are 1-D tensors (a layer's buffer): they are passed to the kernel as
    0-d tensors and never read on the host, so edits to them are always seen.
    """
    if _use_cpu_kernel(input):
        work = _work_dtype(input.dtype)
        if col is None or row is None:
            col_taps: Taps = _DEFAULT_TAPS
            row_taps: Taps = _DEFAULT_TAPS
        else:
            col_taps = tuple(col.detach().to(work).unbind())
            row_taps = tuple(row.detach().to(work).unbind())
        pads = ((len(col_taps) - 1) // 2, (len(row_taps) - 1) // 2)
        if input.requires_grad and torch.is_grad_enabled():
            return _SeparableBlur.apply(input, col_taps, row_taps, pads, strides)
        with torch.no_grad():
            return _blur_planes_cpu(input, col_taps, row_taps, pads, strides)
    if col is None or row is None:
        col = row = _default_taps(input.device, _conv_dtype(input.dtype))
    filt = torch.outer(col, row)
    return _blur_conv(input, filt.view(1, 1, *filt.shape), strides)


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
    On the CPU in eager mode the default filter runs as two cache-blocked shift-and-add passes
    (planes of at least 256 pixels), several times faster than a depthwise convolution; a
    ``filter`` passed in, accelerators and ``torch.compile`` use a depthwise convolution. The
    filter's values are never read on the host and nothing is cached, so edits to ``filter``
    (in place, through ``.data`` or a NumPy view) are always seen, and no call synchronises with
    the device. Integer inputs are filtered in float32 (float64 for int32/int64), rounded back
    and clamped to the dtype's range.

    Under ``torch.compile(fullgraph=True)`` the op traces without a graph break; new values of
    ``input`` or ``filter`` reuse the graph, while a new ``stride`` or filter shape is a new
    graph (they set the output's shape).

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
    if filter is None:
        return _separable_blur(input, None, None, strides)
    return _blur_given(input, _check_filter(filter, input.shape[1]), strides)


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
        The pooled images, dtype and device of ``input``. An empty batch or an input with no
        channels gives an empty result of the same output shape (``max_pool2d`` refuses it).

    Raises:
        TypeError: for bool or complex input (max pooling is not defined for them; convert a
            mask to ``uint8`` or float first).
        ValueError: for a window larger than the padded input or padding above half the window.

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
    filt = None if filter is None else _check_filter(filter, _check_pool_input(input))
    return _blurmax(input, kernel_size, stride, padding, dilation, ceil_mode, filt, None)


def _check_pool_input(input: torch.Tensor) -> int:
    """Validate ``blurmax_pool2d``'s input; returns its channel count."""
    check_ndim(input, "input", 4, "(B, C, H, W)")
    if input.dtype == torch.bool or input.is_complex():
        raise TypeError(
            f"input must be a real, non-bool tensor (max pooling is not defined for dtype "
            f"{input.dtype}; convert a mask with .to(torch.uint8) or .float()), got {input.dtype}"
        )
    return input.shape[1]


def _blurmax(
    input: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None,
    padding: int | tuple[int, int],
    dilation: int | tuple[int, int],
    ceil_mode: bool,
    filt: torch.Tensor | None,
    taps: torch.Tensor | None,
) -> torch.Tensor:
    """:func:`blurmax_pool2d` after the input check; the blur uses ``filt`` (a checked
    ``(1 or C, 1, kH, kW)`` filter), else the separable ``outer(taps, taps)`` (a layer's
    buffer), else the default filter."""
    _check_pool_input(input)
    kernel = check_pair(kernel_size, "kernel_size", minimum=1)
    strides = kernel if stride is None else check_pair(stride, "stride", minimum=1)
    pads = check_pair(padding, "padding", minimum=0)
    dilations = check_pair(dilation, "dilation", minimum=1)
    check_bool(ceil_mode, "ceil_mode")
    if pads[0] > kernel[0] // 2 or pads[1] > kernel[1] // 2:
        raise ValueError(
            f"padding must be at most half of kernel_size, got padding={padding} for "
            f"kernel_size={kernel_size}"
        )
    extra, sizes = [], []
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
        sizes.append(out)
        dense = size + 2 * pads[dim] - dilations[dim] * (kernel[dim] - 1)  # stride-1 max size
        # ceil_mode's last window may hang over the padded input: extend the dense max map.
        extra.append((out - 1) * strides[dim] + 1 - dense)
    if input.shape[0] == 0 or input.shape[1] == 0:  # an empty batch or no channels: empty result
        return input.new_empty((input.shape[0], input.shape[1], *sizes))
    x = input
    if extra[0] > 0 or extra[1] > 0:
        low = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
        x = nnf.pad(x, (0, max(extra[1], 0), 0, max(extra[0], 0)), value=low)
    # torch's CPU max_pool2d fails on 8-bit channels_last batches (an int32 size check of
    # its integer kernel): pool those in contiguous format and restore the format after.
    restore = None
    if x.device.type == "cpu" and x.element_size() == 1 and not x.is_contiguous():
        if x.is_contiguous(memory_format=torch.channels_last):
            restore = torch.channels_last
        x = x.contiguous()
    dense_max = nnf.max_pool2d(x, kernel, stride=1, padding=pads, dilation=dilations)
    if filt is not None:
        out = _blur_given(dense_max, filt, strides)
    else:
        out = _separable_blur(dense_max, taps, taps, strides)
    return out if restore is None else out.contiguous(memory_format=restore)


# ---------------------------------------------------------------------------------------------
# Layers and the apply_blurpool transform
# ---------------------------------------------------------------------------------------------


def _binomial_taps(*, device=None, dtype=None) -> torch.Tensor:
    """The 1-D taps ``[1, 2, 1] / 4`` of the default filter (their outer product)."""
    return torch.tensor(_DEFAULT_TAPS, device=device, dtype=dtype or torch.get_default_dtype())


class _BlurTaps:
    """The layers' filter: a non-persistent buffer ``blur_taps`` of 1-D taps ``t`` (default
    ``[1, 2, 1] / 4``), the filter being ``outer(t, t)`` for every channel.

    Storing the separable factors (not the 2-D filter) makes the fast CPU kernel correct by
    construction, without reading the filter's values on the host and without a cache: the taps
    reach the kernel as 0-d tensors, so an edit of ``blur_taps`` (in place or through
    ``.data``) is seen by the next call. ``blur_filter`` is the 2-D filter derived from them,
    read-only (a new tensor at each access; change the filter through ``blur_taps``).
    """

    blur_taps: torch.Tensor
    _blur_channels: int | None

    def _register_taps(self, channels: int | None, *, device=None, dtype=None) -> None:
        assert isinstance(self, nn.Module)
        self._blur_channels = channels
        self.register_buffer(
            "blur_taps", _binomial_taps(device=device, dtype=dtype), persistent=False
        )

    @property
    def blur_filter(self) -> torch.Tensor:
        """The 2-D filter ``outer(blur_taps, blur_taps)``: ``(C, 1, 3, 3)`` for layers with a
        fixed channel count, else ``(3, 3)``. Derived, read-only."""
        kernel = torch.outer(self.blur_taps, self.blur_taps)
        if self._blur_channels is None:
            return kernel
        return kernel.expand(self._blur_channels, 1, *kernel.shape).contiguous()


class BlurConv2d(_BlurTaps, nn.Conv2d):
    """A :class:`torch.nn.Conv2d` with an anti-aliasing low-pass filter (BlurPool).

    With ``blur_first=True`` the input is blurred with the 3x3 binomial filter at stride 1 and
    then convolved with the layer's own stride: the cost is one depthwise 3x3 pass over the
    input. With ``blur_first=False`` the convolution runs at stride 1 and the blur then
    downsamples with the layer's stride, which is what the paper describes but multiplies the
    convolution's cost by ``stride_h * stride_w``. Either way the output has the shape a plain
    ``Conv2d`` with the same arguments would produce.

    The class subclasses ``nn.Conv2d``: ``weight`` and ``bias`` keep their names (checkpoints
    load both ways) and the filter's taps are a non-persistent buffer ``blur_taps``, absent
    from the state_dict (``blur_filter`` is the derived 2-D filter; see ``_BlurTaps``).
    The positional arguments are those of Composer's ``BlurConv2d`` (``blur_first`` ninth);
    ``padding_mode``, ``device`` and ``dtype`` are keyword-only.
    See :func:`blur_2d` and :func:`apply_blurpool`.

    The forward pass reads no tensor value on the host and compiles without a graph break.
    dtypes: the blur runs in the input's dtype (float32 arithmetic for float16/bfloat16 on the
    CPU kernel), so under ``torch.autocast`` the blur keeps the incoming dtype and the
    convolution follows autocast's rule for ``conv2d`` (the low-precision dtype).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias: as for
            :class:`torch.nn.Conv2d` (``stride=None`` means 1).
        blur_first: blur before the convolution (cheap) or after it (the paper's order).
        padding_mode, device, dtype: as for :class:`torch.nn.Conv2d` (keyword only).

    Shape:
        - Input: (B, C_in, H, W)
        - Output: (B, C_out, H_out, W_out), exactly as :class:`torch.nn.Conv2d`.

    Example:
        >>> conv = BlurConv2d(16, 32, 3, 2, 1)
        >>> conv(torch.randn(2, 16, 9, 9)).shape
        torch.Size([2, 32, 5, 5])

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        blur_first: bool = True,
        *,
        padding_mode: str = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_bool(blur_first, "blur_first")
        check_bool(bias, "bias")
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            1 if stride is None else stride,
            padding,
            dilation,
            groups,
            bias,
            # torch's Conv2d.__init__ annotates padding_mode as a Literal but stores (and
            # reports as conv.padding_mode) a plain str; Conv2d checks the value itself.
            padding_mode,  # type: ignore[arg-type]
            device=device,
            dtype=dtype,
        )
        self._init_blur(blur_first)

    def _init_blur(self, blur_first: bool) -> None:
        check_bool(blur_first, "blur_first")
        self.blur_first = blur_first
        channels = self.in_channels if blur_first else self.out_channels
        self._register_taps(channels, device=self.weight.device, dtype=self.weight.dtype)

    @classmethod
    def from_conv2d(
        cls, conv: nn.Conv2d, module_index: int | None = None, *, blur_first: bool = True
    ) -> BlurConv2d:
        """A ``BlurConv2d`` sharing ``conv``'s ``weight`` and ``bias`` Parameters (no copy).

        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        new = clone_module_as(conv, cls)
        assert isinstance(new, BlurConv2d)
        new._init_blur(blur_first)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        taps = self.blur_taps
        if self.blur_first:
            check_ndim(input, "input", 4, "(B, C, H, W)")
            return super().forward(_separable_blur(input, taps, taps, (1, 1)))
        padding: int | str | tuple[int, ...]
        if self.padding_mode != "zeros":
            input = nnf.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        else:
            padding = self.padding
        full = nnf.conv2d(input, self.weight, self.bias, 1, padding, self.dilation, self.groups)
        stride_h, stride_w = self.stride  # two entries (_ConvNd annotates any length)
        return _separable_blur(full, taps, taps, (stride_h, stride_w))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", blur_first={self.blur_first}"


class BlurMaxPool2d(_BlurTaps, nn.MaxPool2d):
    """A :class:`torch.nn.MaxPool2d` with anti-aliasing: max at stride 1, then blur-downsample.

    See :func:`blurmax_pool2d`. ``return_indices`` is not available (the blurred output has no
    argmax). Subclasses ``nn.MaxPool2d``, so the pooling arguments read as before.

    Shape:
        - Input: (B, C, H, W)
        - Output: (B, C, H_out, W_out), exactly as :class:`torch.nn.MaxPool2d` with the same
          arguments (``ceil_mode`` included).

    The filter's taps are the non-persistent buffer ``blur_taps`` (see ``BlurConv2d``). The
    forward pass reads no tensor value on the host and compiles without a graph break; it
    keeps the input's dtype (under autocast, whatever dtype reaches it).

    Example:
        >>> pool = BlurMaxPool2d(3, stride=2, padding=1)
        >>> pool(torch.randn(2, 4, 8, 8)).shape
        torch.Size([2, 4, 4, 4])

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__(kernel_size, stride, padding, dilation, False, ceil_mode)
        self._init_blur()

    def _init_blur(self) -> None:
        self._register_taps(None)

    @classmethod
    def from_maxpool2d(cls, pool: nn.MaxPool2d, module_index: int | None = None) -> BlurMaxPool2d:
        """A ``BlurMaxPool2d`` with ``pool``'s kernel, stride, padding, dilation and ceil_mode.

        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(pool, nn.MaxPool2d):
            raise TypeError(f"pool must be an nn.MaxPool2d, got {type(pool).__name__}")
        if pool.return_indices:
            raise ValueError("pool.return_indices must be False: a blurred max-pool has no indices")
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _blurmax(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            None,
            self.blur_taps,
        )


class BlurPool2d(_BlurTaps, nn.Module):
    """Blur every channel with the 3x3 binomial filter, downsampling by ``stride``.

    A module form of :func:`blur_2d` (zero padding keeps the size at stride 1). With
    ``channels > 0`` the input must have that many channels (``blur_filter`` is then
    ``(channels, 1, 3, 3)``); with ``channels=0`` any channel count is accepted. The filter's
    taps are the non-persistent buffer ``blur_taps`` (see ``BlurConv2d``); the forward pass
    reads no tensor value on the host, compiles without a graph break and keeps the input's
    dtype.

    Args:
        stride: downsampling factor along H and W (int or pair).
        padding: must be 1 (accepted for Composer compatibility; see :func:`blur_2d`).
        channels: number of input channels, or 0 to accept any (keyword only).

    Shape:
        - Input: (B, C, H, W)
        - Output: (B, C, floor((H - 1) / s_h) + 1, floor((W - 1) / s_w) + 1)

    Example:
        >>> BlurPool2d(channels=3)(torch.randn(2, 3, 9, 8)).shape
        torch.Size([2, 3, 5, 4])

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """

    def __init__(
        self, stride: int | tuple[int, int] = 2, padding: int = 1, *, channels: int = 0
    ) -> None:
        super().__init__()
        self.channels = check_int(channels, "channels", minimum=0)
        if padding != 1 or isinstance(padding, bool):
            raise ValueError(
                f"padding must be 1 (the 3x3 filter is zero-padded by 1 to keep the size at "
                f"stride 1), got {padding!r}"
            )
        self.stride = check_pair(stride, "stride", minimum=1)
        self._register_taps(self.channels or None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        check_ndim(input, "input", 4, "(B, C, H, W)")
        if self.channels and input.shape[1] != self.channels:
            raise ValueError(
                f"input must have channels={self.channels} channels, got shape {tuple(input.shape)}"
            )
        return _separable_blur(input, self.blur_taps, self.blur_taps, self.stride)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, stride={self.stride}"


def _is_strided(stride: int | tuple[int, ...]) -> bool:
    return (max(stride) if isinstance(stride, tuple) else stride) > 1


def apply_blurpool(
    model: nn.Module,
    replace_convs: bool = True,
    replace_maxpools: bool = True,
    blur_first: bool = True,
    min_channels: int = 16,
    optimizers: OptimizerArg = None,
) -> nn.Module:
    """Add anti-aliasing filters to the strided convolutions and max-pools of ``model``, in place.

    Every ``nn.Conv2d`` with a stride above 1 and at least ``min_channels`` input channels
    becomes a :class:`BlurConv2d` and every ``nn.MaxPool2d`` with a stride above 1 becomes a
    :class:`BlurMaxPool2d`. The replacements reuse the original ``Parameter`` objects, so
    pretrained weights, optimizer state and state_dict keys are all kept; only exact
    ``nn.Conv2d``/``nn.MaxPool2d`` instances are converted (subclasses with their own
    ``forward``, and layers already converted by this or another transform, are left alone),
    which makes the transform idempotent. Max-pools with ``return_indices=True`` are skipped
    (a blurred max has no indices); ``ceil_mode=True`` pools are converted, and keep their
    output size exactly (see :func:`blurmax_pool2d`).

    Args:
        model: the model to change in place.
        replace_convs: convert strided convolutions.
        replace_maxpools: convert strided max-pools.
        blur_first: for convolutions, blur before (cheap) or after (the paper's order, about
            ``stride²`` times the convolution's cost) the convolution; see :class:`BlurConv2d`.
        min_channels: convolutions with fewer input channels are skipped (by default the RGB
            stem, where blurring the raw image mostly costs time).
        optimizers: optimizers holding ``model``'s parameters (kept consistent; nothing is added
            or removed, since every parameter survives).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no eligible convolution or max-pool was found.

    Example:
        >>> from torchvision.models import resnet18
        >>> model = apply_blurpool(resnet18())
        >>> sum(isinstance(m, BlurConv2d) for m in model.modules())
        6

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """
    check_module(model)
    check_bool(replace_convs, "replace_convs")
    check_bool(replace_maxpools, "replace_maxpools")
    check_bool(blur_first, "blur_first")
    min_channels = check_int(min_channels, "min_channels", minimum=0)

    def convert_conv(conv: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(conv, nn.Conv2d)
        if not _is_strided(conv.stride) or conv.in_channels < min_channels:
            return None
        return BlurConv2d.from_conv2d(conv, blur_first=blur_first)

    def convert_pool(pool: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(pool, nn.MaxPool2d)
        if pool.return_indices or not _is_strided(pool.stride):
            return None
        return BlurMaxPool2d.from_maxpool2d(pool)

    replace_chosen(
        model,
        "apply_blurpool",
        [
            (
                replace_convs,
                nn.Conv2d,
                convert_conv,
                f"strided nn.Conv2d with in_channels >= {min_channels}",
            ),
            (
                replace_maxpools,
                nn.MaxPool2d,
                convert_pool,
                "strided nn.MaxPool2d (return_indices=False)",
            ),
        ],
        optimizers,
        none_chosen="layer to convert (replace_convs and replace_maxpools are both False)",
    )
    return model
