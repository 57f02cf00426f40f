r"""RandAugment (Cubuk et al. 2019): ``depth`` random operations at one fixed magnitude.

Each of the ``depth`` steps picks an operation uniformly, with replacement, from the
augmentation set and applies it at level ``severity`` (the paper's :math:`N` and :math:`M`; see
:mod:`augment.primitives` for what a level means to each operation; the direction of the signed
operations is a fair coin).

Reference: Cubuk et al., "RandAugment: Practical automated data augmentation with a reduced
search space", NeurIPS 2020, https://arxiv.org/abs/1909.13719.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image

from augment._args import RANDAUGMENT_MIN_SEVERITY, check_depth, check_rng, check_severity
from augment._base import SetTransform, resolve_set, set_repr
from augment._images import ImageLike, as_pil, from_pil, map_images
from augment._ops import Kernel, kernels_of
from augment._random import RngLike, call_source
from augment.primitives import augmentation_sets

__all__ = ["RandAugment", "randaugment"]


def _randaugment_pil(
    img: Image.Image,
    severity: float,
    depth: int,
    kernels: Sequence[Kernel],
    src: random.Random,
) -> Image.Image:
    n_ops = len(kernels)
    out = img
    for _ in range(depth):
        out = kernels[int(src.random() * n_ops)](out, severity, src)
    if out is img:  # never hand the caller's own image object back
        out = img.copy()
    return out


def randaugment(
    img: ImageLike,
    severity: float = 9,
    depth: int = 2,
    augmentation_set: str | Sequence[Callable[..., Any]] = "all",
    rng: RngLike = None,
) -> ImageLike:
    """Apply RandAugment to one image: ``depth`` random operations at level ``severity``.

    Args:
        img: an 'RGB' or 'L' PIL image of any size, or a (C, H, W) tensor (C = 3 or 1) of
            ``torch.uint8`` or of float16/32/64 with values in [0, 1] (Composer's
            ``randaugment_image``: the levels ``round(255·x)`` are augmented and come back as
            ``level / 255``), or an (N, C, H, W) batch of such tensors, each image augmented in
            turn; the result is of the same kind, size, mode, dtype and device.
        severity: the magnitude, in [1, 10], applied to every operation (the paper's
            :math:`M`; the Composer seed's range; a float is accepted, not only an int).
        depth: number of operations, ``>= 0`` (0 returns a copy).
        augmentation_set: ``'all'``, ``'safe'``, ``'original'`` (or the long names
            ``'augmentations_all'``, ``'augmentations_corruption_safe'``,
            ``'augmentations_original'``), or a sequence of callables ``(img, level) -> img``.
        rng: ``random.Random``, ``numpy.random.Generator`` or ``None`` (torch's global
            generator); same seed, same output.

    Returns:
        The augmented image.

    Raises:
        ValueError: severity outside [1, 10], depth < 0, an unknown set name, or an unsupported
            image mode or tensor shape.
        TypeError: an image that is neither a PIL image nor a uint8 or float tensor, or a bad
            ``rng``.

    Example:
        >>> import random
        >>> from PIL import Image
        >>> img = Image.linear_gradient("L").resize((48, 32))
        >>> out = randaugment(img, severity=9, depth=2, rng=random.Random(0))
        >>> out.size, out.mode
        ((48, 32), 'L')
        >>> import torch
        >>> batch = torch.rand(2, 3, 32, 48, dtype=torch.float64)  # each image in turn
        >>> randaugment(batch, rng=random.Random(0)).dtype
        torch.float64

    Reference:
        Cubuk et al., "RandAugment: Practical automated data augmentation with a reduced search
        space", NeurIPS 2020.
    """
    ops = resolve_set(augmentation_set, augmentation_sets)
    sev = check_severity(severity, minimum=RANDAUGMENT_MIN_SEVERITY)
    d = check_depth(depth, allow_random=False)
    check_rng(rng)
    kernels, src = kernels_of(ops), call_source(rng)

    def one(image: ImageLike) -> ImageLike:
        pil, kind = as_pil(image, allow_float=True)
        return from_pil(_randaugment_pil(pil, sev, d, kernels, src), kind)

    return map_images(one, img)


class RandAugment(SetTransform):
    """RandAugment as a transform for ``torchvision.transforms.Compose`` and ``DataLoader`` workers.

    See :func:`randaugment` for the arguments and :class:`~augment.AugMix` for how ``rng``
    behaves in worker processes. The transform is picklable.

    Example:
        >>> import random
        >>> from PIL import Image
        >>> t = RandAugment(severity=9, depth=2)
        >>> t
        RandAugment(severity=9, depth=2, augmentation_set='all', rng=None)
        >>> t(Image.new("L", (40, 30), 128)).size
        (40, 30)
    """

    def __init__(
        self,
        severity: float = 9,
        depth: int = 2,
        augmentation_set: str | Sequence[Callable[..., Any]] = "all",
        rng: RngLike = None,
    ) -> None:
        super().__init__(
            severity,
            depth,
            augmentation_set,
            rng,
            random_depth=False,
            min_severity=RANDAUGMENT_MIN_SEVERITY,
        )

    def __call__(self, img: ImageLike) -> ImageLike:
        pil, kind = as_pil(img)
        out = _randaugment_pil(
            pil, float(self.severity), self.depth, self._kernels, self._stream.source()
        )
        return from_pil(out, kind)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(severity={self.severity}, depth={self.depth}, "
            f"augmentation_set={set_repr(self.augmentation_set)}, rng={self._stream!r})"
        )
