"""BlurPool: anti-aliased downsampling (Zhang 2019).

A strided convolution or max-pool samples its input without first removing the frequencies the
new grid cannot represent, so its output changes when the input shifts by one pixel. BlurPool
low-pass filters before sampling (the default filter is :math:`\\tfrac{1}{16}[1\\,2\\,1]^\\top
[1\\,2\\,1]`), which makes networks more shift-invariant and often more accurate.

Layout of this package, one job per module:

* :mod:`~functional.blurpool.kernels`: the private blur kernels (the cache-blocked CPU
  shift-and-add passes and their autograd Function, the depthwise convolution used elsewhere).
* :mod:`~functional.blurpool.ops`: the ops :func:`blur_2d` and :func:`blurmax_pool2d`.
* :mod:`~functional.blurpool.layers`: the layers :class:`BlurConv2d`, :class:`BlurMaxPool2d` and
  :class:`BlurPool2d`.
* :mod:`~functional.blurpool.transform`: the model transform :func:`apply_blurpool`.

Reference: R. Zhang. *Making Convolutional Networks Shift-Invariant Again.* ICML 2019.
https://arxiv.org/abs/1904.11486
"""

from functional.blurpool.layers import BlurConv2d, BlurMaxPool2d, BlurPool2d
from functional.blurpool.ops import blur_2d, blurmax_pool2d
from functional.blurpool.transform import apply_blurpool

__all__ = [
    "BlurConv2d",
    "BlurMaxPool2d",
    "BlurPool2d",
    "apply_blurpool",
    "blur_2d",
    "blurmax_pool2d",
]
