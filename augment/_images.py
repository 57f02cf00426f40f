"""Image kinds of ``augment`` (PIL images, (C, H, W) uint8 or [0, 1] float tensors) and access
to their pixels.

Every operation works on a loaded 'RGB' or 'L' PIL image. :func:`as_pil` checks what the caller
passed and converts a tensor, remembering its device; :func:`from_pil` and :func:`from_array`
give the result back as the kind the caller passed; :func:`pixels` and :func:`point` read and
map the pixels of a PIL image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import torch
from PIL import Image

__all__ = [
    "ImageLike",
    "as_pil",
    "from_array",
    "from_pil",
    "map_images",
    "per_band",
    "pixels",
    "point",
]

ImageLike: TypeAlias = Image.Image | torch.Tensor

_MODES = ("RGB", "L")


_FLOATS = (torch.float16, torch.float32, torch.float64)


class _TensorKind:
    """Remembers where a (C, H, W) tensor came from (device, dtype), to hand back the same kind."""

    __slots__ = ("device", "dtype")

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.uint8) -> None:
        self.device = device
        self.dtype = dtype


def _float_as_uint8(img: torch.Tensor, name: str) -> torch.Tensor:
    """A float image with values in [0, 1] as uint8 levels ``round(255·x)`` (on the CPU: the
    image is read there anyway to become a PIL image)."""
    values = img.detach().to("cpu", torch.float64, copy=True)  # never the caller's tensor
    if values.numel() and not bool(((values >= 0) & (values <= 1)).all()):
        bad = values[~((values >= 0) & (values <= 1))]
        raise ValueError(
            f"{name} as a float tensor must hold values in [0, 1], got values such as "
            f"{float(bad[0])}; scale it first (e.g. x / 255 for 0..255 data)"
        )
    return values.mul_(255).round_().to(torch.uint8)


def as_pil(
    img: object, name: str = "img", *, allow_float: bool = False
) -> tuple[Image.Image, _TensorKind | None]:
    """The image as a loaded 'RGB' or 'L' PIL image, and how to give the result back.

    A (C, H, W) ``torch.uint8`` tensor with C = 3 becomes 'RGB', with C = 1 'L'. With
    ``allow_float``, a float16/32/64 tensor with values in [0, 1] is taken too, as the levels
    ``round(255·x)``; the result comes back in its dtype, as ``level / 255``.
    """
    if isinstance(img, Image.Image):
        if img.mode not in _MODES:
            raise ValueError(
                f"{name} must be a PIL image of mode 'RGB' or 'L', got mode {img.mode!r}; "
                f"convert it first, e.g. {name}.convert('RGB')"
            )
        if img.width == 0 or img.height == 0:
            raise ValueError(f"{name} must not be empty, got size {img.size}")
        img.load()
        return img, None
    if isinstance(img, torch.Tensor):
        float_image = allow_float and img.dtype in _FLOATS
        if img.dtype != torch.uint8 and not float_image:
            floats = " or a float16/32/64 tensor with values in [0, 1]" if allow_float else ""
            raise TypeError(
                f"{name} must be a torch.uint8 tensor (values 0..255){floats}, got dtype "
                f"{img.dtype}; convert with (x * 255).round().to(torch.uint8) for a float image "
                "in [0, 1]"
            )
        _check_image_shape(img, name)
        levels = _float_as_uint8(img, name) if float_image else img.detach().cpu()
        arr = levels.permute(1, 2, 0).numpy()
        arr = np.ascontiguousarray(arr[:, :, 0] if img.shape[0] == 1 else arr)
        return Image.fromarray(arr), _TensorKind(img.device, img.dtype)
    raise TypeError(
        f"{name} must be a PIL.Image.Image or a (C, H, W) torch.uint8 tensor, "
        f"got {type(img).__name__}"
    )


def _check_image_shape(img: torch.Tensor, name: str) -> None:
    """A (C, H, W) tensor with C = 1 or 3, not empty, with data (not on the meta device)."""
    if img.ndim != 3 or img.shape[0] not in (1, 3):
        raise ValueError(
            f"{name} must be a (C, H, W) tensor with C = 1 or 3, got shape {tuple(img.shape)}"
        )
    if img.shape[1] == 0 or img.shape[2] == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(img.shape)}")
    if img.is_meta:
        raise ValueError(
            f"{name} is on the meta device, which holds no pixel values to augment; "
            "pass a tensor with data (CPU or accelerator)"
        )


def map_images(one: Callable[[ImageLike], ImageLike], img: object) -> ImageLike:
    """``one`` on each image of an ``(N, C, H, W)`` tensor (stacked back, in order), or on
    ``img`` itself for anything else (one image, or what ``one`` refuses)."""
    if not (isinstance(img, torch.Tensor) and img.ndim == 4):
        return one(img)  # type: ignore[arg-type]
    if img.shape[0] == 0:
        return img.clone()
    return torch.stack([one(image) for image in img])  # type: ignore[misc]


def pixels(img: Image.Image) -> np.ndarray:
    """A read-only (H, W) ('L') or (H, W, 3) ('RGB') uint8 view of a copy of the pixels."""
    shape = (img.height, img.width) if img.mode == "L" else (img.height, img.width, 3)
    return np.frombuffer(img.tobytes(), dtype=np.uint8).reshape(shape)


def from_array(arr: np.ndarray, kind: _TensorKind | None) -> Image.Image | torch.Tensor:
    """An (H, W) or (H, W, C) uint8 array we own, as the kind ``as_pil`` recorded."""
    if kind is None:
        h, w = arr.shape[:2]
        return Image.frombytes("L" if arr.ndim == 2 else "RGB", (w, h), arr)
    t = torch.from_numpy(arr)
    t = t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()
    if kind.dtype != torch.uint8:
        compute = torch.float64 if kind.dtype == torch.float64 else torch.float32
        t = t.to(compute).div_(255).to(kind.dtype)
    return t.to(kind.device)


def from_pil(img: Image.Image, kind: _TensorKind | None) -> Image.Image | torch.Tensor:
    """A PIL result, as the kind ``as_pil`` recorded."""
    if kind is None:
        return img
    return from_array(np.array(img), kind)


def point(img: Image.Image, lut: bytes) -> Image.Image:
    """Map every pixel through ``lut`` (256 bytes per band)."""
    # ``Image.point`` re-rounds the table in a Python loop on every call; the core method takes
    # the bytes as they are. Fall back to the public method if the core API ever moves.
    try:
        return img._new(img.im.point(lut, None))
    except AttributeError:  # pragma: no cover - depends on the Pillow version
        return img.point(list(lut))


def per_band(lut: bytes, img: Image.Image) -> bytes:
    """One band's table repeated for every band of ``img``."""
    return lut * len(img.getbands())
