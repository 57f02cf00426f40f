"""The geometric operations: rotate, shear_x, shear_y, translate_x, translate_y (affine maps).

Nearest-neighbour resampling, black fill. Declared with :mod:`augment._ops`; documented, with
the level scaling, in :mod:`augment.primitives`.
"""

from __future__ import annotations

import math
import random

from PIL import Image

from augment._ops import operation
from augment._random import sign

__all__ = ["rotate", "shear_x", "shear_y", "translate_x", "translate_y"]

_NEAREST = Image.Resampling.NEAREST
_AFFINE = Image.Transform.AFFINE


def _affine(img: Image.Image, matrix: tuple[float, ...]) -> Image.Image:
    """``img.transform(img.size, AFFINE, matrix, NEAREST)``, black fill."""
    # Image.transform spends more time in Python than in C on small images; call the core
    # directly (same arguments as Image.transform passes), falling back if it ever moves.
    try:
        out = Image.new(img.mode, img.size)
        out.im.transform((0, 0, *img.size), img.im, _AFFINE, matrix, _NEAREST, 1)
        return out
    except (AttributeError, TypeError):  # pragma: no cover - depends on the Pillow version
        return img.transform(img.size, _AFFINE, matrix, resample=_NEAREST)


@operation(draws=True)
def rotate(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Rotate by :math:`\\pm 3\\ell` degrees (sign from ``rng``) about the image centre.

    Nearest-neighbour resampling, same size, uncovered corners black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("RGB", (40, 20), (255, 0, 0))
        >>> out = rotate(img, 10, rng=random.Random(0))
        >>> out.size, out.getpixel((20, 10)), out.getpixel((0, 0))
        ((40, 20), (255, 0, 0), (0, 0, 0))
    """
    degrees = 3.0 * level * sign(src)
    if degrees == 0.0:
        return img
    # Image.rotate(degrees, NEAREST) (counter-clockwise about the centre), without its wrapper:
    # output pixel p reads input c + R(p - c), R = [[cos t, -sin t], [sin t, cos t]]
    t = math.radians(degrees)
    cos, sin = round(math.cos(t), 15), round(math.sin(t), 15)
    cx, cy = img.width / 2, img.height / 2
    return _affine(img, (cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy))


@operation(draws=True)
def shear_x(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Shear horizontally: output :math:`(x, y)` reads input :math:`(x + 0.03\\ell\\sigma y, y)`.

    :math:`\\sigma = \\pm 1` from ``rng``; the origin is the top-left corner (as the reference
    implementations), nearest-neighbour resampling, uncovered pixels black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> shear_x(Image.new("L", (30, 10), 9), 10, rng=random.Random(0)).size
        (30, 10)
    """
    shear = 0.03 * level * sign(src)
    if shear == 0.0:
        return img
    return _affine(img, (1.0, shear, 0.0, 0.0, 1.0, 0.0))


@operation(draws=True)
def shear_y(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Shear vertically: output :math:`(x, y)` reads input :math:`(x, y + 0.03\\ell\\sigma x)`.

    :math:`\\sigma = \\pm 1` from ``rng``; origin top-left, nearest neighbour, black fill.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> shear_y(Image.new("L", (30, 10), 9), 0, rng=random.Random(0)).getpixel((29, 9))
        9
    """
    shear = 0.03 * level * sign(src)
    if shear == 0.0:
        return img
    return _affine(img, (1.0, 0.0, 0.0, shear, 1.0, 0.0))


@operation(draws=True)
def translate_x(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Shift horizontally by :math:`\\sigma \\lfloor \\ell W / 30 \\rfloor` pixels (up to a third).

    :math:`\\sigma = \\pm 1` from ``rng``; the uncovered band is black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (30, 2), 255)
        >>> translate_x(img, 10, rng=random.Random(1)).tobytes().count(0)  # 10 columns black
        20
    """
    pixels = int(level * img.width / 30.0) * sign(src)
    if pixels == 0:
        return img
    return _affine(img, (1.0, 0.0, pixels, 0.0, 1.0, 0.0))


@operation(draws=True)
def translate_y(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    """Shift vertically by :math:`\\sigma \\lfloor \\ell H / 30 \\rfloor` pixels (up to a third).

    :math:`\\sigma = \\pm 1` from ``rng``; the uncovered band is black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (2, 30), 255)
        >>> translate_y(img, 5, rng=random.Random(1)).tobytes().count(0)  # 5 rows black
        10
    """
    pixels = int(level * img.height / 30.0) * sign(src)
    if pixels == 0:
        return img
    return _affine(img, (1.0, 0.0, 0.0, 0.0, 1.0, pixels))
