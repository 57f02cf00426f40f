r"""AugMix (Hendrycks et al. 2020): mix several random augmentation chains with the image.

.. math::

    w \sim \mathrm{Dirichlet}(\alpha, \dots, \alpha), \qquad m \sim \mathrm{Beta}(\alpha, \alpha),
    \qquad x_{\mathrm{aug}} = (1 - m)\, x + m \sum_{i=1}^{\mathrm{width}} w_i\,
    \mathrm{chain}_i(x)

Each chain applies ``depth`` operations (``depth = -1``: a uniform random depth in {1, 2, 3}
per chain) drawn uniformly, with replacement, from the augmentation set, each at a level drawn
uniformly from :math:`[\min(0.1, s), s]` (:math:`s` the severity; see
:mod:`augment.primitives` for what a level means to each operation). The mix is computed once, in
float32 over all chains, and rounded to the nearest integer.

Reference: Hendrycks et al., "AugMix: A Simple Data Processing Method to Improve Robustness and
Uncertainty", ICLR 2020, https://arxiv.org/abs/1912.02781 (code: google-research/augmix).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from augment._args import check_alpha, check_depth, check_int, check_rng, check_severity
from augment._base import SetTransform, resolve_set, set_repr
from augment._images import ImageLike, as_pil, from_array, map_images, pixels
from augment._ops import Kernel, kernels_of
from augment._random import RngLike, beta, call_source, dirichlet
from augment.primitives import augmentation_sets

__all__ = ["AugMix", "augment_and_mix"]


def _augmix_array(
    img: Image.Image,
    severity: float,
    depth: int,
    width: int,
    alpha: float,
    kernels: Sequence[Kernel],
    src: random.Random,
) -> np.ndarray:
    """The AugMix'd image as an (H, W) or (H, W, 3) uint8 array."""
    weights = dirichlet(src, alpha, width)
    m = beta(src, alpha)
    low = min(0.1, severity)
    spread = severity - low
    n_ops = len(kernels)
    draw = src.random

    base = pixels(img)
    acc = np.multiply(base, np.float32(1.0 - m), dtype=np.float32)
    tmp = np.empty_like(acc)
    for w in weights:
        aug = img
        for _ in range(depth if depth > 0 else 1 + int(draw() * 3)):
            kernel = kernels[int(draw() * n_ops)]
            aug = kernel(aug, low + spread * draw(), src)
        chain = base if aug is img else pixels(aug)
        if chain.shape != base.shape:
            raise ValueError(
                f"an augmentation chain returned an image of shape {chain.shape}, "
                f"expected {base.shape} (every op must keep the size and mode)"
            )
        np.multiply(chain, np.float32(m * w), out=tmp)
        acc += tmp
    acc += 0.5  # round half up; a convex combination of [0, 255] values stays below 255.5
    return acc.astype(np.uint8)


