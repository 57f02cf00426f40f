"""Helpers of the batch and label ops (mixup, cutmix, cutout, colout, blur, progressive
resizing, label smoothing, selective backprop).

Random draws made on the generator's device (:func:`random_device`,
:func:`random_permutation`, :func:`sample_beta`), gathers that keep a channels_last input
channels_last (:func:`memory_format_of`, :func:`gather_rows_cols`), and labels given as class
indices or dense targets turned into dense float targets (:func:`dense_labels`). Nothing here
reads a device value on the host.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from functional._args import check_tensor
from functional._values import check_class_indices

__all__ = [
    "array_as_pil",
    "dense_labels",
    "gather_rows_cols",
    "memory_format_of",
    "random_device",
    "random_permutation",
    "sample_beta",
]


def random_device(generator: torch.Generator | None) -> torch.device:
    """The device random parameters are drawn on: the generator's, or the CPU for torch's global RNG.

    Drawing on the generator's device (not the data's) makes a seeded CPU generator give the
    same parameters whatever device the data lives on. Moving the draws to the data with
    ``.to(device, non_blocking=True)`` never reads them on the host.
    """
    return torch.device("cpu") if generator is None else generator.device


def random_permutation(
    n: int, generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    """A uniformly random permutation of ``range(n)`` (int64) on ``device``."""
    perm = torch.randperm(n, generator=generator, device=random_device(generator))
    return perm.to(device, non_blocking=True)


# Below this, Beta(alpha, alpha) is a fair coin on {0, 1} to float64 precision; clamping keeps
# 1 / alpha finite (a subnormal alpha would give inf and then NaN).
_TINY_ALPHA = 1e-300


def sample_beta(
    alpha: float, size: tuple[int, ...], generator: torch.Generator | None
) -> torch.Tensor:
    r"""Samples of Beta(alpha, alpha) as float64 on the generator's device, robust for tiny ``alpha``.

    ``Beta(a, a) = G1 / (G1 + G2) = sigmoid(log G1 - log G2)`` with ``G ~ Gamma(a)``; for small
    ``a`` the gammas underflow to 0, so the logs are taken with Marsaglia and Tsang's boost
    ``log G = log G' + log(U) / a``, ``G' ~ Gamma(a + 1)``, ``U ~ Uniform(0, 1)``, and the
    difference is formed before dividing by ``a``: finite terms, so the result is never NaN
    (a difference of two infinities) and always lies in ``[0, 1]``, whatever ``a > 0``.
    ``alpha`` may be a symbolic float under ``torch.compile`` (no recompile when it changes): it
    is put on a tensor before any arithmetic, which dynamo of torch 2.6 would specialise on.
    """
    device = random_device(generator)
    shape = (2, *size)
    a = (torch.zeros((), dtype=torch.float64, device=device) + alpha).clamp_min(_TINY_ALPHA)
    conc = torch.zeros(shape, dtype=torch.float64, device=device) + (a + 1.0)
    gamma = torch._standard_gamma(conc, generator=generator)
    uniform = torch.rand(shape, dtype=torch.float64, device=device, generator=generator)
    log_gamma = gamma.clamp_min(1e-300).log()
    log_uniform = torch.log1p(-uniform)  # 1 - U lies in (0, 1]: finite
    logit = (log_gamma[0] - log_gamma[1]) + (log_uniform[0] - log_uniform[1]) * a.reciprocal()
    return torch.sigmoid(logit)


def array_as_pil(array: np.ndarray, like: Image.Image) -> Image.Image:
    """The pixel ``array`` (``np.asarray`` of an image, possibly resized or edited) as a PIL
    image of ``like``'s mode, palette and info (any mode: bit-packed '1' included)."""
    array = np.ascontiguousarray(array)
    if like.mode == "1":  # NumPy sees bools; PIL stores bits
        out = Image.fromarray(array)
    else:
        out = Image.frombytes(like.mode, (array.shape[1], array.shape[0]), array.tobytes())
    if like.palette is not None:
        out.putpalette(like.palette)
    out.info.update(like.info)
    return out


def memory_format_of(x: torch.Tensor) -> torch.memory_format:
    """``torch.channels_last`` (or ``channels_last_3d``) for such an input, else contiguous."""
    if x.ndim == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if (
        x.ndim == 5
        and not x.is_contiguous()
        and x.is_contiguous(memory_format=torch.channels_last_3d)
    ):
        return torch.channels_last_3d
    return torch.contiguous_format


def gather_rows_cols(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``x[..., rows, :][..., cols]`` (dims -2 and -1) in one gather, keeping channels_last.

    ``rows``/``cols`` are int64 index tensors (moved to ``x``'s device without a host read).
    A channels_last ``(B, C, H, W)`` input is gathered as its ``(B, H, W, C)`` view, so the
    result comes out channels_last with no extra copy.
    """
    rows = rows.to(x.device, non_blocking=True)
    cols = cols.to(x.device, non_blocking=True)
    if memory_format_of(x) == torch.channels_last:
        return x.permute(0, 2, 3, 1)[:, rows[:, None], cols].permute(0, 3, 1, 2)
    # One gather over both dims: on the CPU it is several times faster than two index_selects.
    return x[..., rows[:, None], cols]


def dense_labels(
    y: torch.Tensor, n_classes: int, name: str = "y", *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``y`` as dense float labels ``(B, n_classes)``: class indices ``(B,)`` become one-hot.

    Index labels must be integers in ``[0, n_classes)``; dense labels must have ``n_classes``
    columns. Floating dense labels keep their dtype unless ``dtype`` is given; everything else
    becomes ``dtype`` or the default float dtype.
    """
    check_tensor(y, name)
    if y.ndim == 1:
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise TypeError(
                f"{name} with shape (B,) must hold integer class indices, got dtype {y.dtype}"
            )
        check_class_indices(y, n_classes, name)
        out_dtype = dtype or torch.get_default_dtype()
        # A comparison with arange, not torch's one_hot: that reads the labels' range on the host.
        classes = torch.arange(n_classes, device=y.device)
        return (y.unsqueeze(-1) == classes).to(out_dtype)
    if y.ndim == 2:
        if y.shape[1] != n_classes:
            raise ValueError(
                f"{name} with shape (B, n_classes) must have n_classes={n_classes} columns, "
                f"got shape {tuple(y.shape)}"
            )
        out_dtype = dtype or (y.dtype if y.is_floating_point() else torch.get_default_dtype())
        return y.to(out_dtype)
    raise ValueError(
        f"{name} must be class indices (B,) or dense labels (B, n_classes), "
        f"got shape {tuple(y.shape)}"
    )
