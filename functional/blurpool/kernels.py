"""BlurPool's blur kernels: the cache-blocked CPU shift-and-add passes with their autograd
Function, the depthwise-convolution formulation every other device and ``torch.compile`` use, and
the dispatch between them (``_separable_blur`` for separable taps, ``_blur_given`` for a given
filter). Private to the package: :mod:`~functional.blurpool.ops` and
:mod:`~functional.blurpool.layers` call them.
"""

from __future__ import annotations

import torch
from torch.nn import functional as nnf

from functional._numeric import cast_result, int64_range

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
