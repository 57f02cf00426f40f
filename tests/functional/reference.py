"""Reference oracles: slow, obviously correct loops that the fast kernels are checked against.

Every oracle works in float64 on small inputs and follows the written definition literally.
"""

from __future__ import annotations

import torch


def blur_2d(x: torch.Tensor, kernel: torch.Tensor, stride: tuple[int, int]) -> torch.Tensor:
    """``y[b,c,i,j] = Σ_uv k[c,u,v] · x[b,c, s_h·i + u - p_h, s_w·j + v - p_w]``, zeros outside.

    ``kernel`` is ``(C, kH, kW)``; ``p = (k - 1) // 2``.
    """
    x = x.double()
    kernel = kernel.double()
    batch, channels, height, width = x.shape
    k_h, k_w = kernel.shape[-2:]
    p_h, p_w = (k_h - 1) // 2, (k_w - 1) // 2
    out_h, out_w = (height - 1) // stride[0] + 1, (width - 1) // stride[1] + 1
    out = torch.zeros(batch, channels, out_h, out_w, dtype=torch.float64)
    for i in range(out_h):
        for j in range(out_w):
            for u in range(k_h):
                for v in range(k_w):
                    r, c = stride[0] * i + u - p_h, stride[1] * j + v - p_w
                    if 0 <= r < height and 0 <= c < width:
                        out[:, :, i, j] += kernel[:, u, v] * x[:, :, r, c]
    return out


def max_pool_dense(
    x: torch.Tensor, kernel: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int]
) -> torch.Tensor:
    """Stride-1 max over windows; positions outside the input are ignored (-inf padding)."""
    x = x.double()
    batch, channels, height, width = x.shape
    out_h = height + 2 * padding[0] - dilation[0] * (kernel[0] - 1)
    out_w = width + 2 * padding[1] - dilation[1] * (kernel[1] - 1)
    out = torch.full((batch, channels, out_h, out_w), float("-inf"), dtype=torch.float64)
    for i in range(out_h):
        for j in range(out_w):
            for u in range(kernel[0]):
                for v in range(kernel[1]):
                    r = i - padding[0] + u * dilation[0]
                    c = j - padding[1] + v * dilation[1]
                    if 0 <= r < height and 0 <= c < width:
                        out[:, :, i, j] = torch.maximum(out[:, :, i, j], x[:, :, r, c])
    return out


def one_hot(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    out = torch.zeros(len(y), n_classes, dtype=torch.float64)
    for i, c in enumerate(y.tolist()):
        out[i, c] = 1.0
    return out


def mixup(
    x: torch.Tensor, y: torch.Tensor, lam: list[float], perm: list[int], n_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    dense = one_hot(y, n_classes) if y.ndim == 1 else y.double()
    xs, ys = [], []
    for i, j in enumerate(perm):
        xs.append((1 - lam[i]) * x[i] + lam[i] * x[j])
        ys.append((1 - lam[i]) * dense[i] + lam[i] * dense[j])
    return torch.stack(xs), torch.stack(ys)


def box_mask(height: int, width: int, box: tuple[int, int, int, int]) -> torch.Tensor:
    """Pixels of the half-open box ``(x1, y1, x2, y2)`` that lie in the image."""
    x1, y1, x2, y2 = box
    mask = torch.zeros(height, width, dtype=torch.bool)
    for r in range(height):
        for c in range(width):
            if y1 <= r < y2 and x1 <= c < x2:
                mask[r, c] = True
    return mask


def cutmix(
    x: torch.Tensor,
    y: torch.Tensor,
    perm: list[int],
    box: tuple[int, int, int, int],
    n_classes: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    height, width = x.shape[-2:]
    mask = box_mask(height, width, box)
    area = mask.sum().item() / (height * width)  # the area actually pasted
    dense = one_hot(y, n_classes) if y.ndim == 1 else y.double()
    xs, ys = [], []
    for i, j in enumerate(perm):
        xs.append(torch.where(mask, x[j], x[i]))
        ys.append((1 - area) * dense[i] + area * dense[j])
    return torch.stack(xs), torch.stack(ys)


def cutout(x: torch.Tensor, centres: list[tuple[int, int]], side: int) -> torch.Tensor:
    """Zero the square of ``side`` pixels starting ``side // 2`` above/left of each centre."""
    out = x.clone()
    height, width = x.shape[-2:]
    for cy, cx in centres:
        for r in range(cy - side // 2, cy - side // 2 + side):
            for c in range(cx - side // 2, cx - side // 2 + side):
                if 0 <= r < height and 0 <= c < width:
                    out[..., r, c] = 0
    return out


def colout(x: torch.Tensor, rows: list[int], cols: list[int]) -> torch.Tensor:
    out = torch.empty(*x.shape[:-2], len(rows), len(cols), dtype=x.dtype)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            out[..., i, j] = x[..., r, c]
    return out


def smooth_labels(n_classes: int, targets: torch.Tensor, alpha: float) -> torch.Tensor:
    """For index targets ``(N, *)``: ``(1 - α)·onehot + α/C`` with classes on dim 1."""
    shape = (targets.shape[0], n_classes, *targets.shape[1:])
    out = torch.empty(shape, dtype=torch.float64)
    flat_targets = targets.reshape(targets.shape[0], -1)
    flat_out = out.view(targets.shape[0], n_classes, -1)
    for n in range(shape[0]):
        for k in range(flat_targets.shape[1]):
            for c in range(n_classes):
                on = 1.0 if flat_targets[n, k].item() == c else 0.0
                flat_out[n, c, k] = (1 - alpha) * on + alpha / n_classes
    return out


def seq_split(t: torch.Tensor, length: int) -> torch.Tensor:
    """Rows of ``length`` positions: row b's pieces, in order, for every b."""
    rows = []
    for b in range(t.shape[0]):
        for start in range(0, (t.shape[1] // length) * length, length):
            rows.append(t[b, start : start + length])
    return torch.stack(rows)


def ema(model_tensors: dict, ema_tensors: dict, smoothing: float) -> dict:
    out = {}
    for name, value in model_tensors.items():
        old = ema_tensors[name]
        if value.is_floating_point():
            out[name] = smoothing * old.double() + (1 - smoothing) * value.double()
        else:
            out[name] = value.clone()
    return out
