"""CutMix: paste a box from a partner image and mix the labels by its area (Yun et al. 2019).

Paper: `CutMix: Regularization Strategy to Train Strong Classifiers with Localizable Features
<https://arxiv.org/abs/1905.04899>`_.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from functional._args import (
    check_bool,
    check_generator,
    check_in_range,
    check_int,
    check_positive,
    check_same_batch,
    check_tensor,
)
from functional._batch import dense_labels, random_device, random_permutation, sample_beta
from functional._numeric import sym_floor
from functional._values import check_indices, check_values

__all__ = ["cutmix_batch"]


def _sides_from_alpha(
    height: int, width: int, alpha: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Box sides ``floor(H·sqrt(1 - λ))``, ``floor(W·sqrt(1 - λ))``, ``λ ~ Beta(alpha, alpha)``:
    int64 0-d tensors on the generator's device."""
    ratio = torch.sqrt(1.0 - sample_beta(alpha, (), generator))
    return torch.floor(height * ratio).long(), torch.floor(width * ratio).long()


def _sides_from_length(
    height: int, width: int, length: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Composer's fixed box: sides ``int(length·H)`` and ``int(length·W)`` as 0-d tensors."""
    device = random_device(generator)
    cut_h = torch.full((), sym_floor(length * height), dtype=torch.long, device=device)
    cut_w = torch.full((), sym_floor(length * width), dtype=torch.long, device=device)
    return cut_h, cut_w


def _draw_start(
    size: int, cut: torch.Tensor, uniform: bool, generator: torch.Generator | None
) -> torch.Tensor:
    """The box's first row (or column) along an axis of ``size`` pixels for a side ``cut``.

    By default the centre is uniform over the pixels (the paper's sampling). ``uniform``:
    the start is uniform over the ``size + cut - 1`` positions where the box overlaps the
    image, so every pixel is equally likely to be pasted (Composer's ``uniform_sampling``).
    Tensors throughout: no value is read on the host.
    """
    device = random_device(generator)
    if not uniform:
        centre = torch.randint(0, size, (), generator=generator, device=device)
        return centre - cut // 2
    positions = (size + cut - 1).clamp(min=1)
    u = torch.rand((), dtype=torch.float64, generator=generator, device=device)
    offset = torch.minimum(torch.floor(u * positions).long(), positions - 1)
    return offset + 1 - cut


def _draw_bbox(
    height: int,
    width: int,
    sides: tuple[torch.Tensor, torch.Tensor],
    uniform: bool,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """A box ``(x1, y1, x2, y2)`` (int64, on the generator's device) of sides ``sides``
    (rows, columns), placed by :func:`_draw_start` and clipped to the image.

    Everything stays a tensor: no value is read on the host, so the box can change every step
    without a synchronisation or a recompile.
    """
    cut_h, cut_w = sides
    y1 = _draw_start(height, cut_h, uniform, generator)
    x1 = _draw_start(width, cut_w, uniform, generator)
    return _clip(torch.stack([x1, y1, x1 + cut_w, y1 + cut_h]), height, width)


def _clip(box: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Clip ``(x1, y1, x2, y2)`` rows to the image: x to ``[0, W]``, y to ``[0, H]``."""
    # built on the CPU and moved without waiting: torch.tensor(..., device=cuda) would sync
    limit = torch.tensor([width, height, width, height]).to(box.device, non_blocking=True)
    return torch.minimum(box.clamp(min=0), limit)


def _check_bbox(bbox: object, height: int, width: int) -> torch.Tensor:
    """A fixed box: 4 ints, 4 0-d integer tensors, or a ``(4,)`` integer tensor, as a clipped
    int64 tensor. The order ``x1 <= x2``, ``y1 <= y2`` of tensors is a content check."""
    rule = "bbox must be a tuple of 4 ints (x1, y1, x2, y2), of 0-d integer tensors, or a (4,) integer tensor"
    if isinstance(bbox, torch.Tensor):
        if bbox.shape != (4,) or bbox.is_floating_point() or bbox.dtype == torch.bool:
            raise TypeError(f"{rule}, got a tensor of shape {tuple(bbox.shape)}, {bbox.dtype}")
        box = bbox.long()
    elif isinstance(bbox, Sequence) and len(bbox) == 4:
        items = list(bbox)
        for v in items:
            is_int = isinstance(v, numbers.Integral) and not isinstance(v, bool)
            is_int_tensor = (
                isinstance(v, torch.Tensor)
                and v.ndim == 0
                and not (v.is_floating_point() or v.is_complex() or v.dtype == torch.bool)
            )
            if not (is_int or is_int_tensor):
                raise TypeError(f"{rule}, got {bbox!r}")
        if all(isinstance(v, numbers.Integral) for v in items):
            x1, y1, x2, y2 = (int(v) for v in items)
            if x2 < x1 or y2 < y1:
                raise ValueError(
                    "bbox must be (left, top, right, bottom) with x1 <= x2 and y1 <= y2, "
                    f"got {bbox!r}"
                )
            box = torch.tensor([x1, y1, x2, y2], dtype=torch.long)
        else:
            device = next(v.device for v in items if isinstance(v, torch.Tensor))
            box = torch.stack(
                [torch.as_tensor(v).to(device, non_blocking=True).long() for v in items]
            )
    else:
        raise TypeError(f"{rule}, got {bbox!r}")
    if isinstance(bbox, torch.Tensor) or not all(isinstance(v, numbers.Integral) for v in bbox):
        check_values(
            (box[2] >= box[0]) & (box[3] >= box[1]),
            "bbox must be (left, top, right, bottom) with x1 <= x2 and y1 <= y2",
            lambda: str(box.tolist()),
        )
    return _clip(box, height, width)


def _box_mask(box: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
    """``(H, W)`` bool mask of the half-open box ``(x1, y1, x2, y2)``, from comparisons with
    one arange (both axes at once: five small kernels)."""
    box = box.to(device, non_blocking=True).view(2, 2)  # (x1, y1), (x2, y2)
    at = torch.arange(max(height, width), device=device)
    inside = (at >= box[0].view(2, 1)) & (at < box[1].view(2, 1))  # columns, rows
    return inside[1, :height, None] & inside[0, None, :width]


def _paste(x: torch.Tensor, perm: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """Deterministic core: ``x`` with the box ``box`` of every sample taken from ``x[perm]``.

    A select against a mask built on ``x``'s device (no host read, no data-dependent shape);
    the memory format of ``x`` is kept.
    """
    mask = _box_mask(box, x.shape[-2], x.shape[-1], x.device)
    partner = x[perm.to(x.device, non_blocking=True)]  # keeps the memory format
    if x.requires_grad or torch.compiler.is_compiling():
        return torch.where(mask, partner, x)
    # Written over the gathered copy we own: no second full-size allocation (1.5x faster on
    # the CPU). Not with autograd (out= has no derivative) nor under compile (functional).
    return torch.where(mask, partner, x, out=partner)


def _paste_gathered(x: torch.Tensor, perm: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """:func:`_paste` as one gather (accelerators): every pixel reads its own image or its
    partner's through an int32 ``(B, H, W)`` index, so the partner batch is never copied
    whole (bytes: the output, the input it reads and the index, 1.33x the minimum for float32
    RGB against 2.5x for a gather and a select). ``x`` contiguous or channels_last; the
    result has its memory format."""
    b, h, w = x.shape[0], x.shape[-2], x.shape[-1]
    dev = x.device
    mask = _box_mask(box, h, w, dev)
    own = torch.arange(b, device=dev, dtype=torch.int32).view(b, 1, 1)
    partner = perm.to(dev, torch.int32, non_blocking=True).view(b, 1, 1)
    src = torch.where(mask, partner, own)  # (B, H, W): the image each pixel comes from
    rows = torch.arange(h, device=dev).view(h, 1)
    cols = torch.arange(w, device=dev)
    if x.dim() == 4 and not x.is_contiguous():  # channels_last: gather whole pixels
        pixels = x.permute(0, 2, 3, 1)[src, rows, cols]  # (B, H, W, C), contiguous
        return pixels.permute(0, 3, 1, 2)
    planes = x.reshape(b, math.prod(x.shape[1:-2]), h, w)  # a view: x is contiguous
    mid = torch.arange(planes.shape[1], device=dev).view(-1, 1, 1)
    return planes[src.unsqueeze(1), mid, rows, cols].view(x.shape)


def _gathers(x: torch.Tensor) -> bool:
    """Whether :func:`_paste_gathered` suits ``x``: an accelerator tensor without autograd,
    contiguous or channels_last (on the CPU the select over the gathered copy is faster)."""
    if x.device.type == "cpu" or x.requires_grad or torch.compiler.is_compiling():
        return False
    return x.is_contiguous() or (
        x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    )


def _paste_fixed(
    x: torch.Tensor, perm: torch.Tensor, box: tuple[int, int, int, int]
) -> torch.Tensor:
    """Deterministic core for a box of Python ints (clipped): a copy of ``x`` with the box
    copied from ``x[perm]``. The ints are the caller's, so slicing reads nothing from a device;
    it moves only the box of the partners (2x faster than the mask on the CPU)."""
    x1, y1, x2, y2 = box
    out = x.clone()
    if x2 > x1 and y2 > y1:
        out[..., y1:y2, x1:x2] = x[perm.to(x.device, non_blocking=True), ..., y1:y2, x1:x2]
    return out


def _area_fraction(box: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The pasted fraction of the image (float64 0-d tensor) of a clipped box."""
    extent = (box[2:] - box[:2]).double()
    return extent[0] * extent[1] / (height * width)


def cutmix_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    n_classes: int,
    *,
    alpha: float = 1.0,
    indices: torch.Tensor | None = None,
    bbox: tuple[int, int, int, int] | None = None,
    length: float | None = None,
    uniform_sampling: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Replace a box of every image with the same box of a partner image (CutMix).

    A box is drawn once for the batch: :math:`\lambda \sim \mathrm{Beta}(\alpha, \alpha)`, sides
    :math:`\lfloor H\sqrt{1-\lambda}\rfloor \times \lfloor W\sqrt{1-\lambda}\rfloor`, centre
    uniform over the image, clipped at the border. The labels are mixed by the area actually
    pasted, :math:`a = |\text{box} \cap \text{image}| / (HW)`:

    .. math::
        \tilde x_i = M \odot x_{\pi(i)} + (1 - M) \odot x_i, \qquad
        \tilde y_i = (1 - a)\, e_{y_i} + a\, e_{y_{\pi(i)}}

    with :math:`M` the box mask and :math:`e_c` the one-hot vector of class :math:`c`.

    Composer's two options: ``length`` fixes the box instead of drawing it from λ, at
    :math:`\lfloor \ell H\rfloor \times \lfloor \ell W\rfloor` pixels (what Composer's
    docstring promises; its code derives a different side from that area); the labels are
    still weighted by the clipped box. ``uniform_sampling=True`` places the box so that every
    pixel is equally likely to be pasted: its top-left corner is uniform over the positions
    where it overlaps the image (the default centre sampling, the paper's, pastes the border
    less often).

    Per-step friendly: the box is drawn as tensors and applied as a mask from comparisons with
    ``arange``, so no value is read on the host, and under ``torch.compile(fullgraph=True)``
    nothing recompiles when the box, the permutation or ``alpha`` changes; only the shapes of
    ``x`` and ``y`` and ``n_classes`` are part of the graph. ``generator`` cannot be traced by
    dynamo: inside a compiled step pass ``generator=None`` (torch's global RNG).

    Args:
        x: images ``(B, ..., H, W)``, any dtype.
        y: class indices ``(B,)`` or dense labels ``(B, n_classes)``.
        n_classes: number of classes (``>= 1``).
        alpha: Beta concentration for the box area (``> 0``); ignored when ``bbox`` or
            ``length`` is given.
        indices: the partner of each sample, ``(B,)`` integers in ``[0, B)``; a random
            permutation from ``generator`` when ``None``.
        bbox: a fixed box ``(x1, y1, x2, y2)`` = (left, top, right, bottom) in pixels,
            half-open, ``x`` along the width; clipped to the image. Four ints (constants of a
            compiled graph), four 0-d integer tensors or a ``(4,)`` integer tensor (graph
            inputs: a new box does not recompile). Not with ``length``.
        length: a fixed box side as a fraction of the image, in ``[0, 1]``: the box is
            ``int(length·H) x int(length·W)``, placed at random (Composer's ``length``).
        uniform_sampling: place a drawn box so that every pixel is equally likely to be
            pasted (Composer's ``uniform_sampling``); no effect with ``bbox``.
        generator: source of randomness for the permutation and the box.

    Returns:
        ``(x_mix, y_mix, perm)``: mixed images (dtype, device and memory format of ``x``),
        float labels ``(B, n_classes)`` and the partner indices used.

    Shape:
        - x: :math:`(B, *, H, W)`, y: :math:`(B)` or :math:`(B, K)`
        - x_mix: :math:`(B, *, H, W)`, y_mix: :math:`(B, K)`, perm: :math:`(B)`

    Example:
        >>> import torch, functional as F
        >>> x, y = torch.rand(4, 3, 10, 10), torch.tensor([0, 1, 2, 3])
        >>> perm = torch.tensor([1, 2, 3, 0])  # or None: a random permutation
        >>> x_mix, y_mix, perm = F.cutmix_batch(x, y, 4, indices=perm, bbox=(0, 0, 5, 10))
        >>> y_mix[0, y[0]].item() + y_mix[0, y[perm[0]]].item()
        1.0
        >>> bool((x_mix[:, :, :, :5] == x[perm][:, :, :, :5]).all())
        True

    Reference: Yun et al., *CutMix: Regularization Strategy to Train Strong Classifiers with
    Localizable Features*, ICCV 2019.
    """
    check_tensor(x, "x")
    check_tensor(y, "y")
    if x.ndim < 3:
        raise ValueError(f"x must have shape (B, ..., H, W), got shape {tuple(x.shape)}")
    check_same_batch(x, y, "x", "y")
    n_classes = check_int(n_classes, "n_classes", minimum=1)
    alpha = check_positive(alpha, "alpha")
    uniform = bool(check_bool(uniform_sampling, "uniform_sampling"))
    if length is not None:
        if bbox is not None:
            raise ValueError(
                f"cutmix_batch takes bbox (a fixed box) or length (a fixed side, random place), "
                f"not both; got bbox={bbox!r} and length={length!r}"
            )
        length = check_in_range(length, "length", 0.0, 1.0)
    check_generator(generator)
    batch, height, width = x.shape[0], x.shape[-2], x.shape[-1]
    if height == 0 or width == 0:
        raise ValueError(f"x must have non-empty images, got shape {tuple(x.shape)}")
    y_dense = dense_labels(y, n_classes)
    if indices is None:
        perm = random_permutation(batch, generator, x.device)
    else:
        perm = check_indices(indices, batch).to(x.device, non_blocking=True)
    if bbox is None:
        sides = (
            _sides_from_alpha(height, width, alpha, generator)
            if length is None
            else _sides_from_length(height, width, length, generator)
        )
        box = _draw_bbox(height, width, sides, uniform, generator)
    else:
        box = _check_bbox(bbox, height, width)
    if (
        bbox is not None
        and not isinstance(bbox, torch.Tensor)
        and all(isinstance(v, numbers.Integral) for v in bbox)
    ):
        x1, y1, x2, y2 = (int(v) for v in bbox)
        clip = (
            min(max(x1, 0), width),
            min(max(y1, 0), height),
            min(max(x2, 0), width),
            min(max(y2, 0), height),
        )
        x_mix = _paste_fixed(x, perm, clip)
    elif _gathers(x):
        x_mix = _paste_gathered(x, perm, box)
    else:
        x_mix = _paste(x, perm, box)
    keep = 1.0 - _area_fraction(box, height, width)
    partner = y_dense[perm.to(y_dense.device, non_blocking=True)]
    weight = keep.to(device=partner.device, dtype=partner.dtype, non_blocking=True)
    y_mix = partner.lerp_(y_dense, weight)
    return x_mix, y_mix, perm
