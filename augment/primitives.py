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

from collections.abc import Callable

from augment._images import ImageLike
from augment._ops_enhance import (
    brightness,
    brightness_original,
    color,
    color_original,
    contrast,
    contrast_original,
    original_factor,  # noqa: F401 - re-exported: the level scaling
    sharpness,
    sharpness_original,
    symmetric_factor,  # noqa: F401 - re-exported: the level scaling
)
from augment._ops_geometric import rotate, shear_x, shear_y, translate_x, translate_y
from augment._ops_point import (
    autocontrast,
    equalize,
    posterize,
    posterize_bits,  # noqa: F401 - re-exported: the level scaling
    solarize,
    solarize_threshold,  # noqa: F401 - re-exported: the level scaling
)

# Each operation is declared once, as its kernel (augment._ops): the point operations in
# augment/_ops_point.py, the geometric ones in _ops_geometric.py, the enhancements in
# _ops_enhance.py. This module is their public home (their ``__module__``) and holds the sets.
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
