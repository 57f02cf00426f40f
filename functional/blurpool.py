"""BlurPool: anti-aliased downsampling (Zhang 2019).

The ops section (``blur_2d``, ``blurmax_pool2d``) holds the stateless kernels; the layers and the
``apply_blurpool`` transform follow below it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from functional._checks import check_ndim

__all__ = ["blur_2d", "blurmax_pool2d"]
__all__ += ["BlurConv2d", "BlurMaxPool2d", "BlurPool2d", "apply_blurpool"]

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


# ---------------------------------------------------------------------------------------------
# Layers and the apply_blurpool transform
# ---------------------------------------------------------------------------------------------

from torch import nn  # noqa: E402

from functional._checks import check_int, check_module, clone_module_as, warn_no_effect  # noqa: E402
from surgery import replace_module_classes  # noqa: E402
from surgery._types import OptimizerArg, ReplacementFunction  # noqa: E402

_BLUR_TAPS = (1.0, 2.0, 1.0)


def _blur_kernel(channels: int | None, *, device=None, dtype=None) -> torch.Tensor:
    """The default 3x3 binomial filter, as (3, 3) or expanded to (channels, 1, 3, 3)."""
    taps = torch.tensor(_BLUR_TAPS, device=device, dtype=dtype or torch.get_default_dtype())
    kernel = torch.outer(taps, taps) / 16
    if channels is None:
        return kernel
    return kernel.expand(channels, 1, 3, 3).contiguous()


def _stride_pair(stride: int | tuple[int, ...]) -> tuple[int, int]:
    if isinstance(stride, int) and not isinstance(stride, bool):
        return stride, stride
    if (
        isinstance(stride, (tuple, list))
        and len(stride) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in stride)
    ):
        return int(stride[0]), int(stride[1])
    raise TypeError(f"stride must be an int or a pair of ints, got {stride!r}")


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
        if not isinstance(blur_first, bool):
            raise TypeError(f"blur_first must be a bool, got {type(blur_first).__name__}")
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
        channels: number of input channels, or 0 to accept any.
        stride: downsampling factor along H and W (int or pair).
        padding: must be 1 (accepted for Composer compatibility; see :func:`blur_2d`).

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
        self, channels: int = 0, stride: int | tuple[int, int] = 2, padding: int = 1
    ) -> None:
        super().__init__()
        self.channels = check_int(channels, "channels", minimum=0)
        if padding != 1 or isinstance(padding, bool):
            raise ValueError(
                f"padding must be 1 (the 3x3 filter is zero-padded by 1 to keep the size at "
                f"stride 1), got {padding!r}"
            )
        self.stride = _stride_pair(stride)
        if min(self.stride) < 1:
            raise ValueError(f"stride must be >= 1, got {stride!r}")
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
    for name, value in (
        ("replace_convs", replace_convs),
        ("replace_maxpools", replace_maxpools),
        ("blur_first", blur_first),
    ):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
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

    policies: dict[type[nn.Module], ReplacementFunction] = {}
    if replace_convs:
        policies[nn.Conv2d] = convert_conv
    if replace_maxpools:
        policies[nn.MaxPool2d] = convert_pool
    replaced = replace_module_classes(
        model,
        policies,
        optimizers=optimizers,
        exact_type=True,
    )
    if not replaced:
        looked_for = [
            what
            for what, on in (
                (f"strided nn.Conv2d with in_channels >= {min_channels}", replace_convs),
                ("strided nn.MaxPool2d (ceil_mode=False, return_indices=False)", replace_maxpools),
            )
            if on
        ]
        warn_no_effect(
            "apply_blurpool",
            " or ".join(looked_for)
            or "layer to convert (replace_convs and replace_maxpools are both False)",
        )
    return model
