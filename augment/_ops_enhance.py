"""The enhancements: color, contrast, brightness, sharpness, in two forms (``PIL.ImageEnhance``).

Each blends the image with a degenerate version of it by a factor: :math:`1 \\pm 0.09\\ell`
(the ``'all'`` forms, a random sign) or the reference's :math:`0.1 + 0.18\\ell` (the
``*_original`` forms). Declared with :mod:`augment._ops`; documented in :mod:`augment.primitives`.
"""

from __future__ import annotations

import functools
import random

import numpy as np
from PIL import Image, ImageFilter

from augment._images import per_band, pixels, point
from augment._ops import operation
from augment._random import sign

__all__ = [
    "brightness",
    "brightness_original",
    "color",
    "color_original",
    "contrast",
    "contrast_original",
    "original_factor",
    "sharpness",
    "sharpness_original",
    "symmetric_factor",
]

_X = np.arange(256, dtype=np.int64)
_X32 = np.arange(256, dtype=np.float32)
_SMALL = 2500  # pixels: below, Pillow beats NumPy at sharpness


def symmetric_factor(level: float, sign: float) -> float:
    """Enhancement factor of the ``'all'`` forms: ``1 + 0.09 * level * sign``."""
    return 1.0 + 0.09 * level * sign


def original_factor(level: float) -> float:
    """Enhancement factor of the reference forms: ``0.1 + 0.18 * level``."""
    return 0.1 + 0.18 * level


@functools.lru_cache(maxsize=4096)
def _blend_lut(degenerate: int, factor: float) -> bytes:
    """``PIL.Image.blend(degenerate, img, factor)`` as a table: float32, clamped, truncated."""
    d = np.float32(degenerate)
    v = d + np.float32(factor) * (_X32 - d)
    np.maximum(v, 0.0, out=v)
    np.minimum(v, 255.0, out=v)
    return v.astype(np.uint8).tobytes()


def _enhance_color(img: Image.Image, factor: float) -> Image.Image:
    if factor == 1.0 or img.mode == "L":  # a grey image has no colour to change
        return img
    grey = img.convert("L")
    return Image.blend(Image.merge("RGB", (grey, grey, grey)), img, factor)


def _enhance_contrast(img: Image.Image, factor: float) -> Image.Image:
    if factor == 1.0:
        return img
    grey = img if img.mode == "L" else img.convert("L")
    h = np.asarray(grey.histogram(), dtype=np.int64)
    n = img.width * img.height
    mean = (2 * int(h @ _X) + n) // (2 * n)  # int(mean + 0.5), as ImageEnhance.Contrast
    return point(img, per_band(_blend_lut(mean, factor), img))


def _enhance_brightness(img: Image.Image, factor: float) -> Image.Image:
    if factor == 1.0:
        return img
    return point(img, per_band(_blend_lut(0, factor), img))


def _enhance_sharpness(img: Image.Image, factor: float) -> Image.Image:
    """``Image.blend(img.filter(ImageFilter.SMOOTH), img, factor)``, bit for bit, in NumPy.

    ``SMOOTH`` is the 3x3 kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded half up, on
    the interior pixels; Pillow leaves the border pixels as they are, so the blend does too.
    Twice as fast as Pillow's float convolution (which dominated RandAugment's time) from about
    48x48 pixels up; smaller images go through Pillow.
    """
    if factor == 1.0 or img.width < 3 or img.height < 3:
        return img
    if img.width * img.height < _SMALL:  # below ~48x48 Pillow's lower call overhead wins
        return Image.blend(img.filter(ImageFilter.SMOOTH), img, factor)
    a = pixels(img)
    u = a.astype(np.uint16)
    k = u[:-2] + u[1:-1]
    k += u[2:]
    k = k[:, :-2] + k[:, 1:-1] + k[:, 2:]  # 3x3 box sums of the interior pixels
    centre = u[1:-1, 1:-1]
    k += centre << 2  # the centre weighs 5
    smooth = ((k << 1) + 13) // 26  # floor(k / 13 + 1/2), exactly
    smooth = smooth.astype(np.float32)
    # Image.blend: float32 smooth + factor * (img - smooth), clamped to [0, 255], truncated
    out = centre.astype(np.float32)
    out -= smooth
    out *= np.float32(factor)
    out += smooth
    np.maximum(out, 0.0, out=out)
    np.minimum(out, 255.0, out=out)
    res = a.copy()
    res[1:-1, 1:-1] = out
    return Image.frombytes(img.mode, img.size, res)


@operation(draws=True)
def color(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Change the saturation by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Color``).

    The sign comes from ``rng``: level 10 gives 0.1 (nearly grey) or 1.9. An 'L' image is
    returned unchanged.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> color(Image.new("RGB", (2, 2), (200, 100, 50)), 0).getpixel((0, 0))
        (200, 100, 50)
    """
    return _enhance_color(img, symmetric_factor(level, sign(src)))


@operation(draws=True)
def contrast(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Change the contrast by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Contrast``).

    Values move away from (factor > 1) or towards (factor < 1) the image's mean grey level.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> contrast(Image.new("L", (3, 3), 77), 10, rng=random.Random(0)).getpixel((1, 1))
        77
    """
    return _enhance_contrast(img, symmetric_factor(level, sign(src)))


@operation(draws=True)
def brightness(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Scale every value by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Brightness``).

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> brightness(Image.new("L", (1, 1), 100), 10, rng=random.Random(3)).getpixel((0, 0))
        10
    """
    return _enhance_brightness(img, symmetric_factor(level, sign(src)))


@operation(draws=True)
def sharpness(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Change the sharpness by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Sharpness``).

    Blends with the image's 3x3 ``SMOOTH`` blur (border pixels are never changed).

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> sharpness(Image.new("L", (5, 5), 40), 10, rng=random.Random(0)).getpixel((2, 2))
        40
    """
    return _enhance_sharpness(img, symmetric_factor(level, sign(src)))


@operation(draws=False)
def color_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """``ImageEnhance.Color`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> color_original(Image.new("RGB", (1, 1), (200, 100, 50)), 0).getpixel((0, 0))
        (131, 121, 116)
    """
    return _enhance_color(img, original_factor(level))


@operation(draws=False)
def contrast_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """``ImageEnhance.Contrast`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (2, 1), 0)
        >>> img.putpixel((1, 0), 200)
        >>> list(contrast_original(img, 5).tobytes())
        [0, 200]
    """
    return _enhance_contrast(img, original_factor(level))


@operation(draws=False)
def brightness_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """``ImageEnhance.Brightness`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> brightness_original(Image.new("L", (1, 1), 100), 10).getpixel((0, 0))
        190
    """
    return _enhance_brightness(img, original_factor(level))


@operation(draws=False)
def sharpness_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """``ImageEnhance.Sharpness`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> sharpness_original(Image.new("L", (3, 3), 7), 2).size
        (3, 3)
    """
    return _enhance_sharpness(img, original_factor(level))
