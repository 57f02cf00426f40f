"""PIL augmentations for torchvision pipelines: AugMix, RandAugment and their primitives.

``AugMix`` and ``RandAugment`` are transforms (picklable callables with a ``repr``) for
``torchvision.transforms.Compose`` and multi-worker ``DataLoader``\\ s; ``augment_and_mix`` and
``randaugment`` are the same algorithms as functions. They take 'RGB' or 'L' PIL images of any
size, or (C, H, W) ``torch.uint8`` tensors (given back as tensors). The thirteen operations
``(img, level) -> img`` and the sets ``augmentation_sets['all' | 'safe' | 'original']`` are
documented, with their exact level scaling, in :mod:`augment.primitives`.

Randomness comes from ``rng`` (``random.Random``, ``numpy.random.Generator`` or ``None`` for
torch's global generator): same seed, same output.

Example:
    >>> import random
    >>> import torch
    >>> from PIL import Image
    >>> from torchvision import transforms
    >>> import augment
    >>> pipeline = transforms.Compose([
    ...     transforms.RandomHorizontalFlip(),
    ...     augment.AugMix(severity=3, width=3, depth=-1, alpha=1.0, rng=random.Random(0)),
    ...     transforms.PILToTensor(),
    ... ])
    >>> x = pipeline(Image.new("RGB", (64, 48), (120, 60, 200)))
    >>> x.shape, x.dtype
    (torch.Size([3, 48, 64]), torch.uint8)
    >>> ra = augment.RandAugment(severity=9, depth=2, augmentation_set="safe")
    >>> ra(torch.zeros(3, 20, 30, dtype=torch.uint8)).shape
    torch.Size([3, 20, 30])
"""

from augment.augmix import AugMix, augment_and_mix
from augment.batched import (
    BatchAugMix,
    BatchRandAugment,
    batch_augment_and_mix,
    batch_randaugment,
)
from augment.primitives import (
    augmentation_sets,
    autocontrast,
    brightness,
    brightness_original,
    color,
    color_original,
    contrast,
    contrast_original,
    equalize,
    posterize,
    rotate,
    sharpness,
    sharpness_original,
    shear_x,
    shear_y,
    solarize,
    translate_x,
    translate_y,
)
from augment.randaugment import RandAugment, randaugment

__all__: list[str] = [
    "AugMix",
    "BatchAugMix",
    "BatchRandAugment",
    "RandAugment",
    "augment_and_mix",
    "augmentation_sets",
    "autocontrast",
    "batch_augment_and_mix",
    "batch_randaugment",
    "brightness",
    "brightness_original",
    "color",
    "color_original",
    "contrast",
    "contrast_original",
    "equalize",
    "posterize",
    "randaugment",
    "rotate",
    "sharpness",
    "sharpness_original",
    "shear_x",
    "shear_y",
    "solarize",
    "translate_x",
    "translate_y",
]
