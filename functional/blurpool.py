"""BlurPool: anti-aliased downsampling (Zhang 2019).

The ops section (``blur_2d``, ``blurmax_pool2d``) holds the stateless kernels; the layers and the
``apply_blurpool`` transform follow below it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from functional._checks import check_ndim

__all__ = ["blur_2d", "blurmax_pool2d"]

# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------


def _pair(value: int | tuple[int, int], name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value
    raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")


def _default_filter(like: torch.Tensor) -> torch.Tensor:
    taps = torch.tensor([1.0, 2.0, 1.0], device=like.device, dtype=like.dtype)
    return torch.outer(taps, taps) / 16


def blur_2d(
    input: torch.Tensor,
    stride: int | tuple[int, int] = 1,
    filter: torch.Tensor | None = None,
) -> torch.Tensor:
    """Low-pass filter every channel of an image batch, optionally downsampling.

    Baseline implementation (depthwise convolution); see the ops issue for the fast kernels.

    Shape:
        - input: (B, C, H, W)
        - output: (B, C, H_out, W_out), H_out = floor((H + 2·pad_h - kH) / stride_h) + 1
    """
    check_ndim(input, "input", 4, "(B, C, H, W)")
    sh, sw = _pair(stride, "stride")
    channels = input.shape[1]
    if filter is None:
        filter = _default_filter(input)
    if filter.ndim == 2:
        filter = filter.expand(channels, 1, *filter.shape)
    kh, kw = filter.shape[-2:]
    return F.conv2d(
        input,
        filter.to(input.dtype),
        stride=(sh, sw),
        padding=((kh - 1) // 2, (kw - 1) // 2),
        groups=channels,
    )


def blurmax_pool2d(
    input: torch.Tensor,
    kernel_size: int | tuple[int, int] | None = None,
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    ceil_mode: bool = False,
    filter: torch.Tensor | None = None,
) -> torch.Tensor:
    """Max-pool at stride 1, then blur with the pool's stride (baseline implementation)."""
    if kernel_size is None:
        kernel_size = 2
    stride = kernel_size if stride is None else stride
    pooled = F.max_pool2d(
        input, kernel_size, stride=1, padding=padding, dilation=dilation, ceil_mode=ceil_mode
    )
    return blur_2d(pooled, stride=stride, filter=filter)
