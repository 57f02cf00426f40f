r"""The thirteen AugMix/RandAugment image operations and the augmentation sets.

Every operation is ``op(img, level, *, rng=None) -> img``: ``img`` is an 'RGB' or 'L' PIL image
of any size (or a (C, H, W) ``torch.uint8`` tensor, C = 3 or 1, given back as a tensor on the same
device), ``level`` a real number in :math:`[0, 10]` that sets the strength *exactly*; ``rng``
(``random.Random | numpy.random.Generator | None``) only picks the direction of the operations
that have one. :func:`~augment.augment_and_mix` and :func:`~augment.randaugment` decide the
levels: AugMix draws each operation's level uniformly from :math:`[\min(0.1, s), s]` for
severity :math:`s` (as the reference implementation's ``sample_level``), RandAugment applies
every operation at level :math:`s` (the paper's fixed magnitude :math:`M`).

Level scaling (:math:`\ell` the level, :math:`\sigma = \pm 1` a fair random sign, :math:`W
\times H` the image size):

==============  ====================================================================  ===========
operation       parameter at level :math:`\ell`                                       identity at
                                                                                      level 0
==============  ====================================================================  ===========
autocontrast    per channel, stretch [min, max] to [0, 255] (level unused)            no
equalize        per channel, histogram equalisation as ``ImageOps.equalize``          no
                (level unused)
posterize       keep :math:`4 - \min(\lfloor 0.4\ell \rfloor, 3)` bits (4 down to 1)  no
solarize        invert the values :math:`\ge 256 - \lfloor 25.6\ell \rfloor`          yes
rotate          :math:`3\ell\sigma` degrees counter-clockwise about the centre        yes
shear_x         :math:`x_{in} = x + 0.03\ell\sigma\,y` (origin top-left)              yes
shear_y         :math:`y_{in} = y + 0.03\ell\sigma\,x` (origin top-left)              yes
translate_x     shift by :math:`\sigma\lfloor \ell W / 30 \rfloor` pixels             yes
translate_y     shift by :math:`\sigma\lfloor \ell H / 30 \rfloor` pixels             yes
color           enhancement factor :math:`1 + 0.09\ell\sigma` (0.1 to 1.9)            yes
contrast        enhancement factor :math:`1 + 0.09\ell\sigma`                         yes
brightness      enhancement factor :math:`1 + 0.09\ell\sigma`                         yes
sharpness       enhancement factor :math:`1 + 0.09\ell\sigma`                         yes
\*_original     enhancement factor :math:`0.1 + 0.18\ell` (0.1 to 1.9)                no
==============  ====================================================================  ===========

The geometric operations resample with nearest neighbour and fill uncovered pixels with black,
as the reference implementations do. An enhancement with factor :math:`f` blends the image
with a degenerate version (grey for color, the mean grey level for contrast, black for
brightness, the 3x3 ``SMOOTH`` blur for sharpness): :math:`f = 1` is the identity, and the
results are those of ``PIL.ImageEnhance`` bit for bit.

Why two forms of the enhancements. The reference code (google-research/augmix) draws the
factor as :math:`0.1 + 0.18\ell` with :math:`\ell \sim U(0.1, s)`: a low severity can only
*weaken* colour, contrast, brightness and sharpness, and the strength does not grow with the
level (factors below 1 and above 1 have opposite effects). The ``*_original`` operations keep
that form for the ``'original'`` set; the ``'all'`` set uses :math:`1 \pm 0.09\ell`, whose
distance from the identity grows with the level in both directions.

Sets (``augmentation_sets``): ``'all'`` (the thirteen operations), ``'safe'`` (without color,
contrast, brightness and sharpness, which overlap the ImageNet-C / CIFAR-10-C corruptions) and
``'original'`` (``'all'`` with the ``*_original`` enhancements); the long names
``'augmentations_all'``, ``'augmentations_corruption_safe'`` and ``'augmentations_original'``
name the same lists.

Reference: Hendrycks et al., "AugMix: A Simple Data Processing Method to Improve Robustness and
Uncertainty", ICLR 2020; Cubuk et al., "RandAugment: Practical automated data augmentation with
a reduced search space", NeurIPS 2020 workshops.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from augment._common import (
    ImageLike,
    RngLike,
    as_pil,
    call_source,
    check_rng,
    from_pil,
    pixels,
)
from functional._args import check_in_range

__all__ = [
    "augmentation_sets",
    "autocontrast",
    "brightness",
    "brightness_original",
    "color",
    "color_original",
    "contrast",
    "contrast_original",
    "equalize",
    "posterize",
    "rotate",
    "sharpness",
    "sharpness_original",
    "shear_x",
    "shear_y",
    "solarize",
    "translate_x",
    "translate_y",
]

Kernel = Callable[[Image.Image, float, random.Random], Image.Image]

_NEAREST = Image.Resampling.NEAREST
_AFFINE = Image.Transform.AFFINE
_X = np.arange(256, dtype=np.int64)
_X32 = np.arange(256, dtype=np.float32)
_IDENTITY = bytes(range(256))
_SMALL = 2500  # pixels: below, Pillow beats NumPy at sharpness


# ------------------------------------------------------------------------- level scaling


def _sign(src: random.Random) -> float:
    return -1.0 if src.random() < 0.5 else 1.0


def posterize_bits(level: float) -> int:
    """Bits kept by :func:`posterize` at ``level``: 4, 3, 2, 1 on [0, 2.5), [2.5, 5), ..."""
    return 4 - min(int(level * 0.4), 3)


def solarize_threshold(level: float) -> int:
    """Pixels at or above this value are inverted by :func:`solarize` (256: none)."""
    return 256 - int(level * 25.6)


def symmetric_factor(level: float, sign: float) -> float:
    """Enhancement factor of the ``'all'`` forms: ``1 + 0.09 * level * sign``."""
    return 1.0 + 0.09 * level * sign


def original_factor(level: float) -> float:
    """Enhancement factor of the reference forms: ``0.1 + 0.18 * level``."""
    return 0.1 + 0.18 * level


# --------------------------------------------------------------------------- LUT helpers


def _point(img: Image.Image, lut: bytes) -> Image.Image:
    """Map every pixel through ``lut`` (256 bytes per band)."""
    # ``Image.point`` re-rounds the table in a Python loop on every call; the core method takes
    # the bytes as they are. Fall back to the public method if the core API ever moves.
    try:
        return img._new(img.im.point(lut, None))
    except AttributeError:  # pragma: no cover - depends on the Pillow version
        return img.point(list(lut))


def _per_band(lut: bytes, img: Image.Image) -> bytes:
    return lut * len(img.getbands())


@functools.cache
def _posterize_lut(bits: int) -> bytes:
    mask = 0xFF & ~((1 << (8 - bits)) - 1)
    return bytes(i & mask for i in range(256))


@functools.cache
def _solarize_lut(threshold: int) -> bytes:
    return bytes(i if i < threshold else 255 - i for i in range(256))


def _histograms(img: Image.Image) -> np.ndarray:
    return np.asarray(img.histogram(), dtype=np.int64).reshape(-1, 256)


@functools.lru_cache(maxsize=4096)
def _blend_lut(degenerate: int, factor: float) -> bytes:
    """``PIL.Image.blend(degenerate, img, factor)`` as a table: float32, clamped, truncated."""
    d = np.float32(degenerate)
    v = d + np.float32(factor) * (_X32 - d)
    np.maximum(v, 0.0, out=v)
    np.minimum(v, 255.0, out=v)
    return v.astype(np.uint8).tobytes()


# ------------------------------------------------------------------------------- kernels
# A kernel is (PIL image, level, random source) -> PIL image; it may return its input
# unchanged. Only the kernels listed in _RANDOM_KERNELS draw from the source.


class _NoDraws(random.Random):
    """The source handed to kernels that draw nothing: using it is a bug, and says so."""

    def random(self) -> float:
        raise RuntimeError("this augment kernel is deterministic and must not draw")


_NO_DRAWS = _NoDraws(0)


@functools.lru_cache(maxsize=8192)
def _autocontrast_lut(lo: int, hi: int) -> bytes:
    if hi <= lo:  # a flat channel is left as it is
        return _IDENTITY
    span = hi - lo
    # round((x - lo) * 255 / span), half up, in exact integers
    scaled = ((_X - lo) * 510 + span) // (2 * span)
    return np.clip(scaled, 0, 255).astype(np.uint8).tobytes()


def _autocontrast(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    # one histogram pass finds every channel's range (Image.getextrema copies each band first)
    present = _histograms(img) > 0
    lo = present.argmax(axis=1).tolist()
    hi = (255 - present[:, ::-1].argmax(axis=1)).tolist()
    return _point(img, b"".join(map(_autocontrast_lut, lo, hi)))


def _equalize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    h = _histograms(img)
    n = h[0].sum()
    top = 255 - (h[:, ::-1] > 0).argmax(axis=1)  # each channel's largest value
    # a channel with one value has step 0 and stays as it is, as in ImageOps.equalize
    step = ((n - h[np.arange(len(h)), top]) // 255)[:, None]
    before = np.cumsum(h, axis=1) - h
    lut = np.where(step > 0, np.minimum((step // 2 + before) // np.maximum(step, 1), 255), _X)
    return _point(img, lut.astype(np.uint8).tobytes())


def _posterize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _point(img, _per_band(_posterize_lut(posterize_bits(level)), img))


def _solarize(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    threshold = solarize_threshold(level)
    if threshold >= 256:
        return img
    return _point(img, _per_band(_solarize_lut(threshold), img))


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


def _rotate(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    degrees = 3.0 * level * _sign(src)
    if degrees == 0.0:
        return img
    # Image.rotate(degrees, NEAREST) (counter-clockwise about the centre), without its wrapper:
    # output pixel p reads input c + R(p - c), R = [[cos t, -sin t], [sin t, cos t]]
    t = math.radians(degrees)
    cos, sin = round(math.cos(t), 15), round(math.sin(t), 15)
    cx, cy = img.width / 2, img.height / 2
    return _affine(img, (cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy))


def _shear_x(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    shear = 0.03 * level * _sign(src)
    if shear == 0.0:
        return img
    return _affine(img, (1.0, shear, 0.0, 0.0, 1.0, 0.0))


def _shear_y(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    shear = 0.03 * level * _sign(src)
    if shear == 0.0:
        return img
    return _affine(img, (1.0, 0.0, 0.0, shear, 1.0, 0.0))


def _translate_x(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    pixels = int(level * img.width / 30.0) * _sign(src)
    if pixels == 0:
        return img
    return _affine(img, (1.0, 0.0, pixels, 0.0, 1.0, 0.0))


def _translate_y(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    pixels = int(level * img.height / 30.0) * _sign(src)
    if pixels == 0:
        return img
    return _affine(img, (1.0, 0.0, 0.0, 0.0, 1.0, pixels))


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
    return _point(img, _per_band(_blend_lut(mean, factor), img))


def _enhance_brightness(img: Image.Image, factor: float) -> Image.Image:
    if factor == 1.0:
        return img
    return _point(img, _per_band(_blend_lut(0, factor), img))


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


def _color(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_color(img, symmetric_factor(level, _sign(src)))


def _color_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_color(img, original_factor(level))


def _contrast(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_contrast(img, symmetric_factor(level, _sign(src)))


def _contrast_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_contrast(img, original_factor(level))


def _brightness(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_brightness(img, symmetric_factor(level, _sign(src)))


def _brightness_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_brightness(img, original_factor(level))


def _sharpness(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_sharpness(img, symmetric_factor(level, _sign(src)))


def _sharpness_original(img: Image.Image, level: float, src: random.Random) -> Image.Image:
    return _enhance_sharpness(img, original_factor(level))


_RANDOM_KERNELS = frozenset(
    {_rotate, _shear_x, _shear_y, _translate_x, _translate_y}
    | {_color, _contrast, _brightness, _sharpness}
)


def _run(kernel: Kernel, img: ImageLike, level: float, rng: RngLike) -> ImageLike:
    pil, kind = as_pil(img)
    lv = check_in_range(level, "level", 0.0, 10.0)
    check_rng(rng)
    out = kernel(pil, lv, call_source(rng) if kernel in _RANDOM_KERNELS else _NO_DRAWS)
    if out is pil:  # never hand the caller's own image object back
        out = pil.copy()
    return from_pil(out, kind)


# ---------------------------------------------------------------------- public operations


def autocontrast(img: ImageLike, level: float = 0.0, *, rng: RngLike = None) -> ImageLike:
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
    return _run(_autocontrast, img, level, rng)


def equalize(img: ImageLike, level: float = 0.0, *, rng: RngLike = None) -> ImageLike:
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
    return _run(_equalize, img, level, rng)


def posterize(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Keep the top :math:`4 - \\min(\\lfloor 0.4\\,\\ell \\rfloor, 3)` bits of every value.

    4 bits for levels in [0, 2.5), down to 1 bit for [7.5, 10] (the reference's
    ``4 - int(0.4 * level)``, which would keep no bits at all at level 10, stops at 1).
    ``rng`` is unused.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> posterize(Image.new("L", (2, 2), 0b10111111), 9).getpixel((0, 0))
        128
    """
    return _run(_posterize, img, level, rng)