def augment_and_mix(
    img: ImageLike,
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[Callable[..., Any]] = "all",
    rng: RngLike = None,
) -> ImageLike:
    r"""Apply AugMix to one image.

    .. math::

        x_{\mathrm{aug}} = (1 - m)\, x + m \sum_{i=1}^{\mathrm{width}} w_i\, \mathrm{chain}_i(x),
        \quad w \sim \mathrm{Dirichlet}(\alpha \mathbf{1}), \quad m \sim \mathrm{Beta}(\alpha,
        \alpha)

    Args:
        img: an 'RGB' or 'L' PIL image of any size, or a (C, H, W) tensor (C = 3 or 1) of
            ``torch.uint8`` or of float16/32/64 with values in [0, 1] (Composer's
            ``augmix_image``: the levels ``round(255·x)`` are augmented and come back as
            ``level / 255``), or an (N, C, H, W) batch of such tensors, each image augmented in
            turn; the result is of the same kind, size, mode, dtype and device.
        severity: strength in [0, 10] (the Composer seed's range); each operation's level is
            drawn uniformly from ``[min(0.1, severity), severity]``. 0 leaves the geometric
            operations and solarize without effect, but not the level-free ones (autocontrast,
            equalize) nor posterize: unlike the seed's "0 (no augmentation)", severity 0 still
            augments, as Composer's own implementation does; leave the transform out for none.
        depth: operations per chain, ``>= 1``, or ``-1`` for a uniform random depth in {1, 2, 3}
            drawn per chain.
        width: number of chains, ``>= 1``.
        alpha: concentration of the Dirichlet chain weights and of the Beta skip weight,
            ``> 0``; large values mix evenly, small ones pick nearly one chain (and nearly all or
            none of the augmentation).
        augmentation_set: ``'all'``, ``'safe'``, ``'original'`` (or the long names
            ``'augmentations_all'``, ``'augmentations_corruption_safe'``,
            ``'augmentations_original'``), or a sequence of callables ``(img, level) -> img``
            that keep the size and mode.
        rng: ``random.Random``, ``numpy.random.Generator`` or ``None`` (torch's global
            generator); same seed, same output.

    Returns:
        The mixed image, rounded to the nearest integer.

    Raises:
        ValueError: severity outside [0, 10], width < 1, depth neither -1 nor >= 1,
            alpha <= 0, an unknown set name, or an unsupported image mode or tensor shape.
        TypeError: an image that is neither a PIL image nor a uint8 or float tensor, or a bad
            ``rng``.

    Example:
        >>> import random
        >>> from PIL import Image
        >>> img = Image.linear_gradient("L").convert("RGB").resize((48, 32))
        >>> out = augment_and_mix(img, severity=3, width=3, rng=random.Random(0))
        >>> out.size, out.mode
        ((48, 32), 'RGB')
        >>> out == augment_and_mix(img, severity=3, width=3, rng=random.Random(0))
        True
        >>> import torch
        >>> x = torch.rand(3, 32, 48, dtype=torch.float16)  # a float tensor in [0, 1]
        >>> y = augment_and_mix(x, rng=random.Random(0))
        >>> y.dtype, y.shape, bool(((y >= 0) & (y <= 1)).all())
        (torch.float16, torch.Size([3, 32, 48]), True)

    Reference:
        Hendrycks et al., "AugMix: A Simple Data Processing Method to Improve Robustness and
        Uncertainty", ICLR 2020.
    """
    ops = resolve_set(augmentation_set, augmentation_sets)
    sev = check_severity(severity)
    d = check_depth(depth, allow_random=True)
    wd = check_int(width, "width", minimum=1)
    a = check_alpha(alpha)
    check_rng(rng)
    kernels, src = kernels_of(ops), call_source(rng)

    def one(image: ImageLike) -> ImageLike:
        pil, kind = as_pil(image, allow_float=True)
        return from_array(_augmix_array(pil, sev, d, wd, a, kernels, src), kind)

    return map_images(one, img)


class AugMix(SetTransform):
    """AugMix as a transform for ``torchvision.transforms.Compose`` and ``DataLoader`` workers.

    See :func:`augment_and_mix` for the arguments. The transform is picklable.

    Randomness in ``DataLoader`` workers. With ``rng=None`` it draws from torch's global
    generator, which torch seeds differently in every worker and epoch (reproducible under
    ``torch.manual_seed``). With a seeded ``rng``, each worker continues from a stream derived
    from the rng's state and its worker id: no two workers repeat each other, a run with a fixed
    number of workers is reproducible, and each epoch differs from the last (``fork`` workers:
    the parent's stream moves on at every fork; ``spawn``/``forkserver`` workers: torch's
    per-epoch worker seed is mixed in, so seed torch too). Calling :func:`augment_and_mix`
    with one shared ``rng`` inside a dataset instead would replay the same draws in every
    worker.

    Example:
        >>> import random
        >>> from PIL import Image
        >>> t = AugMix(severity=3, width=3, rng=random.Random(0))
        >>> t  # doctest: +NORMALIZE_WHITESPACE
        AugMix(severity=3, depth=-1, width=3, alpha=1.0, augmentation_set='all',
               rng=random.Random(...))
        >>> t(Image.new("RGB", (40, 30), (30, 90, 150))).size
        (40, 30)
    """

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[Callable[..., Any]] = "all",
        rng: RngLike = None,
    ) -> None:
        super().__init__(severity, depth, augmentation_set, rng, random_depth=True)
        self.width = check_int(width, "width", minimum=1)
        check_alpha(alpha)
        self.alpha = alpha

    def __call__(self, img: ImageLike) -> ImageLike:
        pil, kind = as_pil(img)
        arr = _augmix_array(
            pil,
            float(self.severity),
            self.depth,
            self.width,
            float(self.alpha),
            self._kernels,
            self._stream.source(),
        )
        return from_array(arr, kind)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(severity={self.severity}, depth={self.depth}, "
            f"width={self.width}, alpha={self.alpha}, "
            f"augmentation_set={set_repr(self.augmentation_set)}, "
            f"rng={self._stream!r})"
        )
