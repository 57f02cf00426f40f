"""BlurPool: anti-aliased downsampling (Zhang 2019).

The ops section (``blur_2d``, ``blurmax_pool2d``) holds the stateless kernels; the layers and the
``apply_blurpool`` transform follow below it.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from functional._checks import (
    accumulation_dtype,
    cast_result,
    check_bool,
    check_int,
    check_module,
    check_ndim,
    check_pair,
    check_tensor,
    clone_module_as,
    compute_dtype,
    replace_chosen,
)
from surgery._types import OptimizerArg

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

Taps = tuple[float, ...]

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
# The separable taps of filters seen before (layers pass the same filter buffer every call),
# keyed by id() and checked against a weak reference and the filter's version counter.
_TAPS_CACHE: dict[int, tuple[weakref.ref, int, tuple[Taps, Taps] | None]] = {}
_TAPS_CACHE_SIZE = 256


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


def _cached_separable_taps(key: torch.Tensor, filt: torch.Tensor) -> tuple[Taps, Taps] | None:
    """:func:`_separable_taps` of ``filt``, remembered for the tensor ``key`` it came from."""
    entry = _TAPS_CACHE.get(id(key))
    if entry is not None and entry[0]() is key and entry[1] == key._version:
        return entry[2]
    taps = _separable_taps(filt)
    if len(_TAPS_CACHE) >= _TAPS_CACHE_SIZE:
        _TAPS_CACHE.clear()
    _TAPS_CACHE[id(key)] = (weakref.ref(key), key._version, taps)
    return taps


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
    work = accumulation_dtype(x.dtype)
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
    if input.device.type == "cpu" and input.shape[-2] * input.shape[-1] >= _MIN_SEPARABLE_PLANE:
        taps = (_DEFAULT_TAPS, _DEFAULT_TAPS) if filt is None else None
        if filt is not None and not (filt.requires_grad and torch.is_grad_enabled()):
            taps = _cached_separable_taps(filter, filt)
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
    check_bool(ceil_mode, "ceil_mode")
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


# ---------------------------------------------------------------------------------------------
# Layers and the apply_blurpool transform
# ---------------------------------------------------------------------------------------------

_BLUR_TAPS = (1.0, 2.0, 1.0)


def _blur_kernel(channels: int | None, *, device=None, dtype=None) -> torch.Tensor:
    """The default 3x3 binomial filter, as (3, 3) or expanded to (channels, 1, 3, 3)."""
    taps = torch.tensor(_BLUR_TAPS, device=device, dtype=dtype or torch.get_default_dtype())
    kernel = torch.outer(taps, taps) / 16
    if channels is None:
        return kernel
    return kernel.expand(channels, 1, 3, 3).contiguous()


class BlurConv2d(nn.Conv2d):
    """A :class:`torch.nn.Conv2d` with an anti-aliasing low-pass filter (BlurPool).

    With ``blur_first=True`` the input is blurred with the 3x3 binomial filter at stride 1 and
    then convolved with the layer's own stride: the cost is one depthwise 3x3 pass over the
    input. With ``blur_first=False`` the convolution runs at stride 1 and the blur then
    downsamples with the layer's stride, which is what the paper describes but multiplies the
    convolution's cost by ``stride_h * stride_w``. Either way the output has the shape a plain
    ``Conv2d`` with the same arguments would produce.

    The class subclasses ``nn.Conv2d``: ``weight`` and ``bias`` keep their names (checkpoints
    load both ways) and the filter is a non-persistent buffer, absent from the state_dict.
    See :func:`blur_2d` and :func:`apply_blurpool`.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode, device, dtype: as for :class:`torch.nn.Conv2d`.
        blur_first: blur before the convolution (cheap) or after it (the paper's order).

    Shape:
        - Input: (B, C_in, H, W)
        - Output: (B, C_out, H_out, W_out), exactly as :class:`torch.nn.Conv2d`.

    Example:
        >>> conv = BlurConv2d(16, 32, 3, stride=2, padding=1)
        >>> conv(torch.randn(2, 16, 9, 9)).shape
        torch.Size([2, 32, 5, 5])

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """

    blur_filter: torch.Tensor

    def __init__(self, *args, blur_first: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._init_blur(blur_first)

    def _init_blur(self, blur_first: bool) -> None:
        check_bool(blur_first, "blur_first")
        self.blur_first = blur_first
        channels = self.in_channels if blur_first else self.out_channels
        self.register_buffer(
            "blur_filter",
            _blur_kernel(channels, device=self.weight.device, dtype=self.weight.dtype),
            persistent=False,
        )

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
        new._init_blur(blur_first)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.blur_first:
            return super().forward(blur_2d(input, stride=1, filter=self.blur_filter))
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        else:
            padding = self.padding
        full = F.conv2d(input, self.weight, self.bias, 1, padding, self.dilation, self.groups)
        return blur_2d(full, stride=self.stride, filter=self.blur_filter)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", blur_first={self.blur_first}"


class BlurMaxPool2d(nn.MaxPool2d):
    """A :class:`torch.nn.MaxPool2d` with anti-aliasing: max at stride 1, then blur-downsample.

    See :func:`blurmax_pool2d`. ``return_indices`` is not available (the blurred output has no
    argmax). Subclasses ``nn.MaxPool2d``, so the pooling arguments read as before.

    Shape:
        - Input: (B, C, H, W)
        - Output: (B, C, H_out, W_out), as :class:`torch.nn.MaxPool2d` with ``ceil_mode=False``.

    Example:
        >>> pool = BlurMaxPool2d(3, stride=2, padding=1)
        >>> pool(torch.randn(2, 4, 8, 8)).shape
        torch.Size([2, 4, 4, 4])

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """

    blur_filter: torch.Tensor

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
        self.register_buffer("blur_filter", _blur_kernel(None), persistent=False)

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
        return blurmax_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            filter=self.blur_filter,
        )


class BlurPool2d(nn.Module):
    """Blur every channel with the 3x3 binomial filter, downsampling by ``stride``.

    A module form of :func:`blur_2d` (zero padding keeps the size at stride 1). With
    ``channels > 0`` the filter is stored expanded to ``(channels, 1, 3, 3)``; with
    ``channels=0`` it adapts to the input's channel count.

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

    blur_filter: torch.Tensor

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
        self.register_buffer("blur_filter", _blur_kernel(self.channels or None), persistent=False)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return blur_2d(input, stride=self.stride, filter=self.blur_filter)

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
    which makes the transform idempotent. Max-pools with ``return_indices=True`` or
    ``ceil_mode=True`` are skipped: the first have no blurred equivalent and for the second
    the blurred pooling does not reproduce the ceil-mode output size.

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
        if pool.return_indices or pool.ceil_mode or not _is_strided(pool.stride):
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
                "strided nn.MaxPool2d (ceil_mode=False, return_indices=False)",
            ),
        ],
        optimizers,
        none_chosen="layer to convert (replace_convs and replace_maxpools are both False)",
    )
    return model
