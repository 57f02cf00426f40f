"""Draw the gallery's figures at build time, from real photos and the public API only.

The photos are scikit-learn's two bundled sample images (``load_sample_images()``: a temple in
China and a flower), which ship with the library: nothing is downloaded and nothing is drawn by
hand. Every figure uses fixed seeds and matplotlib's Agg backend, so two builds draw the same
pictures. The PNG files go to ``docs/gallery/_generated/`` (git-ignored) and
``docs/gallery/index.md`` shows them.

Run alone: ``python docs/_ext/gallery.py OUT_DIR``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from PIL import Image

OUT_NAME = "_generated"

PRIMITIVES = (
    "autocontrast",
    "equalize",
    "posterize",
    "solarize",
    "rotate",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
    "color",
    "contrast",
    "brightness",
    "sharpness",
)


def sample_photos(width: int = 240) -> list[Image.Image]:
    """scikit-learn's two sample photos (china.jpg, flower.jpg), scaled to ``width`` pixels."""
    from sklearn.datasets import load_sample_images

    photos = []
    for array in load_sample_images().images:
        img = Image.fromarray(np.asarray(array))
        height = round(img.height * width / img.width)
        photos.append(img.resize((width, height), Image.Resampling.BICUBIC))
    return photos


def square_crops(photos: Sequence[Image.Image], size: int = 128) -> torch.Tensor:
    """A uint8 batch (4, 3, size, size): two square crops of each photo."""
    crops = []
    for img in photos:
        big = img.resize((img.width * 2 * size // img.height, 2 * size), Image.Resampling.BICUBIC)
        for left in (big.width // 5, big.width // 2):
            box = (left, size // 2, left + size, size // 2 + size)
            crops.append(torch.from_numpy(np.array(big.crop(box))).permute(2, 0, 1))
    return torch.stack(crops)


def _show(ax: Any, img: Image.Image | torch.Tensor, title: str = "") -> None:
    if isinstance(img, torch.Tensor):
        img = img.detach().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    ax.imshow(img)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def _grid(rows: int, cols: int, cell: float = 1.9, ratio: float = 0.7) -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows, cols, figsize=(cols * cell, rows * cell * ratio + 0.3))
    return fig, np.asarray(axes).reshape(rows, cols)


def _save(fig: Any, out: Path, name: str) -> Path:
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def severity_figure(out: Path, photos: Sequence[Image.Image], which: str) -> Path:
    """AugMix or RandAugment at several severities, three draws each."""
    import augment

    if which == "augmix":
        severities: Sequence[float] = (1, 3, 6, 10)

        def make(s: float, seed: int) -> Callable[[Image.Image], Image.Image]:
            return augment.AugMix(severity=s, rng=random.Random(seed))
    else:
        severities = (1, 5, 9, 10)

        def make(s: float, seed: int) -> Callable[[Image.Image], Image.Image]:
            return augment.RandAugment(severity=s, depth=2, rng=random.Random(seed))

    draws = 2
    fig, axes = _grid(len(photos) * draws, len(severities) + 1)
    for p, photo in enumerate(photos):
        for d in range(draws):
            row = axes[p * draws + d]
            _show(row[0], photo, "original" if p == d == 0 else "")
            for j, s in enumerate(severities):
                _show(
                    row[j + 1], make(s, 10 * p + d)(photo), f"severity {s}" if p == d == 0 else ""
                )
    return _save(fig, out, f"{which}_severities.png")


def _other_direction(op: Callable[..., Image.Image], photo: Image.Image) -> int:
    """A seed whose random direction differs from seed 0's (0 for operations without one)."""
    first = np.asarray(op(photo, 10, rng=random.Random(0)))
    for seed in range(1, 64):
        if not np.array_equal(first, np.asarray(op(photo, 10, rng=random.Random(seed)))):
            return seed
    return 0


def primitives_figure(out: Path, photo: Image.Image) -> Path:
    """The point operations at levels 0 to 10; the others at levels 10 to 0 to 10, both ways."""
    import augment

    point = PRIMITIVES[:4]
    levels = (0, 2.5, 5, 7.5, 10)
    fig, axes = _grid(len(PRIMITIVES), len(levels), cell=1.6)
    for i, name in enumerate(PRIMITIVES):
        op = getattr(augment, name)
        if name in point:
            cells = [(level, 0, f"level {level}") for level in levels]
        else:
            other = _other_direction(op, photo)
            cells = [
                (10, 0, "10, one way"),
                (5, 0, "5"),
                (0, 0, "0"),
                (5, other, "5"),
                (10, other, "10, other way"),
            ]
        for j, (level, seed, title) in enumerate(cells):
            _show(axes[i, j], op(photo, level, rng=random.Random(seed)))
            axes[i, j].set_title(title, fontsize=8)
        axes[i, 0].set_ylabel(name, fontsize=9, rotation=0, ha="right", va="center")
    return _save(fig, out, "primitives.png")


def batched_figure(out: Path, photo: Image.Image) -> Path:
    """One photo repeated 8 times through BatchAugMix and BatchRandAugment: 8 different draws."""
    import augment

    x = torch.from_numpy(np.array(photo)).permute(2, 0, 1).unsqueeze(0).repeat(8, 1, 1, 1)
    mods = {
        "BatchAugMix": augment.BatchAugMix(severity=3, generator=torch.Generator().manual_seed(0)),
        "BatchRandAugment": augment.BatchRandAugment(
            severity=9, generator=torch.Generator().manual_seed(0)
        ),
    }
    fig, axes = _grid(2 * len(mods), 4, cell=2.2, ratio=0.75)
    for i, (label, mod) in enumerate(mods.items()):
        y = mod(x)
        for j in range(8):
            row, col = 2 * i + j // 4, j % 4
            _show(axes[row, col], y[j], f"{label}, sample {j}")
    return _save(fig, out, "batched.png")


def batch_ops_figure(out: Path, batch: torch.Tensor) -> Path:
    """MixUp, CutMix, Cutout, ColOut and blur on one batch of four crops."""
    import functional as F

    g = torch.Generator().manual_seed(0)
    x = batch.float()
    y = torch.arange(len(batch))
    perm = torch.tensor([1, 2, 3, 0])
    rows: dict[str, torch.Tensor] = {"input": x}
    rows["mixup_batch, λ=0.3"] = F.mixup_batch(x, y, 0.3, n_classes=4, indices=perm)[0]
    rows["cutmix_batch"] = F.cutmix_batch(x, y, n_classes=4, indices=perm, generator=g)[0]
    rows["cutout, 2 holes of 0.3"] = F.cutout(x, 2, 0.3, per_sample=True, generator=g)
    rows["colout_batch (smaller)"] = F.colout_batch(x, 0.15, 0.15, generator=g)
    blurred = x
    for _ in range(4):
        blurred = F.blur_2d(blurred)
    rows["blur_2d, 4 times"] = blurred
    rows["blur_2d, stride 2"] = F.blur_2d(x, stride=2)
    fig, axes = _grid(len(rows), len(batch), cell=1.6, ratio=1.0)
    for i, (label, images) in enumerate(rows.items()):
        for j in range(len(batch)):
            _show(axes[i, j], images[j], f"sample {j}" if i == 0 else "")
        axes[i, 0].set_ylabel(label, fontsize=8)
    return _save(fig, out, "batch_ops.png")


def schedules_figure(out: Path) -> Path:
    """Progressive resizing, sequence-length warmup, stochastic depth warmup, EMA weights."""
    import functional as F

    progress = np.linspace(0.0, 1.0, 401)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0, 0]
    for init, fine in ((0.5, 0.2), (0.25, 0.2), (0.5, 0.0)):
        scale = [F.progressive_resizing_scale(p, init, fine) for p in progress]
        ax.plot(progress, scale, label=f"initial_scale={init}, finetune_fraction={fine}")
    ax.set(title="progressive_resizing_scale", xlabel="training progress", ylabel="scale")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    for duration in (0.3, 0.6):
        length = [F.seq_length_warmup_length(p, duration, 8, 1024, 8) for p in progress]
        ax.plot(progress, length, label=f"duration={duration} (8 to 1024, step 8)")
    ax.set(title="seq_length_warmup_length", xlabel="training progress", ylabel="sequence length")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    for warmup in (0.0, 0.1, 0.3):
        rate = [F.stochastic_depth_drop_rate(p, 0.2, warmup) for p in progress]
        ax.plot(progress, rate, label=f"drop_rate=0.2, drop_warmup={warmup}")
    ax.set(title="stochastic_depth_drop_rate", xlabel="training progress", ylabel="drop rate")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    age = np.arange(0, 601)
    for half_life in (25, 100, 250):
        s = F.ema_smoothing(half_life)
        ax.plot(age, (1 - s) * s**age, label=f"half_life={half_life} (smoothing {s:.4f})")
    ax.set(
        title="compute_ema with ema_smoothing(half_life)",
        xlabel="age of an update (steps)",
        ylabel="weight in the average",
    )
    ax.legend(fontsize=8)
    return _save(fig, out, "schedules.png")


def generate(out: Path) -> list[Path]:
    """Draw every figure into ``out``; returns the files written."""
    torch.manual_seed(0)  # nothing should use it: every draw below has its own seed
    out.mkdir(parents=True, exist_ok=True)
    photos = sample_photos()
    return [
        severity_figure(out, photos, "augmix"),
        severity_figure(out, photos, "randaugment"),
        primitives_figure(out, photos[1].resize((180, 120))),
        batched_figure(out, photos[0].resize((144, 96))),
        batch_ops_figure(out, square_crops(photos)),
        schedules_figure(out),
    ]


def _on_builder_inited(app: Any) -> None:
    from sphinx.util import logging

    start = time.perf_counter()
    files = generate(Path(app.srcdir) / "gallery" / OUT_NAME)
    logging.getLogger(__name__).info(
        f"gallery: {len(files)} figures in {time.perf_counter() - start:.1f} s"
    )


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1])):
        print(path)
