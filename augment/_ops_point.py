"""The point operations: autocontrast, equalize, posterize, solarize (each a 256-entry table).

Declared with :mod:`augment._ops`; documented, with the level scaling, in :mod:`augment.primitives`.
"""

from __future__ import annotations

import functools
import random

import numpy as np
from PIL import Image

from augment._images import per_band, point
from augment._ops import level_free_operation, operation

__all__ = [
    "autocontrast",
    "equalize",
    "posterize",
    "posterize_bits",
    "solarize",
    "solarize_threshold",
]

_X = np.arange(256, dtype=np.int64)
_IDENTITY = bytes(range(256))


def posterize_bits(level: float) -> int:
    """Bits kept by :func:`posterize` at ``level``: 4, 3, 2, 1 on [0, 2.5), [2.5, 5), ..."""
    return 4 - min(int(level * 0.4), 3)


def solarize_threshold(level: float) -> int:
    """Pixels at or above this value are inverted by :func:`solarize` (256: none)."""
    return 256 - int(level * 25.6)


@functools.cache
def _posterize_lut(bits: int) -> bytes:
    mask = 0xFF & ~((1 << (8 - bits)) - 1)
    return bytes(i & mask for i in range(256))


@functools.cache
def _solarize_lut(threshold: int) -> bytes:
    return bytes(i if i < threshold else 255 - i for i in range(256))


def _histograms(img: Image.Image) -> np.ndarray:
    return np.asarray(img.histogram(), dtype=np.int64).reshape(-1, 256)


@functools.lru_cache(maxsize=8192)
def _autocontrast_lut(lo: int, hi: int) -> bytes:
    if hi <= lo:  # a flat channel is left as it is
        return _IDENTITY
    span = hi - lo
    # round((x - lo) * 255 / span), half up, in exact integers
    scaled = ((_X - lo) * 510 + span) // (2 * span)
    return np.clip(scaled, 0, 255).astype(np.uint8).tobytes()


@level_free_operation
def autocontrast(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Stretch each channel's [min, max] range to [0, 255].

    :math:`x \\mapsto \\lfloor (x - lo) \\cdot 255 / (hi - lo) + 1/2 \\rfloor` per channel;
    a flat channel is left as it is. ``level`` and ``rng`` are unused.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (4, 3), 100)
        >>> img.putpixel((0, 0), 50)
        >>> sorted(set(autocontrast(img, 5).tobytes()))
        [0, 255]
    """
    # one histogram pass finds every channel's range (Image.getextrema copies each band first)
    present = _histograms(img) > 0
    lo = present.argmax(axis=1).tolist()
    hi = (255 - present[:, ::-1].argmax(axis=1)).tolist()
    return point(img, b"".join(map(_autocontrast_lut, lo, hi)))


@level_free_operation
def equalize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Equalise each channel's histogram, exactly as :func:`PIL.ImageOps.equalize`.

    With :math:`N` pixels, :math:`c_v` the number of pixels of the channel's largest value and
    :math:`C(x)` the number of pixels below :math:`x`, the step is :math:`s = \\lfloor (N -
    c_v) / 255 \\rfloor` and :math:`x \\mapsto \\min(255, \\lfloor (\\lfloor s/2 \\rfloor +
    C(x)) / s \\rfloor)`; a channel with one value (or :math:`s = 0`) is left as it is.
    ``level`` and ``rng`` are unused.

    Example:
        >>> from PIL import Image, ImageOps
        >>> img = Image.linear_gradient("L").resize((16, 9))
        >>> equalize(img, 0).tobytes() == ImageOps.equalize(img).tobytes()
        True
    """
    h = _histograms(img)
    n = h[0].sum()
    top = 255 - (h[:, ::-1] > 0).argmax(axis=1)  # each channel's largest value
    # a channel with one value has step 0 and stays as it is, as in ImageOps.equalize
    step = ((n - h[np.arange(len(h)), top]) // 255)[:, None]
    before = np.cumsum(h, axis=1) - h
    lut = np.where(step > 0, np.minimum((step // 2 + before) // np.maximum(step, 1), 255), _X)
    return point(img, lut.astype(np.uint8).tobytes())


@operation(draws=False)
def posterize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Keep the top :math:`4 - \\min(\\lfloor 0.4\\,\\ell \\rfloor, 3)` bits of every value.

    4 bits for levels in [0, 2.5), down to 1 bit for [7.5, 10] (the reference's
    ``4 - int(0.4 * level)``, which would keep no bits at all at level 10, stops at 1).
    ``rng`` is unused.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> posterize(Image.new("L", (2, 2), 0b10111111), 9).getpixel((0, 0))
        128
    """
    return point(img, per_band(_posterize_lut(posterize_bits(level)), img))


@operation(draws=False)
def solarize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Invert (:math:`x \\mapsto 255 - x`) values :math:`\\ge 256 - \\lfloor 25.6\\ell \\rfloor`.

    Level 0 changes nothing, level 10 inverts the whole image. ``rng`` is unused.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> solarize(Image.new("L", (1, 1), 200), 10).getpixel((0, 0))
        55
    """
    threshold = solarize_threshold(level)
    if threshold >= 256:
        return img
    return point(img, per_band(_solarize_lut(threshold), img))
