"""BlurPool's public ops: :func:`blur_2d` (the low-pass filter, optionally downsampling) and
:func:`blurmax_pool2d` (max at stride 1, then a blur with the pool's stride), with their argument
checks and ``max_pool2d``'s output-size rule.
"""

from __future__ import annotations

import torch
from torch.nn import functional as nnf

from functional._args import check_bool, check_ndim, check_pair, check_tensor
from functional.blurpool.kernels import _blur_given, _separable_blur

__all__ = ["blur_2d", "blurmax_pool2d"]


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
