"""Independent, obviously-correct references for the augment primitives (slow loops, NumPy)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from PIL import Image

Coords = Callable[[np.ndarray, np.ndarray, int, int], tuple[np.ndarray, np.ndarray]]


def arr(img: Image.Image) -> np.ndarray:
    return np.array(img)


def image(rs: np.random.Generator, h: int, w: int, mode: str, lo: int = 0, hi: int = 255):
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    return Image.fromarray(rs.integers(lo, hi + 1, size=shape, dtype=np.uint8), mode)


def channels(a: np.ndarray) -> list[np.ndarray]:
    return [a] if a.ndim == 2 else [a[..., c] for c in range(a.shape[-1])]


def stack(chs: list[np.ndarray]) -> np.ndarray:
    return chs[0] if len(chs) == 1 else np.stack(chs, axis=-1)


def solarize(a: np.ndarray, threshold: int) -> np.ndarray:
    return np.where(a >= threshold, 255 - a, a).astype(np.uint8)


def posterize(a: np.ndarray, bits: int) -> np.ndarray:
    keep = 256 - 2 ** (8 - bits)  # the top `bits` bits set
    return (a & keep).astype(np.uint8)


def autocontrast(a: np.ndarray) -> np.ndarray:
    out = []
    for ch in channels(a):
        lo, hi = int(ch.min()), int(ch.max())
        if lo == hi:
            out.append(ch.copy())
            continue
        # only the values in [lo, hi] occur
        table = [
            math.floor(Fraction((v - lo) * 255, hi - lo) + Fraction(1, 2)) if lo <= v <= hi else 0
            for v in range(256)
        ]
        out.append(np.array(table, dtype=np.uint8)[ch])
    return stack(out)


def equalize(a: np.ndarray) -> np.ndarray:
    """Histogram equalisation with Pillow's step rule, one pixel value at a time."""
    out = []
    for ch in channels(a):
        counts = [int((ch == v).sum()) for v in range(256)]
        present = [c for c in counts if c]
        step = (sum(present) - present[-1]) // 255 if len(present) > 1 else 0
        if step == 0:
            out.append(ch.copy())
            continue
        table, running = [], 0
        for v in range(256):
            table.append(min(255, (step // 2 + running) // step))
            running += counts[v]
        out.append(np.array(table, dtype=np.uint8)[ch])
    return stack(out)


def inverse_map(a: np.ndarray, coords: Coords) -> np.ndarray:
    """Nearest-neighbour resampling: output pixel centre (x+.5, y+.5) reads ``coords`` of it."""
    h, w = a.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    xi, yi = coords(xs, ys, w, h)
    xi, yi = np.floor(xi).astype(np.int64), np.floor(yi).astype(np.int64)
    inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
    out = np.zeros_like(a)
    out[inside] = a[yi[inside], xi[inside]]
    return out


def rotation(degrees: float) -> Coords:
    """Counter-clockwise rotation (y down) about the image centre, as source coordinates."""
    t = math.radians(degrees)

    def coords(xs, ys, w, h):
        cx, cy = w / 2, h / 2
        return (
            math.cos(t) * (xs - cx) - math.sin(t) * (ys - cy) + cx,
            math.sin(t) * (xs - cx) + math.cos(t) * (ys - cy) + cy,
        )

    return coords


def shear_x(s: float) -> Coords:
    return lambda xs, ys, w, h: (xs + s * ys, ys)


def shear_y(s: float) -> Coords:
    return lambda xs, ys, w, h: (xs, ys + s * xs)


def shift_x(t: int) -> Coords:
    return lambda xs, ys, w, h: (xs + t, ys)


def shift_y(t: int) -> Coords:
    return lambda xs, ys, w, h: (xs, ys + t)


def mismatch(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pixels that differ in any channel."""
    diff = a != b
    if diff.ndim == 3:
        diff = diff.any(axis=-1)
    return float(diff.mean())
