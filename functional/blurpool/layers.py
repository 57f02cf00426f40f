"""BlurPool's layers: :class:`BlurConv2d`, :class:`BlurMaxPool2d` and :class:`BlurPool2d`, which
subclass what they replace and own their conversion (``from_conv2d``, ``from_maxpool2d``), and
``_BlurTaps``, their shared filter buffer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as nnf

from functional._args import check_bool, check_int, check_ndim, check_pair
from functional._composition import decorate
from functional._deploy import NotScriptable
from functional.blurpool.kernels import _DEFAULT_TAPS, _separable_blur
from functional.blurpool.ops import _blurmax

__all__ = ["BlurConv2d", "BlurMaxPool2d", "BlurPool2d"]


def _binomial_taps(*, device=None, dtype=None) -> torch.Tensor:
    """The 1-D taps ``[1, 2, 1] / 4`` of the default filter (their outer product)."""
    return torch.tensor(_DEFAULT_TAPS, device=device, dtype=dtype or torch.get_default_dtype())


class _BlurTaps(NotScriptable):
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

    # A decoration of nn.Conv2d (functional/_composition.py): other transforms see through it,
    # and it sits inside squeeze-excite, on the factor holding the stride when factorized.
    _decorates = nn.Conv2d
    _decoration_rank = 1
    _decoration_side = "input"

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

        A convolution another transform made (squeeze-excite, weight standardization) keeps
        what that transform added: the result is both.
        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        new = decorate(conv, cls)
        new._init_blur(blur_first)
        return new

    @classmethod
    def _carry_onto(cls, source: BlurConv2d, conv: nn.Conv2d) -> BlurConv2d:
        """``source``'s blur (its setting and its taps) on ``conv``."""
        new = cls.from_conv2d(conv, blur_first=source.blur_first)
        new._buffers["blur_taps"] = source.blur_taps
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