def solarize(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Invert (:math:`x \\mapsto 255 - x`) values :math:`\\ge 256 - \\lfloor 25.6\\ell \\rfloor`.

    Level 0 changes nothing, level 10 inverts the whole image. ``rng`` is unused.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> solarize(Image.new("L", (1, 1), 200), 10).getpixel((0, 0))
        55
    """
    return _run(_solarize, img, level, rng)


def rotate(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
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
    return _run(_rotate, img, level, rng)


def shear_x(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Shear horizontally: output :math:`(x, y)` reads input :math:`(x + 0.03\\ell\\sigma y, y)`.

    :math:`\\sigma = \\pm 1` from ``rng``; the origin is the top-left corner (as the reference
    implementations), nearest-neighbour resampling, uncovered pixels black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> shear_x(Image.new("L", (30, 10), 9), 10, rng=random.Random(0)).size
        (30, 10)
    """
    return _run(_shear_x, img, level, rng)


def shear_y(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Shear vertically: output :math:`(x, y)` reads input :math:`(x, y + 0.03\\ell\\sigma x)`.

    :math:`\\sigma = \\pm 1` from ``rng``; origin top-left, nearest neighbour, black fill.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> shear_y(Image.new("L", (30, 10), 9), 0, rng=random.Random(0)).getpixel((29, 9))
        9
    """
    return _run(_shear_y, img, level, rng)


def translate_x(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Shift horizontally by :math:`\\sigma \\lfloor \\ell W / 30 \\rfloor` pixels (up to a third).

    :math:`\\sigma = \\pm 1` from ``rng``; the uncovered band is black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (30, 2), 255)
        >>> translate_x(img, 10, rng=random.Random(1)).tobytes().count(0)  # 10 columns black
        20
    """
    return _run(_translate_x, img, level, rng)


def translate_y(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Shift vertically by :math:`\\sigma \\lfloor \\ell H / 30 \\rfloor` pixels (up to a third).

    :math:`\\sigma = \\pm 1` from ``rng``; the uncovered band is black.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (2, 30), 255)
        >>> translate_y(img, 5, rng=random.Random(1)).tobytes().count(0)  # 5 rows black
        10
    """
    return _run(_translate_y, img, level, rng)


def color(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Change the saturation by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Color``).

    The sign comes from ``rng``: level 10 gives 0.1 (nearly grey) or 1.9. An 'L' image is
    returned unchanged.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> color(Image.new("RGB", (2, 2), (200, 100, 50)), 0).getpixel((0, 0))
        (200, 100, 50)
    """
    return _run(_color, img, level, rng)


def contrast(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Change the contrast by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Contrast``).

    Values move away from (factor > 1) or towards (factor < 1) the image's mean grey level.

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> contrast(Image.new("L", (3, 3), 77), 10, rng=random.Random(0)).getpixel((1, 1))
        77
    """
    return _run(_contrast, img, level, rng)


def brightness(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Scale every value by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Brightness``).

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> brightness(Image.new("L", (1, 1), 100), 10, rng=random.Random(3)).getpixel((0, 0))
        10
    """
    return _run(_brightness, img, level, rng)


def sharpness(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """Change the sharpness by the factor :math:`1 \\pm 0.09\\ell` (``ImageEnhance.Sharpness``).

    Blends with the image's 3x3 ``SMOOTH`` blur (border pixels are never changed).

    Example:
        >>> import random
        >>> from PIL import Image, ImageFilter
        >>> sharpness(Image.new("L", (5, 5), 40), 10, rng=random.Random(0)).getpixel((2, 2))
        40
    """
    return _run(_sharpness, img, level, rng)


def color_original(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """``ImageEnhance.Color`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> color_original(Image.new("RGB", (1, 1), (200, 100, 50)), 0).getpixel((0, 0))
        (131, 121, 116)
    """
    return _run(_color_original, img, level, rng)


def contrast_original(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """``ImageEnhance.Contrast`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> img = Image.new("L", (2, 1), 0)
        >>> img.putpixel((1, 0), 200)
        >>> list(contrast_original(img, 5).tobytes())
        [0, 200]
    """
    return _run(_contrast_original, img, level, rng)


def brightness_original(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """``ImageEnhance.Brightness`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> brightness_original(Image.new("L", (1, 1), 100), 10).getpixel((0, 0))
        190
    """
    return _run(_brightness_original, img, level, rng)


def sharpness_original(img: ImageLike, level: float, *, rng: RngLike = None) -> ImageLike:
    """``ImageEnhance.Sharpness`` with the reference factor :math:`0.1 + 0.18\\ell`.

    Example:
        >>> from PIL import Image, ImageFilter
        >>> sharpness_original(Image.new("L", (3, 3), 7), 2).size
        (3, 3)
    """
    return _run(_sharpness_original, img, level, rng)


KERNELS: dict[Callable[..., ImageLike], Kernel] = {
    autocontrast: _autocontrast,
    equalize: _equalize,
    posterize: _posterize,
    rotate: _rotate,
    solarize: _solarize,
    shear_x: _shear_x,
    shear_y: _shear_y,
    translate_x: _translate_x,
    translate_y: _translate_y,
    color: _color,
    contrast: _contrast,
    brightness: _brightness,
    sharpness: _sharpness,
    color_original: _color_original,
    contrast_original: _contrast_original,
    brightness_original: _brightness_original,
    sharpness_original: _sharpness_original,
}
"""The fast path for the package's own operations: public function -> its kernel."""


class _UserOp:
    """A caller's ``(img, level) -> img`` set member, as a kernel (picklable if ``op`` is)."""

    __slots__ = ("op",)

    def __init__(self, op: Callable[..., Any]) -> None:
        self.op = op

    def __call__(self, img: Image.Image, level: float, src: random.Random) -> Image.Image:
        out = self.op(img, level)
        name = getattr(self.op, "__name__", self.op)
        if not isinstance(out, Image.Image):
            raise TypeError(
                f"augmentation_set op {name!r} must return a PIL image, got {type(out).__name__}"
            )
        if out.size != img.size or out.mode != img.mode:
            raise ValueError(
                f"augmentation_set op {name!r} must keep the image's size and mode, got size "
                f"{out.size} and mode {out.mode!r} for an image of size {img.size} and mode "
                f"{img.mode!r} (every op must keep the size and mode)"
            )
        return out


def kernels_of(ops: Sequence[Callable[..., Any]]) -> tuple[Kernel, ...]:
    """The kernels of a set's members: ours directly, a caller's callable as ``op(img, level)``.

    A caller's callable gets no ``rng``: its own randomness is its own business.
    """
    return tuple(KERNELS.get(op) or _UserOp(op) for op in ops)


_GEOMETRIC_AND_POINT = [
    autocontrast,
    equalize,
    posterize,
    rotate,
    solarize,
    shear_x,
    shear_y,
    translate_x,
    translate_y,
]

augmentation_sets: dict[str, list[Callable[..., ImageLike]]] = {
    "all": [*_GEOMETRIC_AND_POINT, color, contrast, brightness, sharpness],
    "safe": list(_GEOMETRIC_AND_POINT),
    "original": [
        *_GEOMETRIC_AND_POINT,
        color_original,
        contrast_original,
        brightness_original,
        sharpness_original,
    ],
}
augmentation_sets["augmentations_all"] = augmentation_sets["all"]
augmentation_sets["augmentations_corruption_safe"] = augmentation_sets["safe"]
augmentation_sets["augmentations_original"] = augmentation_sets["original"]
